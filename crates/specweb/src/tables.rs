//! The user and ad tables the CAD requests read (`User.Personality` from upfgen99,
//! `Custom.Ads` from cadgen99), byte for byte, and the ad selection (TUX's `find_ad`).
//! specweb99.md §3.3.

/// Ads in `Custom.Ads` (`CADFILE_ENTRIES`).
pub const ADS: u32 = 360;
/// Every this many ads one matches everybody (`CAD_SEARCH_INTERVAL`); also the length
/// of each expired range.
pub const SEARCH_INTERVAL: u32 = 24;
/// `min_match` of an ordinary ad (`MAX_CAD_WEIGHT`): the highest weight a match can have.
pub const MAX_AD_WEIGHT: u32 = 75;
/// Bytes of one `User.Personality` record (`"%5d %8X\n"`).
pub const USER_RECORD: usize = 15;
/// Bytes of one `Custom.Ads` record (`"%5d %8X %8X %3d %10d\n"`).
pub const AD_RECORD: usize = 39;
/// How long before `ts` an expired ad expired: 366 days.
const EXPIRED_BEFORE: i64 = 31_622_400;

const GENDER: u32 = 0x3000_0000;
const AGE: u32 = 0x0F00_0000;
const REGION: u32 = 0x00F0_0000;
const INTEREST1: u32 = 0x000F_FC00;
const INTEREST2: u32 = 0x0000_03FF;

/// The demographics of record `j` (upfgen99 passes `j % 360`). The two generators differ
/// only in interest 2's entries 4 and 5, which cadgen99 has swapped; both are kept.
pub fn demographics(j: u32, for_ads: bool) -> u32 {
    let mut k = (j * 10000) % 12301;
    if k == 0 {
        k = 12300;
    }
    let c4 = k & 0xF;
    let c3 = (k >> 4) & 0xF;
    let c2 = (k >> 8) & 0xF;
    let gender = if k % 2 == 1 { 0x2000_0000 } else { 0x1000_0000 };
    let age = 0x0800_0000 >> (k % 4);
    let region = 0x0080_0000 >> ((c4 + c2) % 4);
    let interest1 = 0x0008_0000 >> ((c4 + c3) % 10);
    let interest2 = match (c4 % 10, for_ads) {
        (4, false) | (5, true) => 0x20,
        (5, false) | (4, true) => 0x10,
        (n, _) => 0x200 >> n,
    };
    gender | age | region | interest1 | interest2
}

fn record_key(j: u32) -> u32 {
    let k = (j * 10000) % 12301;
    if k == 0 {
        12300
    } else {
        k
    }
}

/// User `j`'s demographics, as `User.Personality` records them (without making the file).
pub fn user_demographics(j: u32) -> u32 {
    demographics(j % ADS, false)
}

/// `User.Personality` for `users` users (`max(maxload, maxthread)`): `"%5d %8X\n"` each.
pub fn user_personality(users: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(users as usize * USER_RECORD);
    for j in 0..users {
        out.extend_from_slice(format!("{j:5} {:8X}\n", user_demographics(j)).as_bytes());
    }
    out
}

/// One ad of `Custom.Ads`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ad {
    pub demographics: u32,
    /// Five 4-bit weights: gender (bits 16–19), age, region, interest 1, interest 2 (0–3).
    pub weightings: u32,
    pub min_match: u32,
    /// Unix time.
    pub expiry: i64,
}

/// What Reset passes to cadgen99.
#[derive(Debug, Clone, Copy)]
pub struct AdParams {
    /// Run time of the iteration in seconds (0: 1800).
    pub pttime: u32,
    pub maxthread: u32,
    /// First ads of the two expired ranges of 24.
    pub expired: [u32; 2],
    /// The time the tables are made (Unix seconds).
    pub now: i64,
}

/// The 360 ads cadgen99 makes for `p`.
pub fn ads(p: &AdParams) -> Vec<Ad> {
    let pttime = if p.pttime == 0 { 1800 } else { p.pttime };
    let ts = p.now + 2 * i64::from(pttime);
    let mut ads: Vec<Ad> = (0..ADS)
        .map(|j| {
            let k = record_key(j);
            let w = (k * k) % 1_048_576;
            Ad {
                demographics: demographics(j, true),
                weightings: if w == 0 { 0x27104 } else { w },
                min_match: MAX_AD_WEIGHT,
                expiry: ts,
            }
        })
        .collect();
    for j in (p.maxthread % SEARCH_INTERVAL..ADS).step_by(SEARCH_INTERVAL as usize) {
        let ad = &mut ads[j as usize];
        ad.min_match = 1;
        ad.weightings = 0x3FFFF;
        ad.demographics |= INTEREST2;
    }
    for start in p.expired {
        for i in 0..SEARCH_INTERVAL {
            ads[((start + i) % ADS) as usize].expiry = ts - EXPIRED_BEFORE;
        }
    }
    ads
}

/// `Custom.Ads`: `"%5d %8X %8X %3d %10d\n"` per ad.
pub fn custom_ads(ads: &[Ad]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ads.len() * AD_RECORD);
    for (j, a) in ads.iter().enumerate() {
        out.extend_from_slice(
            format!(
                "{j:5} {:8X} {:8X} {:3} {:10}\n",
                a.demographics, a.weightings, a.min_match, a.expiry
            )
            .as_bytes(),
        );
    }
    out
}

fn fields(line: &str, n: usize, what: &str, no: usize) -> Result<Vec<String>, String> {
    let f: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    if f.len() != n {
        return Err(format!(
            "{what} line {no}: {} fields, expected {n}",
            f.len()
        ));
    }
    Ok(f)
}

fn hex(s: &str, what: &str, no: usize) -> Result<u32, String> {
    u32::from_str_radix(s, 16).map_err(|_| format!("{what} line {no}: bad hex {s:?}"))
}

fn dec<T: std::str::FromStr>(s: &str, what: &str, no: usize) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("{what} line {no}: bad number {s:?}"))
}

/// Read `User.Personality` back: the demographics of each user index, in order.
pub fn parse_users(text: &[u8]) -> Result<Vec<u32>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "User.Personality: not text".to_string())?;
    let mut users = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f = fields(line, 2, "User.Personality", i + 1)?;
        if dec::<usize>(&f[0], "User.Personality", i + 1)? != i {
            return Err(format!("User.Personality line {}: out of order", i + 1));
        }
        users.push(hex(&f[1], "User.Personality", i + 1)?);
    }
    Ok(users)
}

/// Read `Custom.Ads` back.
pub fn parse_ads(text: &[u8]) -> Result<Vec<Ad>, String> {
    let what = "Custom.Ads";
    let text = std::str::from_utf8(text).map_err(|_| format!("{what}: not text"))?;
    let mut ads = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f = fields(line, 5, what, i + 1)?;
        if dec::<usize>(&f[0], what, i + 1)? != i {
            return Err(format!("{what} line {}: out of order", i + 1));
        }
        ads.push(Ad {
            demographics: hex(&f[1], what, i + 1)?,
            weightings: hex(&f[2], what, i + 1)?,
            min_match: dec(&f[3], what, i + 1)?,
            expiry: dec(&f[4], what, i + 1)?,
        });
    }
    if ads.len() != ADS as usize {
        return Err(format!("{what}: {} ads, expected {ADS}", ads.len()));
    }
    Ok(ads)
}

/// The ad chosen for a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub ad: u32,
    pub weight: u32,
    pub expired: bool,
}

/// The weight of `ad` for a user with demographics `user`.
pub fn weight(user: u32, ad: &Ad) -> u32 {
    let d = user & ad.demographics;
    let w = ad.weightings;
    [
        (GENDER, 16),
        (AGE, 12),
        (REGION, 8),
        (INTEREST1, 4),
        (INTEREST2, 0),
    ]
    .iter()
    .filter(|(mask, _)| d & mask != 0)
    .map(|(_, shift)| (w >> shift) & 0xF)
    .sum()
}

/// TUX's `find_ad`: from the ad after `last_ad`, the first whose weight for `user`
/// reaches its `min_match` (an always-match ad comes within 24); `expired` when `now` is
/// past its expiry.
pub fn find_ad(user: u32, ads: &[Ad], last_ad: u32, now: i64) -> Choice {
    let n = ads.len().max(1) as u32;
    let last = last_ad % n;
    let mut ad = last;
    let mut w = 0;
    for step in 1..=n {
        ad = (last + step) % n;
        w = weight(user, &ads[ad as usize]);
        if w >= ads[ad as usize].min_match {
            break;
        }
    }
    Choice {
        ad,
        weight: w,
        expired: now > ads[ad as usize].expiry,
    }
}

/// The 17 bytes that replace `dirNNNNN/classX_Y` in a tag for `ad`:
/// `dir%05d/class%d_%d` with dir = ad/36, class = (ad%36)/9, file = ad%9.
pub fn ad_target(ad: u32) -> [u8; 17] {
    let s = format!("dir{:05}/class{}_{}", ad / 36, (ad % 36) / 9, ad % 9);
    let mut out = [0u8; 17];
    out.copy_from_slice(s.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_zero_and_one_byte_for_byte() {
        // j = 0: k = 12300 = 0x300C: c4 = 12, c3 = 0, c2 = 0. gender 0x10000000 (even),
        // age 0x08000000 (k%4 = 0), region 12%4 = 0 -> 0x00800000,
        // interest1 12%10 = 2 -> 0x00020000, interest2 12%10 = 2 -> 0x80.
        assert_eq!(demographics(0, false), 0x1882_0080);
        let users = user_personality(2);
        assert_eq!(&users[..15], b"    0 18820080\n");
        assert_eq!(users.len(), 30);
        // j = 1: k = 10000 = 0x2710: c4 = 0, c3 = 1, c2 = 7.
        // gender even, age 0, region 7%4=3, interest1 1 -> 0x40000, interest2 0 -> 0x200.
        assert_eq!(&users[15..], b"    1 18140200\n");
    }

    #[test]
    fn interest_two_entries_four_and_five_are_swapped_for_ads() {
        // Records whose c4 % 10 is 4 and 5.
        let four = (0..ADS).find(|&j| (record_key(j) & 0xF) % 10 == 4).unwrap();
        let five = (0..ADS).find(|&j| (record_key(j) & 0xF) % 10 == 5).unwrap();
        assert_eq!(demographics(four, false) & INTEREST2, 0x20);
        assert_eq!(demographics(four, true) & INTEREST2, 0x10);
        assert_eq!(demographics(five, false) & INTEREST2, 0x10);
        assert_eq!(demographics(five, true) & INTEREST2, 0x20);
        // Every other entry agrees.
        for j in 0..ADS {
            let c = (record_key(j) & 0xF) % 10;
            if c != 4 && c != 5 {
                assert_eq!(demographics(j, false), demographics(j, true));
            }
        }
    }

    #[test]
    fn a_users_demographics_are_its_record_in_the_file() {
        let users = parse_users(&user_personality(1000)).unwrap();
        for (j, d) in users.iter().enumerate() {
            assert_eq!(*d, user_demographics(j as u32));
        }
    }

    #[test]
    fn users_repeat_with_period_360() {
        let u = parse_users(&user_personality(1000)).unwrap();
        assert_eq!(u.len(), 1000);
        assert_eq!(u[5], u[365]);
        assert_eq!(u[999], u[999 - 720]);
        // Each field has exactly one bit set.
        for d in u {
            for m in [GENDER, AGE, REGION, INTEREST1, INTEREST2] {
                assert_eq!((d & m).count_ones(), 1, "{d:08X} {m:08X}");
            }
        }
    }

    fn params() -> AdParams {
        AdParams {
            pttime: 100,
            maxthread: 100,
            expired: [1, 100],
            now: 1_000_000_000,
        }
    }

    #[test]
    fn custom_ads_records_always_match_and_expired_ranges() {
        let ads = ads(&params());
        let text = custom_ads(&ads);
        assert_eq!(text.len(), 360 * AD_RECORD);
        // Ad 0 (j = 0, k = 12300): weightings 12300^2 % 2^20 = 0x4_4590 ... exactly:
        let w0 = (12300u32 * 12300) % 1_048_576;
        assert_eq!(
            &text[..AD_RECORD],
            format!(
                "    0 {:8X} {:8X}  75 {:10}\n",
                demographics(0, true),
                w0,
                1_000_000_200
            )
            .as_bytes()
        );
        // Always-match ads: every 24th from maxthread % 24 = 4.
        let always: Vec<usize> = (0..360).filter(|&j| ads[j].min_match == 1).collect();
        assert_eq!(always, (4..360).step_by(24).collect::<Vec<_>>());
        assert!(
            always
                .iter()
                .all(|&j| ads[j].weightings == 0x3FFFF
                    && ads[j].demographics & INTEREST2 == INTEREST2)
        );
        assert_eq!(&text[4 * AD_RECORD..5 * AD_RECORD][15..27], b"   3FFFF   1");
        // Expired: 1..=24 and 100..=123, each holding one always-match ad.
        let expired: Vec<usize> = (0..360)
            .filter(|&j| ads[j].expiry < 1_000_000_000)
            .collect();
        let want: Vec<usize> = (1..25).chain(100..124).collect();
        assert_eq!(expired, want);
        assert_eq!(ads[1].expiry, 1_000_000_200 - 31_622_400);
        assert_eq!(parse_ads(&text).unwrap(), ads);
    }

    #[test]
    fn an_expired_range_wraps_past_the_last_ad() {
        let mut p = params();
        p.expired = [350, 10];
        let ads = ads(&p);
        let expired: Vec<usize> = (0..360).filter(|&j| ads[j].expiry < p.now).collect();
        // 350..=359 and 0..=13 from the first, 10..=33 from the second.
        let want: Vec<usize> = (0..34).chain(350..360).collect();
        assert_eq!(expired, want);
        // pttime 0 is taken as 1800.
        p.pttime = 0;
        assert_eq!(super::ads(&p)[200].expiry, p.now + 3600);
    }

    #[test]
    fn find_ad_takes_the_first_match_after_the_last_ad() {
        let ads = ads(&params());
        let users = parse_users(&user_personality(360)).unwrap();
        for (u, &dem) in users.iter().enumerate() {
            for last in [0u32, 20, 359] {
                let c = find_ad(dem, &ads, last, params().now);
                // Within one search interval, and every ad skipped did not match.
                let steps = (c.ad + 360 - last) % 360;
                assert!((1..=24).contains(&steps), "user {u} last {last}: {c:?}");
                for s in 1..steps {
                    let a = &ads[((last + s) % 360) as usize];
                    assert!(weight(dem, a) < a.min_match);
                }
                assert!(c.weight >= ads[c.ad as usize].min_match);
                assert!(c.weight <= MAX_AD_WEIGHT);
                assert_eq!(c.expired, (1..25).chain(100..124).any(|e| e == c.ad));
            }
        }
    }

    #[test]
    fn weight_adds_the_nibbles_of_the_shared_fields() {
        let ad = Ad {
            demographics: 0x1812_0080,
            weightings: 0x12345,
            min_match: 1,
            expiry: 0,
        };
        assert_eq!(weight(0x1812_0080, &ad), 1 + 2 + 3 + 4 + 5);
        assert_eq!(weight(0x1000_0000, &ad), 1);
        assert_eq!(weight(0x0000_0080, &ad), 5);
        assert_eq!(weight(0x2000_0000, &ad), 0);
    }

    #[test]
    fn ad_targets() {
        assert_eq!(&ad_target(0), b"dir00000/class0_0");
        assert_eq!(&ad_target(359), b"dir00009/class3_8");
        assert_eq!(&ad_target(50), b"dir00001/class1_5");
    }

    #[test]
    fn bad_tables_are_refused_with_the_line() {
        assert!(parse_users(b"    0 18120080\n    2 18140200\n")
            .unwrap_err()
            .contains("line 2"));
        assert!(parse_users(b"    0 1812008Z\n")
            .unwrap_err()
            .contains("hex"));
        assert!(parse_ads(b"    0 1 2 75\n").unwrap_err().contains("fields"));
        assert!(parse_ads(&custom_ads(&ads(&params())[..359]))
            .unwrap_err()
            .contains("359 ads"));
    }
}
