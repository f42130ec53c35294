//! The head of a CGI program's output (RFC 3875 §6): header lines up to an empty line,
//! `Status`, `Location` and `Content-Type` understood, the rest passed on.

/// Most bytes of a program's header section.
pub const MAX_HEAD: usize = 64 * 1024;

/// A parsed header section.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// Header lines for the client (`Name: value\r\n` each).
    pub lines: Vec<u8>,
    /// A `Content-Length` the program gave.
    pub length: Option<u64>,
    /// Bytes of the output taken by the head (the body starts there).
    pub end: usize,
}

/// Where the header section ends (after its empty line), if it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(i) = memchr::memchr(b'\n', &buf[at..]) {
        let line = &buf[at..at + i];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        at += i + 1;
        if line.is_empty() {
            return Some(at);
        }
    }
    None
}

/// Parse the header section `buf[..end]`.
pub fn parse(buf: &[u8], end: usize) -> Result<Head, String> {
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| "header is not text".to_string())?;
    let mut status = None;
    let mut location = false;
    let mut content_type = false;
    let mut length = None;
    let mut lines = Vec::new();
    for line in text.lines().map(|l| l.trim_end_matches('\r')) {
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(format!("header line without a colon: {line:?}"));
        };
        let name = name.trim();
        let value = value.trim();
        if name.is_empty()
            || name.bytes().any(|b| !b.is_ascii_graphic())
            || value.bytes().any(|b| b.is_ascii_control() && b != b'\t')
        {
            return Err(format!("bad header line: {line:?}"));
        }
        match name.to_ascii_lowercase().as_str() {
            "status" => {
                let code = value.split(' ').next().and_then(|c| c.parse::<u16>().ok());
                match code {
                    Some(c) if (200..=599).contains(&c) => status = Some(c),
                    _ => return Err(format!("bad Status: {value:?}")),
                }
                continue;
            }
            "content-length" => {
                length = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| format!("bad Content-Length: {value:?}"))?,
                );
                continue;
            }
            // Framing and the connection are the server's.
            "connection" | "transfer-encoding" | "keep-alive" => continue,
            "location" => location = true,
            "content-type" => content_type = true,
            _ => {}
        }
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(value.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    if !location && !content_type && status.is_none() {
        return Err("no Content-Type, Location or Status".into());
    }
    let status = status.unwrap_or(if location { 302 } else { 200 });
    Ok(Head {
        status,
        lines,
        length,
        end,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Head, String> {
        let b = s.as_bytes();
        parse(b, head_end(b).unwrap())
    }

    #[test]
    fn document_redirect_and_status() {
        let h = p("Content-Type: text/plain\nX-A: 1\n\nbody").unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.lines, b"Content-Type: text/plain\r\nX-A: 1\r\n");
        assert_eq!(h.end, 33);
        let h = p("Location: http://x/\r\n\r\n").unwrap();
        assert_eq!(h.status, 302);
        let h = p("Status: 404 Not Found\r\nContent-Type: text/html\r\n\r\n").unwrap();
        assert_eq!(h.status, 404);
        assert!(!String::from_utf8_lossy(&h.lines).contains("Status"));
        let h = p("Content-Type: a/b\nContent-Length: 5\nConnection: close\nTransfer-Encoding: chunked\n\n").unwrap();
        assert_eq!(h.length, Some(5));
        assert_eq!(h.lines, b"Content-Type: a/b\r\n");
    }

    #[test]
    fn bad_heads() {
        assert!(p("X-A: 1\n\n").unwrap_err().contains("no Content-Type"));
        assert!(p("garbage\n\n").unwrap_err().contains("colon"));
        assert!(p("Status: abc\n\n").is_err());
        assert!(p("Status: 99\n\n").is_err());
        assert!(p("Content-Type: a\nContent-Length: x\n\n").is_err());
        assert!(p("Content-Type: a\u{1}b\n\n").is_err());
        assert_eq!(head_end(b"Content-Type: a\n"), None);
        assert_eq!(head_end(b"\n"), Some(1));
    }
}
