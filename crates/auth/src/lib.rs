//! HTTP Basic authentication (RFC 7617) against an Apache `htpasswd` file.
//!
//! The file is read and checked when the configuration loads ([`Htpasswd::load`]): every
//! line must be `user:hash` in a format Apache's `htpasswd` writes (bcrypt `$2y$`, MD5
//! `$apr1$`, SHA-256/512 crypt `$5$`/`$6$`, SHA-1 `{SHA}`); anything else is an error
//! naming the line, not a user who can never log in. A request's credentials are decoded
//! without allocating ([`Credentials::parse`]). Checking a password is deliberately slow
//! for bcrypt and the crypt formats, so [`Htpasswd::check`] answers at once only for what
//! is cheap or already verified on this worker ([`verified`]); the rest is a [`Verify`]
//! job the caller runs off the event loop.

mod apr1;
mod credentials;
mod htpasswd;
pub mod verified;

pub use credentials::{Credentials, MAX_DECODED};
pub use htpasswd::{Entry, Htpasswd, LoadError};

/// What [`Htpasswd::check`] decided without doing slow work.
#[derive(Debug)]
pub enum Check {
    /// The credentials are valid.
    Allowed,
    /// Missing, malformed, unknown user or wrong password.
    Denied,
    /// A slow hash has to be computed: run [`Verify::run`] off the event loop.
    Verify(Verify),
}

/// A password check to run on a blocking thread; owns what it needs.
#[derive(Debug)]
pub struct Verify {
    entry: Entry,
    password: Vec<u8>,
    key: verified::Key,
}

impl Verify {
    /// Compute the hash and compare (slow: call from a blocking thread).
    pub fn run(&self) -> bool {
        self.entry.matches(&self.password)
    }

    /// Record a successful check on this worker, so the next request with the same
    /// credentials is answered at once.
    pub fn remember(&self) {
        verified::remember(self.key);
    }
}

impl Htpasswd {
    /// Check an `Authorization` field value (`None`: the request had none).
    pub fn check(&self, authorization: Option<&[u8]>) -> Check {
        let Some(value) = authorization else {
            return Check::Denied;
        };
        let mut buf = [0u8; credentials::MAX_DECODED];
        let Some(c) = Credentials::parse(value, &mut buf) else {
            return Check::Denied;
        };
        let Some(entry) = self.get(c.user) else {
            return Check::Denied;
        };
        if entry.is_cheap() {
            return match entry.matches(c.password) {
                true => Check::Allowed,
                false => Check::Denied,
            };
        }
        let key = verified::key(self.id(), value);
        if verified::contains(key) {
            return Check::Allowed;
        }
        Check::Verify(Verify {
            entry: entry.clone(),
            password: c.password.to_vec(),
            key,
        })
    }
}
