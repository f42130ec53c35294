//! Sizes ("64k", "1m") and durations ("30s", "500ms") as written in the file.

use std::time::Duration;

/// A byte size: an integer, or a string with an optional k/m/g suffix (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

/// A duration: an integer number of seconds, or a string with ms/s/m/h/d suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seconds(pub Duration);

impl<'de> serde::Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Size(n)),
            Raw::Text(s) => parse_size(&s).map(Size).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`{s}` is not a size (use a number of bytes, or e.g. \"64k\", \"1m\", \"2g\")"
                ))
            }),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Seconds {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Seconds(Duration::from_secs(n))),
            Raw::Text(s) => parse_duration(&s).map(Seconds).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`{s}` is not a duration (use seconds, or e.g. \"500ms\", \"30s\", \"5m\", \"7d\")"
                ))
            }),
        }
    }
}

fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (digits, mult) = match s.as_bytes().last()?.to_ascii_lowercase() {
        b'k' => (&s[..s.len() - 1], 1u64 << 10),
        b'm' => (&s[..s.len() - 1], 1 << 20),
        b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(mult)
}

fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 = s[..split].parse().ok()?;
    match s[split..].trim() {
        "ms" => Some(Duration::from_millis(n)),
        "" | "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        "h" => Some(Duration::from_secs(n.checked_mul(3600)?)),
        "d" => Some(Duration::from_secs(n.checked_mul(86_400)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("10"), Some(10));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("7"), Some(Duration::from_secs(7)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("1w"), None);
    }
}
