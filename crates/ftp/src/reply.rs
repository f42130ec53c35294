//! Replies on the control connection (RFC 959 §4.2): `CODE text` lines, a multi-line reply
//! as `CODE-` lines ended by a `CODE ` line. Text from names (PWD's directory, a listing on
//! the control connection) never carries CR or LF: a name cannot forge a reply.

/// One reply, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    code: u16,
    bytes: Vec<u8>,
}

/// The extensions FEAT lists (RFC 2389), one per line.
const FEATURES: [&str; 7] = [
    "EPSV",
    "MDTM",
    "MLST type*;size*;modify*;",
    "REST STREAM",
    "SIZE",
    "TVFS",
    "UTF8",
];

/// `text` with CR, LF and NUL replaced (by `?`), so one line stays one line.
fn one_line(text: &[u8], out: &mut Vec<u8>) {
    out.extend(text.iter().map(|&b| {
        if matches!(b, b'\r' | b'\n' | 0) {
            b'?'
        } else {
            b
        }
    }));
}

impl Reply {
    /// A one-line reply.
    pub fn new(code: u16, text: &[u8]) -> Reply {
        Reply::lines(code, &[text])
    }

    /// A reply of one or more lines.
    pub fn lines(code: u16, lines: &[&[u8]]) -> Reply {
        let mut bytes = Vec::with_capacity(64);
        let n = lines.len();
        for (i, line) in lines.iter().enumerate() {
            bytes.extend_from_slice(code.to_string().as_bytes());
            bytes.push(if i + 1 == n { b' ' } else { b'-' });
            one_line(line, &mut bytes);
            bytes.extend_from_slice(b"\r\n");
        }
        if n == 0 {
            bytes.extend_from_slice(format!("{code} \r\n").as_bytes());
        }
        Reply { code, bytes }
    }

    /// A multi-line reply whose inner lines carry no code (RFC 3659 §7.2, RFC 959 §4.2):
    /// `CODE-first`, each of `inner` after one space, `CODE last`.
    pub fn framed(code: u16, first: &[u8], inner: &[&[u8]], last: &[u8]) -> Reply {
        let mut bytes = format!("{code}-").into_bytes();
        one_line(first, &mut bytes);
        bytes.extend_from_slice(b"\r\n");
        for line in inner {
            bytes.push(b' ');
            one_line(line, &mut bytes);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(format!("{code} ").as_bytes());
        one_line(last, &mut bytes);
        bytes.extend_from_slice(b"\r\n");
        Reply { code, bytes }
    }

    /// FEAT's answer: `211-Features:`, the extensions indented by a space, `211 End`;
    /// with `tls`, RFC 4217's AUTH TLS, PBSZ and PROT.
    pub fn features(tls: bool) -> Reply {
        let mut bytes = b"211-Features:\r\n".to_vec();
        let secure: &[&str] = if tls {
            &["AUTH TLS", "PBSZ", "PROT"]
        } else {
            &[]
        };
        for f in secure.iter().chain(FEATURES.iter()) {
            bytes.push(b' ');
            bytes.extend_from_slice(f.as_bytes());
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"211 End\r\n");
        Reply { code: 211, bytes }
    }

    pub fn code(&self) -> u16 {
        self.code
    }

    /// The reply as sent.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_multi_line_replies() {
        assert_eq!(Reply::new(200, b"OK.").bytes(), b"200 OK.\r\n");
        assert_eq!(
            Reply::lines(211, &[b"a", b"b"]).bytes(),
            b"211-a\r\n211 b\r\n"
        );
        assert_eq!(
            Reply::new(257, b"\"/x\r\n221 bye\" is").bytes(),
            b"257 \"/x??221 bye\" is\r\n",
            "a name cannot end the line"
        );
        assert!(Reply::features(true)
            .bytes()
            .starts_with(b"211-Features:\r\n AUTH TLS\r\n PBSZ\r\n PROT\r\n EPSV"));
        let feat = Reply::features(false);
        assert!(feat.bytes().starts_with(b"211-Features:\r\n EPSV\r\n"));
        assert!(
            !feat.bytes().windows(4).any(|w| w == b"EPRT"),
            "active mode is off"
        );
        assert_eq!(
            Reply::framed(250, b"Listing /a", &[b"type=file; /a\nx"], b"End.").bytes(),
            b"250-Listing /a\r\n type=file; /a?x\r\n250 End.\r\n"
        );
        assert!(feat.bytes().ends_with(b" UTF8\r\n211 End\r\n"));
    }
}
