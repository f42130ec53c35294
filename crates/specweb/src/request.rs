//! What the dynamic module reads from a request (specweb99.md §3): the object a query
//! names, the `my_cookie` cookie, a POST's form and a Reset's parameters; and where a
//! file's ad placeholders are. Pure functions, shared by the native module and the
//! WebAssembly one (`wasm/specweb99`), so both answer alike.

use crate::fileset::{file_name, AD_PLACEHOLDER, AD_PLACEHOLDER_AT, AD_TAG};
use crate::tables::{AdParams, ADS};

/// An object of the file set: `file_set/dirNNNNN/classC_F`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Object {
    pub dir: u32,
    pub class: u32,
    pub num: u32,
}

impl Object {
    /// Parse `/file_set/dir%05d/class%d_%d` (the leading `/` optional). Nothing else is
    /// accepted, so a query cannot name a path outside the file set.
    pub fn parse(s: &str) -> Option<Object> {
        let s = s.strip_prefix('/').unwrap_or(s);
        let rest = s.strip_prefix("file_set/dir")?;
        // Fixed widths: `NNNNN/classC_F`, split by position (no substring search).
        let (dir, rest) = (rest.get(..5)?, rest.get(5..)?);
        let rest = rest.strip_prefix("/class")?;
        let (class, num) = (rest.get(..1)?, rest.get(1..)?);
        let num = num.strip_prefix('_')?;
        let digits = |t: &str, n: usize| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
        if !digits(dir, 5) || !digits(class, 1) || !digits(num, 1) {
            return None;
        }
        let o = Object {
            dir: dir.parse().ok()?,
            class: class.parse().ok()?,
            num: num.parse().ok()?,
        };
        (o.class < 4).then_some(o)
    }

    /// `file_set/dirNNNNN/classC_F`.
    pub fn name(&self) -> String {
        file_name(u64::from(self.dir), self.class, self.num)
    }

    /// Class 1 and 2 files carry ad tags.
    pub fn has_ads(&self) -> bool {
        self.class == 1 || self.class == 2
    }
}

/// An ad tag up to the end of its placeholder: where it occurs in a file, the placeholder
/// is [`AD_PLACEHOLDER_AT`] bytes on ([`find_placeholders`] finds the same). For a module
/// that has the file searched for it instead of reading it (the WebAssembly one).
pub const PLACEHOLDER_NEEDLE: &[u8] = AD_TAG.split_at(AD_PLACEHOLDER_AT + AD_PLACEHOLDER.len()).0;

/// Offsets of the ad tags' placeholders in a file's bytes.
pub fn find_placeholders(bytes: &[u8]) -> Vec<u64> {
    let mut placeholders = Vec::new();
    let mut at = 0;
    while let Some(i) = memchr::memmem::find(&bytes[at..], &AD_TAG[..AD_PLACEHOLDER_AT]) {
        let p = at + i + AD_PLACEHOLDER_AT;
        if bytes[p..].starts_with(AD_PLACEHOLDER) {
            placeholders.push(p as u64);
        }
        at = p;
    }
    placeholders
}

/// `user_id=U&last_ad=A`, the `my_cookie` cookie's value: the user and the last ad shown
/// (0 when absent).
pub fn my_cookie(value: &str) -> Option<(u64, u32)> {
    let mut user = None;
    let mut last = None;
    for pair in value.split('&') {
        match pair.split_once('=') {
            Some(("user_id", u)) => user = u.parse().ok(),
            Some(("last_ad", a)) => last = a.parse().ok(),
            _ => {}
        }
    }
    Some((user?, last.unwrap_or(0)))
}

/// Percent-decoding of a form field (`+` is a space).
pub fn form_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (hex(b[i + 1]), hex(b[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The fields of a POST body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostForm {
    pub urlroot: String,
    pub object: Object,
    pub client: u64,
}

impl PostForm {
    /// The file name the post log records: `urlroot` then the object's directory and file.
    pub fn filename(&self) -> String {
        let o = self.object;
        format!("{}dir{:05}/class{}_{}", self.urlroot, o.dir, o.class, o.num)
    }
}

/// Parse a POST body (`urlroot`, `dir`, `class`, `num`, `client`, URL-encoded, any order).
pub fn parse_post(body: &[u8]) -> Option<PostForm> {
    let body = std::str::from_utf8(body).ok()?.trim_end();
    let (mut urlroot, mut dir, mut class, mut num, mut client) = (None, None, None, None, None);
    for pair in body.split('&') {
        let (k, v) = pair.split_once('=')?;
        let v = form_decode(v);
        match k {
            "urlroot" => urlroot = Some(v),
            "dir" => dir = v.parse::<u32>().ok(),
            "class" => class = v.parse::<u32>().ok().filter(|c| *c < 4),
            "num" => num = v.parse::<u32>().ok().filter(|n| *n < 9),
            "client" => client = v.parse::<u64>().ok(),
            _ => {}
        }
    }
    Some(PostForm {
        urlroot: urlroot?,
        object: Object {
            dir: dir.filter(|d| *d < 100_000)?,
            class: class?,
            num: num?,
        },
        client: client?,
    })
}

/// A Reset's parameters (`maxload=…&pttime=…&maxthread=…&exp=A,B&…`): the users the
/// tables are for, and the ads' parameters made at `now`.
pub fn parse_reset(params: &str, now: i64) -> (u32, AdParams) {
    let mut p = AdParams {
        pttime: 0,
        maxthread: 0,
        expired: [0, 0],
        now,
    };
    let mut maxload = 0u32;
    for pair in params.split('&') {
        match pair.split_once('=') {
            Some(("maxload", v)) => maxload = v.parse().unwrap_or(0),
            Some(("pttime", v)) => p.pttime = v.parse().unwrap_or(0),
            Some(("maxthread", v)) => p.maxthread = v.parse().unwrap_or(0),
            Some(("exp", v)) => {
                let mut e = v.split(',').map(|x| x.parse::<u32>().unwrap_or(0) % ADS);
                p.expired = [e.next().unwrap_or(0), e.next().unwrap_or(0)];
            }
            _ => {}
        }
    }
    (maxload.max(p.maxthread), p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fileset::file_bytes;

    #[test]
    fn only_file_set_objects_parse() {
        assert_eq!(
            Object::parse("/file_set/dir00012/class1_4"),
            Some(Object {
                dir: 12,
                class: 1,
                num: 4
            })
        );
        assert!(Object::parse("file_set/dir00012/class3_8").is_some());
        for bad in [
            "/file_set/dir0012/class1_4",
            "/file_set/dir00012/class4_4",
            "/file_set/dir00012/class1_44",
            "/file_set/dir00012/class1_4/../../x",
            "/etc/passwd",
            "/file_set/dir+0012/class1_4",
            "/file_set/dir00012/class1-4",
            "/file_set/dir00012/class1_",
            "/file_set/dir00012/clas1_4",
            "/file_set/dir00012class1_4",
            "/file_set/dir0001\u{e9}/class1_4",
            "/file_set/dir00012/class\u{e9}_4",
            "/file_set/dir00012",
            "",
        ] {
            assert_eq!(Object::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_needle_finds_what_find_placeholders_finds() {
        assert!(PLACEHOLDER_NEEDLE.ends_with(AD_PLACEHOLDER));
        for dir in [0, 7, 123] {
            for class in 0..4 {
                for num in 0..9 {
                    let bytes = file_bytes(dir, class, num);
                    let mut by_needle = Vec::new();
                    let mut at = 0;
                    while let Some(i) = memchr::memmem::find(&bytes[at..], PLACEHOLDER_NEEDLE) {
                        by_needle.push((at + i + AD_PLACEHOLDER_AT) as u64);
                        at += i + PLACEHOLDER_NEEDLE.len();
                    }
                    assert_eq!(
                        by_needle,
                        find_placeholders(&bytes),
                        "{dir} class{class}_{num}"
                    );
                }
            }
        }
    }

    #[test]
    fn placeholders_are_found_in_class_1_and_2_files() {
        for (class, num, tags) in [(0, 3, 0), (1, 0, 1), (2, 8, 2), (3, 0, 0)] {
            let bytes = file_bytes(3, class, num);
            let found = find_placeholders(&bytes);
            assert_eq!(found.len(), tags, "class{class}_{num}");
            for &p in &found {
                assert_eq!(&bytes[p as usize..p as usize + 17], AD_PLACEHOLDER);
            }
        }
    }

    #[test]
    fn post_fields_are_parsed_by_name_in_any_order() {
        let f = parse_post(b"class=1&client=2&dir=00004&num=3&urlroot=%2Ffile_set%2F").unwrap();
        assert_eq!(f.urlroot, "/file_set/");
        assert_eq!(
            f.object,
            Object {
                dir: 4,
                class: 1,
                num: 3
            }
        );
        assert_eq!(f.client, 2);
        assert_eq!(f.filename(), "/file_set/dir00004/class1_3");
        let f = parse_post(b"urlroot=http://h/file_set/&dir=00012&class=3&num=8&client=77\r\n")
            .unwrap();
        assert_eq!(f.urlroot, "http://h/file_set/");
        assert!(parse_post(b"urlroot=/x/&dir=1&class=4&num=0&client=1").is_none());
        assert!(parse_post(b"urlroot=/x/&dir=1&class=1&client=1").is_none());
        assert!(parse_post(b"garbage").is_none());
    }

    #[test]
    fn form_decoding() {
        assert_eq!(form_decode("a%20b+c%2F"), "a b c/");
        assert_eq!(form_decode("100%"), "100%");
        assert_eq!(form_decode("%zz"), "%zz");
        assert_eq!(form_decode("%é%"), "%é%");
    }

    #[test]
    fn cookie_and_reset_parameters() {
        assert_eq!(my_cookie("user_id=10007&last_ad=12"), Some((10007, 12)));
        assert_eq!(my_cookie("user_id=10007"), Some((10007, 0)));
        assert_eq!(my_cookie("last_ad=3"), None);
        let (users, p) = parse_reset("maxload=40&pttime=300&maxthread=70&exp=5,400", 9);
        assert_eq!(
            (users, p.pttime, p.maxthread, p.expired, p.now),
            (70, 300, 70, [5, 40], 9)
        );
        let (users, p) = parse_reset("", 1);
        assert_eq!((users, p.pttime, p.expired), (0, 0, [0, 0]));
    }
}
