//! Access log line formats, written straight into a byte buffer (no per-line allocation).

use std::io::Write;
use std::net::IpAddr;

use crate::options::LogFormat;

/// What the pipeline records for one request, once, also for errors and aborts.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    pub remote: IpAddr,
    /// Unix time of the request's start, seconds.
    pub unix_secs: u64,
    /// The request line as received (empty when none was read, e.g. a timeout).
    pub request_line: &'a [u8],
    pub host: Option<&'a [u8]>,
    pub status: u16,
    /// Body bytes written to the client.
    pub body_bytes: u64,
    pub referer: Option<&'a [u8]>,
    pub user_agent: Option<&'a [u8]>,
    /// Time from the first byte of the request to the last byte of the response.
    pub micros: u64,
    /// For a request a backend answered (or failed to): which one, how, how fast.
    pub upstream: Option<&'a UpstreamLog>,
}

/// What the access log records about the upstream of a proxied request (nginx's
/// `$upstream_addr`, `$upstream_status`, `$upstream_response_time`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamLog {
    /// The servers tried, in order, comma-separated.
    pub addr: String,
    /// The status the last one answered; 0 when none answered.
    pub status: u16,
    /// From the first connection attempt to the complete response head.
    pub micros: u64,
    /// What a cache did (`HIT`, `MISS`, `STALE`, `REVALIDATED`, `EXPIRED`, `BYPASS`), or
    /// empty; with an empty `addr` when no server was asked.
    pub cache: &'static str,
}

/// Caches the formatted timestamp of the current second.
#[derive(Debug, Default)]
pub(crate) struct Stamp {
    secs: u64,
    clf: [u8; 26],
    iso: [u8; 20],
}

impl Stamp {
    fn refresh(&mut self, secs: u64) {
        if secs == self.secs && self.clf[0] != 0 {
            return;
        }
        self.secs = secs;
        let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
        let rem = secs % 86_400;
        let (h, mi, s) = (rem / 3600, rem / 60 % 60, rem % 60);
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        let mut clf = &mut self.clf[..];
        let _ = write!(
            clf,
            "{d:02}/{}/{y:04}:{h:02}:{mi:02}:{s:02} +0000",
            MONTHS[mo as usize - 1]
        );
        let mut iso = &mut self.iso[..];
        let _ = write!(iso, "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z");
    }
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian, UTC): the year, month
/// and day of a count of days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

impl Entry<'_> {
    pub(crate) fn write(&self, format: LogFormat, stamp: &mut Stamp, out: &mut Vec<u8>) {
        stamp.refresh(self.unix_secs);
        match format {
            LogFormat::Common | LogFormat::Combined => {
                remote(self.remote, out);
                out.extend_from_slice(b" - - [");
                out.extend_from_slice(&stamp.clf);
                out.extend_from_slice(b"] \"");
                escape_clf(self.request_line, out);
                out.extend_from_slice(b"\" ");
                out.extend_from_slice(itoa::Buffer::new().format(self.status).as_bytes());
                out.push(b' ');
                if self.body_bytes == 0 {
                    out.push(b'-');
                } else {
                    out.extend_from_slice(itoa::Buffer::new().format(self.body_bytes).as_bytes());
                }
                if format == LogFormat::Combined {
                    for field in [self.referer, self.user_agent] {
                        out.extend_from_slice(b" \"");
                        match field {
                            Some(v) => escape_clf(v, out),
                            None => out.push(b'-'),
                        }
                        out.push(b'"');
                    }
                }
                out.push(b'\n');
            }
            LogFormat::Json => {
                let text = |v: Option<&[u8]>| v.map(|v| String::from_utf8_lossy(v).into_owned());
                // A cache hit asked no server.
                let asked = self.upstream.filter(|u| !u.addr.is_empty());
                let line = serde_json::json!({
                    "time": std::str::from_utf8(&stamp.iso).unwrap_or(""),
                    "remote": self.remote.to_string(),
                    "host": text(self.host),
                    "request": String::from_utf8_lossy(self.request_line),
                    "status": self.status,
                    "bytes": self.body_bytes,
                    "referer": text(self.referer),
                    "user_agent": text(self.user_agent),
                    "duration_us": self.micros,
                    "upstream_addr": asked.map(|u| u.addr.as_str()),
                    "upstream_status": asked.map(|u| u.status),
                    "upstream_time_us": asked.map(|u| u.micros),
                    "cache": self.upstream.map(|u| u.cache).filter(|c| !c.is_empty()),
                });
                let _ = serde_json::to_writer(&mut *out, &line);
                out.push(b'\n');
            }
        }
    }
}

/// The client address: IPv4 written digit by digit (`core::fmt` costs several hundred
/// instructions per line here), IPv6 through `Display`.
fn remote(ip: IpAddr, out: &mut Vec<u8>) {
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(itoa::Buffer::new().format(octet).as_bytes());
            }
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{ip}");
        }
    }
}

/// Whether a byte needs escaping in a Common/Combined field.
fn needs_escape(b: u8) -> bool {
    b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b)
}

/// nginx-style escaping: `"`, `\` and bytes outside printable ASCII become `\xHH`.
fn escape_clf(v: &[u8], out: &mut Vec<u8>) {
    if !v.iter().any(|&b| needs_escape(b)) {
        out.extend_from_slice(v);
        return;
    }
    for &b in v {
        if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
            let _ = write!(out, "\\x{b:02X}");
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            remote: "127.0.0.1".parse().unwrap(),
            unix_secs: 971_186_136, // 2000-10-10 13:55:36 UTC
            request_line: b"GET /a\"b HTTP/1.1",
            host: Some(b"h"),
            status: 200,
            body_bytes: 2326,
            referer: None,
            user_agent: Some(b"curl/8"),
            micros: 12,
            upstream: None,
        }
    }

    #[test]
    fn combined_and_common() {
        let mut out = Vec::new();
        let mut stamp = Stamp::default();
        entry().write(LogFormat::Combined, &mut stamp, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "127.0.0.1 - - [10/Oct/2000:13:55:36 +0000] \"GET /a\\x22b HTTP/1.1\" 200 2326 \"-\" \"curl/8\"\n"
        );
        let mut out = Vec::new();
        entry().write(LogFormat::Common, &mut stamp, &mut out);
        assert!(String::from_utf8(out)
            .unwrap()
            .ends_with("HTTP/1.1\" 200 2326\n"));
    }

    #[test]
    fn addresses_and_escapes() {
        let mut out = Vec::new();
        for ip in ["0.0.0.0", "10.200.3.255", "::1", "2001:db8::7"] {
            out.clear();
            remote(ip.parse().unwrap(), &mut out);
            assert_eq!(out, ip.as_bytes());
        }
        out.clear();
        escape_clf(b"plain /path?x=1", &mut out);
        assert_eq!(out, b"plain /path?x=1");
        out.clear();
        escape_clf(b"a\"b\\c\x01\xff", &mut out);
        assert_eq!(out, b"a\\x22b\\x5Cc\\x01\\xFF");
    }

    #[test]
    fn json_line() {
        let mut out = Vec::new();
        entry().write(LogFormat::Json, &mut Stamp::default(), &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["time"], "2000-10-10T13:55:36Z");
        assert_eq!(v["status"], 200);
        assert_eq!(v["request"], "GET /a\"b HTTP/1.1");
    }
}
