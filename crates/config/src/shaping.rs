//! Traffic shaping of a location, resolved: send rates (nginx `limit_rate`,
//! `limit_rate_after`; per client address and per location as lighttpd's
//! `connection.kbytes-per-second`/`server.kbytes-per-second`) and a request rate per client
//! (nginx `limit_req` with `burst` and `nodelay`). The shared state (buckets, the
//! request-rate table) is created at load; a reload starts it afresh.

use std::net::IpAddr;
use std::sync::{Arc, Weak};

use crate::error::ConfigError;
use crate::raw::RawLocation;
use crate::resolve::Resolver;
use ramjet_shaping::{ClientTable, RequestRate, SharedBucket};

/// Least send rate accepted (bytes per second).
pub const MIN_RATE: u64 = 1024;

/// A location's shaping.
#[derive(Debug)]
pub struct Shaping {
    /// Bytes per second per connection.
    pub rate: Option<u64>,
    /// Bytes of each response sent before `rate` applies.
    pub rate_after: u64,
    /// Bytes per second for all of one client address's connections to this location.
    pub client_rate: Option<u64>,
    /// The per-client buckets (live while a connection of that client uses them).
    pub clients: Option<Arc<ClientTable<Weak<SharedBucket>>>>,
    /// One rate for every connection of this location.
    pub location: Option<Arc<SharedBucket>>,
    /// Requests per second per client address, and the burst above it.
    pub requests: Option<(f64, u32, Arc<RequestRate>)>,
    /// As written (`"10r/s"`), for `check-config`.
    pub requests_text: Option<String>,
}

impl Shaping {
    /// The bucket of client `ip` (created when it has none).
    pub fn client_bucket(&self, ip: IpAddr) -> Option<Arc<SharedBucket>> {
        let (table, rate) = (self.clients.as_ref()?, self.client_rate?);
        let ip = ramjet_shaping::canonical(ip);
        let mut shard = table.shard(ip);
        if let Some(b) = shard.get(&ip).and_then(Weak::upgrade) {
            return Some(b);
        }
        // Sweep the buckets nobody holds before adding one.
        if shard.len() >= 1024 {
            shard.retain(|_, w| w.strong_count() > 0);
        }
        let b = Arc::new(SharedBucket::new(rate));
        shard.insert(ip, Arc::downgrade(&b));
        Some(b)
    }
}

/// Parse a request rate: `"10r/s"`, `"600r/m"`, `"0.5r/s"`; `Err` is the message.
pub(crate) fn request_rate(s: &str) -> Result<f64, String> {
    let bad = || format!("`{s}` is not a request rate (e.g. \"10r/s\" or \"600r/m\")");
    let (n, per) = s.trim().split_once("r/").ok_or_else(bad)?;
    let n: f64 = n.trim().parse().map_err(|_| bad())?;
    let per = match per.trim() {
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(bad()),
    };
    if !(n.is_finite() && n > 0.0) {
        return Err(bad());
    }
    Ok(n / per)
}

impl Resolver<'_> {
    /// Send and request rates (each key inherited from `[defaults]` when the location has
    /// none); `None` when there are none.
    pub(crate) fn shaping(
        &self,
        d: &RawLocation,
        l: &RawLocation,
        key: &str,
    ) -> Result<Option<Box<crate::Shaping>>, ConfigError> {
        let span = l.path.as_ref().map(|p| p.span());
        let rate = |v: Option<crate::units::Size>, name: &str| match v.map(|s| s.0) {
            Some(r) if r < crate::shaping::MIN_RATE => Err(self.err(
                span.clone(),
                &format!("{key}.{name}"),
                format!("at least {} bytes per second", crate::shaping::MIN_RATE),
            )),
            r => Ok(r),
        };
        let per_conn = rate(l.limit_rate.or(d.limit_rate), "limit_rate")?;
        let client = rate(
            l.limit_rate_client.or(d.limit_rate_client),
            "limit_rate_client",
        )?;
        let location = rate(
            l.limit_rate_location.or(d.limit_rate_location),
            "limit_rate_location",
        )?;
        let after = l.limit_rate_after.or(d.limit_rate_after).map_or(0, |s| s.0);
        let req = l.limit_req.as_ref().or(d.limit_req.as_ref());
        let burst = l.limit_req_burst.or(d.limit_req_burst).unwrap_or(0);
        let requests = match req {
            None => None,
            Some(text) => {
                let per_second = crate::shaping::request_rate(text.get_ref())
                    .map_err(|m| self.err(Some(text.span()), &format!("{key}.limit_req"), m))?;
                Some((
                    per_second,
                    burst,
                    Arc::new(ramjet_shaping::RequestRate::new(per_second, burst)),
                ))
            }
        };
        if per_conn.is_none() && client.is_none() && location.is_none() && requests.is_none() {
            return Ok(None);
        }
        Ok(Some(Box::new(crate::Shaping {
            rate: per_conn,
            rate_after: after,
            client_rate: client,
            clients: client.map(|_| Arc::new(ramjet_shaping::ClientTable::new())),
            location: location.map(|r| Arc::new(ramjet_shaping::SharedBucket::new(r))),
            requests_text: req.map(|t| t.get_ref().trim().to_string()),
            requests,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rates() {
        assert_eq!(request_rate("10r/s"), Ok(10.0));
        assert_eq!(request_rate("600r/m"), Ok(10.0));
        assert_eq!(request_rate(" 0.5r/s "), Ok(0.5));
        for bad in ["10", "10r/h", "0r/s", "-1r/s", "r/s", "xr/s"] {
            assert!(request_rate(bad).is_err(), "{bad}");
        }
    }
}
