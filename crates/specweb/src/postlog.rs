//! The post log (specweb99.md §3.4): an 11-byte header `"%10d\n"` with the record count,
//! then 139-byte records
//! `"%10d %10ld %10d %5d %2d %2d %10d %-60.60s %10d %10d\n"`.

/// Bytes of the header line.
pub const HEADER: usize = 11;
/// Bytes of one record.
pub const RECORD: usize = 139;

/// One POST as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Post {
    pub recno: u64,
    pub time: i64,
    pub pid: u32,
    pub dir: u32,
    pub class: u32,
    pub num: u32,
    pub client: u64,
    pub filename: String,
    pub user_id: u64,
}

/// The header line for `count` records.
pub fn header(count: u64) -> [u8; HEADER] {
    let mut out = [0u8; HEADER];
    out.copy_from_slice(format!("{count:10}\n").as_bytes());
    out
}

/// The record's 139 bytes (the file name cut or padded to 60, the pid written twice).
pub fn record(p: &Post) -> [u8; RECORD] {
    let name: String = p
        .filename
        .chars()
        .filter(|c| c.is_ascii())
        .take(60)
        .collect();
    let s = format!(
        "{:10} {:10} {:10} {:5} {:2} {:2} {:10} {:<60} {:10} {:10}\n",
        p.recno, p.time, p.pid, p.dir, p.class, p.num, p.client, name, p.pid, p.user_id
    );
    let mut out = [b' '; RECORD];
    let b = s.as_bytes();
    let n = b.len().min(RECORD);
    out[..n].copy_from_slice(&b[..n]);
    out[RECORD - 1] = b'\n';
    out
}

/// Read a record back (as the manager does: split on whitespace, ten fields).
pub fn parse_record(line: &[u8]) -> Result<Post, String> {
    let s = std::str::from_utf8(line).map_err(|_| "post log record: not text".to_string())?;
    let f: Vec<&str> = s.split_whitespace().collect();
    if f.len() != 10 {
        return Err(format!("post log record: {} fields, expected 10", f.len()));
    }
    let n = |i: usize| -> Result<i64, String> {
        f[i].parse()
            .map_err(|_| format!("post log record: field {} is {:?}", i + 1, f[i]))
    };
    if f[2] != f[8] {
        return Err("post log record: the two pids differ".into());
    }
    Ok(Post {
        recno: n(0)? as u64,
        time: n(1)?,
        pid: n(2)? as u32,
        dir: n(3)? as u32,
        class: n(4)? as u32,
        num: n(5)? as u32,
        client: n(6)? as u64,
        filename: f[7].to_string(),
        user_id: n(9)? as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post() -> Post {
        Post {
            recno: 1,
            time: 1_000_000_000,
            pid: 4242,
            dir: 4,
            class: 1,
            num: 3,
            client: 2,
            filename: "/file_set/dir00004/class1_3".into(),
            user_id: 10001,
        }
    }

    #[test]
    fn header_and_record_are_the_specs_bytes() {
        assert_eq!(&header(0), b"         0\n");
        assert_eq!(&header(1234), b"      1234\n");
        let r = record(&post());
        assert_eq!(r.len(), 139);
        let want = format!(
            "         1 1000000000       4242     4  1  3          2 {:<60}       4242      10001\n",
            "/file_set/dir00004/class1_3"
        );
        assert_eq!(std::str::from_utf8(&r).unwrap(), want);
        assert_eq!(parse_record(&r).unwrap(), post());
    }

    #[test]
    fn a_long_file_name_is_cut_to_60() {
        let mut p = post();
        p.filename = format!("/{}", "x".repeat(80));
        let r = record(&p);
        assert_eq!(r.len(), 139);
        assert_eq!(&r[56..116], format!("/{}", "x".repeat(59)).as_bytes());
        assert_eq!(r[116], b' ');
        assert_eq!(r[138], b'\n');
    }

    #[test]
    fn bad_records_are_refused() {
        assert!(parse_record(b"1 2 3").is_err());
        let mut r = record(&post());
        r[137] = b'9';
        assert_eq!(parse_record(&r).unwrap().user_id, 10009);
        let mut r = record(&post());
        r[122] = b'9';
        assert!(parse_record(&r).unwrap_err().contains("pids"));
    }
}
