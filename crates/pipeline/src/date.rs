//! The `Date` header value, formatted at most once a second per worker.

use std::time::{Duration, UNIX_EPOCH};

/// Length of an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT").
const IMF_FIXDATE_LEN: usize = 29;

#[derive(Debug)]
pub(crate) struct DateCache {
    secs: u64,
    value: [u8; IMF_FIXDATE_LEN],
}

impl DateCache {
    pub(crate) fn new() -> DateCache {
        let mut d = DateCache {
            secs: u64::MAX,
            value: [b' '; IMF_FIXDATE_LEN],
        };
        d.now();
        d
    }

    /// The date and unix seconds as the last call to `now` found them (a caller that
    /// read the clock for a batch of answers).
    pub(crate) fn last(&self) -> (&[u8], u64) {
        (&self.value, self.secs)
    }

    /// The current second's date and unix seconds (the coarse wall clock,
    /// `sys::unix_seconds`: one vDSO read per response).
    pub(crate) fn now(&mut self) -> (&[u8], u64) {
        let secs = ramjet_runtime::sys::unix_seconds();
        if secs != self.secs {
            self.secs = secs;
            let text = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
            if text.len() == IMF_FIXDATE_LEN {
                self.value.copy_from_slice(text.as_bytes());
            }
        }
        (&self.value, secs)
    }
}
