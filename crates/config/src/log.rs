//! `[log]`: the access log's target and format, the diagnostics level.

use ramjet_observe::{AccessLogOptions, LogFormat, LogTarget};
use serde::Deserialize;
use toml::Spanned;

use crate::resolve::Resolver;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// "off", "stdout", "stderr" or a file path.
    pub access: Option<LogTarget>,
    pub format: Option<LogFormat>,
    /// Diagnostics level: error, warn, info, debug, trace.
    pub level: Option<Spanned<String>>,
}

impl Resolver<'_> {
    /// The access log (a relative path taken from the configuration's directory) and the
    /// diagnostics level.
    pub(crate) fn log(&self, log: RawLog) -> (AccessLogOptions, String) {
        let access_log = AccessLogOptions {
            // Like nginx, log requests unless told not to; stdout needs no path to exist.
            target: log.access.unwrap_or(LogTarget::Stdout),
            format: log.format.unwrap_or(LogFormat::Combined),
        };
        let access_log = match access_log.target {
            LogTarget::File(ref p) if p.is_relative() => AccessLogOptions {
                target: LogTarget::File(self.base.join(p)),
                ..access_log
            },
            _ => access_log,
        };
        let level = log.level.as_ref().map_or("info", |l| l.get_ref().as_str());
        if !matches!(level, "error" | "warn" | "info" | "debug" | "trace") {
            self.keep::<()>(Err(self.err(
                log.level.as_ref().map(|l| l.span()),
                "log.level",
                format!("`{level}` is not one of error, warn, info, debug, trace"),
            )));
        }
        (access_log, level.to_string())
    }
}
