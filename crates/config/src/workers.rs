//! `workers`: how many event-loop threads.

use serde::Deserialize;
use toml::Spanned;

use crate::resolve::Resolver;

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Workers {
    Count(usize),
    Auto(String),
}

impl Resolver<'_> {
    /// The worker count ("auto" or absent: one per CPU).
    pub(crate) fn workers(&self, raw: Option<&Spanned<Workers>>) -> usize {
        let span = raw.map(|w| w.span());
        let n = match raw.map(|w| w.get_ref()) {
            None => 0,
            Some(Workers::Count(0)) => {
                self.keep::<()>(Err(self.err(
                    span,
                    "workers",
                    "must be at least 1 (or \"auto\")".into(),
                )));
                1
            }
            Some(Workers::Count(n)) => *n,
            Some(Workers::Auto(s)) if s == "auto" => 0,
            Some(Workers::Auto(s)) => {
                self.keep::<()>(Err(self.err(
                    span,
                    "workers",
                    format!("`{s}` is not a number or \"auto\""),
                )));
                1
            }
        };
        if n == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n
        }
    }
}
