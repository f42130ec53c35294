//! The result of a run: counts, latency histogram, errors by kind; text (wrk-like) and JSON.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::exchange::{Answer, Failure};

/// Errors by kind. Each failed exchange is counted once, under the first thing that went wrong.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Errors {
    /// The TCP connection could not be made.
    pub connect: u64,
    /// No progress for the spec's timeout.
    pub timeout: u64,
    /// The connection was reset or closed before a complete response.
    pub reset: u64,
    /// A response with a status outside 2xx/3xx.
    pub status: u64,
    /// A body shorter than its framing said, or not the expected length.
    pub short_body: u64,
    /// Bytes that are not an HTTP/1.x response.
    pub invalid: u64,
    /// Open loop without keep-alive: arrivals not started because `connections` were already
    /// open (the client's cap, reported so overload is never hidden).
    pub overflow: u64,
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect
            + self.timeout
            + self.reset
            + self.status
            + self.short_body
            + self.invalid
            + self.overflow
    }

    pub(crate) fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.status += o.status;
        self.short_body += o.short_body;
        self.invalid += o.invalid;
        self.overflow += o.overflow;
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Complete, valid-framed responses (including those counted under `errors.status`).
    pub responses: u64,
    /// Bytes read from the server (heads and bodies).
    pub bytes: u64,
    pub elapsed: Duration,
    pub errors: Errors,
    /// Response latency in microseconds, from writing the request (open loop: from when it
    /// was due, if the connection was still busy then) to the end of the response.
    pub latency: Histogram<u64>,
    /// Open loop: requests that were due during the run (the offered load).
    pub offered: Option<u64>,
}

/// Longest latency the histogram records (one minute, in microseconds).
const MAX_LATENCY_US: u64 = 60_000_000;

impl Default for Report {
    fn default() -> Self {
        Report {
            responses: 0,
            bytes: 0,
            elapsed: Duration::ZERO,
            errors: Errors::default(),
            latency: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .expect("valid histogram bounds"),
            offered: None,
        }
    }
}

impl Report {
    pub(crate) fn record(&mut self, micros: u64) {
        let _ = self.latency.record(micros.clamp(1, MAX_LATENCY_US));
    }

    /// Count a complete response and validate it.
    pub(crate) fn answered(&mut self, a: &Answer, latency: Duration, expect_length: Option<u64>) {
        self.responses += 1;
        self.bytes += a.bytes;
        self.record(latency.as_micros() as u64);
        if !(200..400).contains(&a.status) {
            self.errors.status += 1;
        } else if expect_length.is_some_and(|n| n != a.body_len) {
            self.errors.short_body += 1;
        }
    }

    /// Count `lost` requests that failed with `f`.
    pub(crate) fn fail(&mut self, f: Failure, lost: u64) {
        match f {
            Failure::Timeout => self.errors.timeout += lost,
            Failure::Reset => self.errors.reset += lost,
            Failure::ShortBody => self.errors.short_body += lost,
            Failure::Invalid => self.errors.invalid += lost,
        }
    }

    pub(crate) fn merge(&mut self, o: &Report) {
        self.offered = match (self.offered, o.offered) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.responses += o.responses;
        self.bytes += o.bytes;
        self.errors.add(&o.errors);
        let _ = self.latency.add(&o.latency);
    }

    pub fn requests_per_sec(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Open loop: requests per second offered.
    pub fn offered_per_sec(&self) -> Option<f64> {
        self.offered
            .map(|n| n as f64 / self.elapsed.as_secs_f64().max(1e-9))
    }

    /// Open loop: requests due but neither answered nor failed when the run ended.
    pub fn unfinished(&self) -> u64 {
        self.offered.map_or(0, |n| {
            n.saturating_sub(self.responses + self.errors.total())
        })
    }

    pub fn pct_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }

    /// Human-readable summary in the spirit of wrk.
    pub fn text(&self) -> String {
        let offered = self.offered_per_sec().map_or(String::new(), |o| {
            format!(
                "Offered/sec:  {o:.2} ({} requests due, {} unfinished at the end)\n",
                self.offered.unwrap_or(0),
                self.unfinished()
            )
        });
        offered + &format!(
            "  Latency  p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms\n  {} responses in {:.2}s, {:.2} MB read\nRequests/sec: {:.2}\nTransfer/sec: {:.2} MB\nErrors: connect {}, timeout {}, reset {}, status {}, short body {}, invalid {}, overflow {}\n",
            self.pct_ms(0.5),
            self.pct_ms(0.9),
            self.pct_ms(0.99),
            self.pct_ms(0.999),
            self.latency.max() as f64 / 1000.0,
            self.responses,
            self.elapsed.as_secs_f64(),
            self.bytes as f64 / 1e6,
            self.requests_per_sec(),
            self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(1e-9),
            self.errors.connect,
            self.errors.timeout,
            self.errors.reset,
            self.errors.status,
            self.errors.short_body,
            self.errors.invalid,
            self.errors.overflow,
        )
    }

    /// Machine-readable summary.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "responses": self.responses,
            "bytes": self.bytes,
            "seconds": self.elapsed.as_secs_f64(),
            "requests_per_sec": self.requests_per_sec(),
            "offered": self.offered,
            "offered_per_sec": self.offered_per_sec(),
            "unfinished": self.unfinished(),
            "bytes_per_sec": self.bytes as f64 / self.elapsed.as_secs_f64().max(1e-9),
            "latency_ms": {
                "p50": self.pct_ms(0.5), "p90": self.pct_ms(0.9), "p99": self.pct_ms(0.99),
                "p99.9": self.pct_ms(0.999), "max": self.latency.max() as f64 / 1000.0,
            },
            "errors": {
                "connect": self.errors.connect, "timeout": self.errors.timeout, "reset": self.errors.reset,
                "status": self.errors.status, "short_body": self.errors.short_body, "invalid": self.errors.invalid,
                "overflow": self.errors.overflow, "total": self.errors.total(),
            },
        })
    }
}
