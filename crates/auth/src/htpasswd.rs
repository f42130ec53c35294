//! An htpasswd file: `user:hash` lines, read and checked once at configuration load.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use sha1::{Digest, Sha1};
use sha_crypt::{PasswordVerifier, ShaCrypt};

/// A stored password hash, in one of the formats Apache's `htpasswd` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `$2y$`/`$2a$`/`$2b$` (`htpasswd -B`).
    Bcrypt(String),
    /// `$apr1$salt$hash` (`htpasswd -m`, the default).
    Apr1 { salt: Vec<u8>, hash: [u8; 22] },
    /// `$5$`/`$6$` (`htpasswd -2`/`-5`).
    ShaCrypt(String),
    /// `{SHA}base64(sha1(password))` (`htpasswd -s`).
    Sha1([u8; 20]),
}

/// Why a file could not be used: the line (1-based, when the problem has one) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub line: Option<usize>,
    pub message: String,
}

/// The users of one htpasswd file.
#[derive(Debug)]
pub struct Htpasswd {
    users: HashMap<Vec<u8>, Entry>,
    /// Distinguishes this load from every other in the process (verified credentials are
    /// remembered per load, so a reload with changed passwords forgets them).
    id: u64,
}

static LOADS: AtomicU64 = AtomicU64::new(1);

impl Htpasswd {
    /// Read and check a file.
    pub fn load(path: &Path) -> Result<Htpasswd, LoadError> {
        let text = std::fs::read(path).map_err(|e| LoadError {
            line: None,
            message: format!("{}: {e}", path.display()),
        })?;
        Htpasswd::parse(&text).map_err(|e| LoadError {
            message: format!("{}: {}", path.display(), e.message),
            ..e
        })
    }

    /// Check file contents. Blank lines and `#` comments are skipped.
    pub fn parse(text: &[u8]) -> Result<Htpasswd, LoadError> {
        let mut users = HashMap::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.trim_ascii().is_empty() || line.first() == Some(&b'#') {
                continue;
            }
            let err = |message: String| LoadError {
                line: Some(i + 1),
                message,
            };
            let colon = line
                .iter()
                .position(|&b| b == b':')
                .ok_or_else(|| err("not `user:hash`".into()))?;
            let (user, hash) = (&line[..colon], &line[colon + 1..]);
            if user.is_empty() {
                return Err(err("empty user name".into()));
            }
            let hash = std::str::from_utf8(hash)
                .map_err(|_| err("the hash is not text".into()))?
                .trim_end();
            let entry = Entry::parse(hash).map_err(err)?;
            if users.insert(user.to_vec(), entry).is_some() {
                return Err(err(format!(
                    "user `{}` appears twice",
                    String::from_utf8_lossy(user)
                )));
            }
        }
        Ok(Htpasswd {
            users,
            id: LOADS.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn get(&self, user: &[u8]) -> Option<&Entry> {
        self.users.get(user)
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Entry {
    /// Recognise a hash; `Err` says what is wrong with it.
    pub fn parse(hash: &str) -> Result<Entry, String> {
        if let Some(b64) = hash.strip_prefix("{SHA}") {
            use base64::Engine;
            let d = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .ok()
                .and_then(|d| <[u8; 20]>::try_from(d).ok())
                .ok_or("a {SHA} entry must hold 20 bytes in base64")?;
            return Ok(Entry::Sha1(d));
        }
        if let Some(rest) = hash.strip_prefix("$apr1$") {
            let (salt, h) = rest
                .split_once('$')
                .ok_or("an $apr1$ entry is $apr1$salt$hash")?;
            let h: [u8; 22] = h
                .as_bytes()
                .try_into()
                .map_err(|_| "an $apr1$ hash has 22 characters".to_string())?;
            if salt.is_empty() || salt.len() > 8 {
                return Err("an $apr1$ salt has 1 to 8 characters".into());
            }
            return Ok(Entry::Apr1 {
                salt: salt.as_bytes().to_vec(),
                hash: h,
            });
        }
        if ["$2y$", "$2a$", "$2b$"].iter().any(|p| hash.starts_with(p)) {
            if hash.len() != 60 {
                return Err("a bcrypt entry has 60 characters".into());
            }
            return Ok(Entry::Bcrypt(hash.to_string()));
        }
        if hash.starts_with("$5$") || hash.starts_with("$6$") {
            return Ok(Entry::ShaCrypt(hash.to_string()));
        }
        if hash.is_empty() {
            return Err("no password hash".into());
        }
        Err(
            "unsupported password hash (crypt(3) DES or plain text); re-create the entry with \
             `htpasswd -B` (bcrypt) or `htpasswd -m`"
                .into(),
        )
    }

    /// Whether checking costs microseconds (a single SHA-1), so it is done inline.
    pub fn is_cheap(&self) -> bool {
        matches!(self, Entry::Sha1(_))
    }

    /// Whether `password` matches (slow for every format but SHA-1).
    pub fn matches(&self, password: &[u8]) -> bool {
        match self {
            Entry::Sha1(d) => equal(&Sha1::digest(password), d),
            Entry::Apr1 { salt, hash } => equal(&crate::apr1::hash(password, salt), hash),
            Entry::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Entry::ShaCrypt(h) => ShaCrypt::default()
                .verify_password(password, h.as_str())
                .is_ok(),
        }
    }
}

/// Compare without an early exit (no timing hint of where two hashes differ).
fn equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_format_htpasswd_writes() {
        // Entries for password "secret" written by Debian 12's htpasswd 2.4
        // (`htpasswd -nb -s/-m/-B/-2/-5 user secret`).
        let text = b"# comment\n\
            sha:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n\
            md5:$apr1$dgknfkX8$NOv3SmSa4.Xhmdvz5PN.A1\n\
            \n\
            bc:$2y$05$xu6A1K5vJo4Iag01/r00GeLf4F.tM1nHtUAKh3.hF/3m0G8KQgx/S\r\n\
            s256:$5$LW8VUFChgXxIoB.4$gK05SYMRGHC8m1aFTxCe/KwSjqfIPsVbSqz5CX0eCwD\n\
            s512:$6$af7p09wcTqVYiIgj$l.2pDDXef2zHlIbUx4.K5yfiMNdWSs811jjXjW1I5GHn8OHAtyW4tgxzULAHTIo.dnH4anvCxg9fG5P.3eJdn0\n";
        let h = Htpasswd::parse(text).unwrap();
        assert_eq!(h.len(), 5);
        assert!(h.get(b"sha").unwrap().matches(b"secret"));
        assert!(!h.get(b"sha").unwrap().matches(b"Secret"));
        assert!(h.get(b"md5").unwrap().matches(b"secret"));
        assert!(!h.get(b"md5").unwrap().matches(b"secret "));
        assert!(h.get(b"bc").unwrap().matches(b"secret"));
        assert!(!h.get(b"bc").unwrap().matches(b"secre"));
        for user in [&b"s256"[..], b"s512"] {
            assert!(h.get(user).unwrap().matches(b"secret"));
            assert!(!h.get(user).unwrap().matches(b"secreT"));
        }
        assert!(h.get(b"nobody").is_none());
    }

    #[test]
    fn bad_lines_are_named() {
        let cases: [(&[u8], usize, &str); 5] = [
            (b"a:{SHA}x\n", 1, "20 bytes"),
            (
                b"ok:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\nnocolon\n",
                2,
                "user:hash",
            ),
            (b"a:abcdefghijklm\n", 1, "unsupported"),
            (b"a:\n", 1, "no password hash"),
            (
                b"a:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\na:{SHA}5en6G6MezRroT3XKqkdPOmY/BfQ=\n",
                2,
                "twice",
            ),
        ];
        for (text, line, says) in cases {
            let e = Htpasswd::parse(text).unwrap_err();
            assert_eq!(e.line, Some(line), "{e:?}");
            assert!(e.message.contains(says), "{e:?}");
        }
    }
}
