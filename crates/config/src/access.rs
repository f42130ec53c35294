//! Client address rules of a location (`allow`, `deny`): address prefixes (CIDR, IPv4 and
//! IPv6) checked in the admit stage. A client matching a `deny` prefix is refused; when
//! `allow` is given, a client matching none of it is refused too. IPv4 clients reaching an
//! IPv6 listener (`::ffff:a.b.c.d`) are matched as IPv4.

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use std::net::IpAddr;
use toml::Spanned;

/// An address prefix: `10.0.0.0/8`, `2001:db8::/32`, a single address, or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Cidr {
    /// Parse one rule; `Err` is the message.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        if s == "all" {
            // Both families: represented by a zero-length prefix of each (see `contains`).
            return Ok(Cidr {
                addr: IpAddr::from([0u8; 16]),
                bits: 0,
            });
        }
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{s}` is not an address or prefix (e.g. \"10.0.0.0/8\", \"2001:db8::/32\", \"all\")"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0..={max}"))?,
        };
        Ok(Cidr { addr, bits })
    }

    /// Whether `ip` is inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        if self.bits == 0 {
            // `all`, or 0.0.0.0/0 and ::/0: any address of the family (all: any at all).
            return self.addr == IpAddr::from([0u8; 16]) || self.addr.is_ipv4() == ip.is_ipv4();
        }
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX << (32 - u32::from(self.bits));
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX << (128 - u32::from(self.bits));
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        match self.bits {
            0 if self.addr == IpAddr::from([0u8; 16]) => write!(f, "all"),
            b if b == max => write!(f, "{}", self.addr),
            b => write!(f, "{}/{b}", self.addr),
        }
    }
}

/// A location's rules.
#[derive(Debug, Clone, Default)]
pub struct AccessRules {
    pub allow: Vec<Cidr>,
    pub deny: Vec<Cidr>,
}

impl AccessRules {
    /// Whether a client at `ip` may use the location.
    pub fn admits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        if self.deny.iter().any(|c| c.contains(ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|c| c.contains(ip))
    }
}

impl Resolver<'_> {
    /// `allow` and `deny` (each inherited from `[defaults]` when the location has none).
    pub(crate) fn access(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Option<Box<crate::access::AccessRules>>, ConfigError> {
        let parse = |list: Option<&Vec<Spanned<String>>>, name: &str| {
            let mut out = Vec::new();
            for (i, rule) in list.into_iter().flatten().enumerate() {
                let cidr = crate::access::Cidr::parse(rule.get_ref())
                    .map_err(|m| self.err(Some(rule.span()), &format!("{key}.{name}[{i}]"), m))?;
                out.push(cidr);
            }
            Ok::<_, ConfigError>(out)
        };
        let allow = parse(l.allow.as_ref().or(d.allow.as_ref()), "allow")?;
        let deny = parse(l.deny.as_ref().or(d.deny.as_ref()), "deny")?;
        if allow.is_empty() && deny.is_empty() {
            return Ok(None);
        }
        Ok(Some(Box::new(crate::access::AccessRules { allow, deny })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefixes() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains(ip("10.255.1.2")) && !c.contains(ip("11.0.0.1")));
        assert!(!c.contains(ip("::1")));
        let c = Cidr::parse("2001:db8::/32").unwrap();
        assert!(c.contains(ip("2001:db8:ffff::1")) && !c.contains(ip("2001:db9::1")));
        assert!(Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.7")));
        assert!(!Cidr::parse("192.0.2.7").unwrap().contains(ip("192.0.2.8")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("1.2.3.4")));
        assert!(!Cidr::parse("0.0.0.0/0").unwrap().contains(ip("::1")));
        let all = Cidr::parse("all").unwrap();
        assert!(all.contains(ip("1.2.3.4")) && all.contains(ip("::1")));
        for bad in ["10.0.0.0/33", "::/129", "host", "10.0.0.0/x", ""] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn deny_wins_then_allow_limits() {
        let r = AccessRules {
            allow: vec![
                Cidr::parse("127.0.0.0/8").unwrap(),
                Cidr::parse("::1").unwrap(),
            ],
            deny: vec![Cidr::parse("127.0.0.2").unwrap()],
        };
        assert!(r.admits(ip("127.0.0.1")));
        assert!(!r.admits(ip("127.0.0.2")));
        assert!(r.admits(ip("::1")));
        assert!(!r.admits(ip("192.0.2.1")));
        assert!(
            r.admits(ip("::ffff:127.0.0.1")),
            "IPv4-mapped is matched as IPv4"
        );
        assert!(!r.admits(ip("::ffff:127.0.0.2")));
        let deny_only = AccessRules {
            allow: vec![],
            deny: vec![Cidr::parse("2001:db8::/32").unwrap()],
        };
        assert!(deny_only.admits(ip("1.2.3.4")) && !deny_only.admits(ip("2001:db8::5")));
    }
}
