use std::path::PathBuf;

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    Off,
    Stdout,
    Stderr,
    File(PathBuf),
}

impl<'de> serde::Deserialize<'de> for LogTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "off" | "" => LogTarget::Off,
            "stdout" => LogTarget::Stdout,
            "stderr" => LogTarget::Stderr,
            _ => LogTarget::File(PathBuf::from(s)),
        })
    }
}

/// Access log line formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// NCSA Combined Log Format (Apache/nginx default).
    Combined,
    /// NCSA Common Log Format.
    Common,
    /// One JSON object per line.
    Json,
}

/// The resolved `[log]` access-log settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogOptions {
    pub target: LogTarget,
    pub format: LogFormat,
}
