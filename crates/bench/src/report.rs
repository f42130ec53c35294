//! The result of a run: counts, latency histogram, errors by kind; text (wrk-like) and JSON.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Errors by kind. Each failed exchange is counted once, under the first thing that went wrong.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

impl Errors {
    pub fn total(&self) -> u64 {
        self.connect + self.timeout + self.reset + self.status + self.short_body + self.invalid
    }

    fn add(&mut self, o: &Errors) {
        self.connect += o.connect;
        self.timeout += o.timeout;
        self.reset += o.reset;
        self.status += o.status;
        self.short_body += o.short_body;
        self.invalid += o.invalid;
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
    /// Response latency in microseconds, from writing the request to the end of the response.
    pub latency: Histogram<u64>,
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
        }
    }
}

impl Report {
    pub(crate) fn record(&mut self, micros: u64) {
        let _ = self.latency.record(micros.clamp(1, MAX_LATENCY_US));
    }

    pub(crate) fn merge(&mut self, o: &Report) {
        self.responses += o.responses;
        self.bytes += o.bytes;
        self.errors.add(&o.errors);
        let _ = self.latency.add(&o.latency);
    }

    pub fn requests_per_sec(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn pct_ms(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }

    /// Human-readable summary in the spirit of wrk.
    pub fn text(&self) -> String {
        format!(
            "  Latency  p50 {:.3} ms  p90 {:.3} ms  p99 {:.3} ms  p99.9 {:.3} ms  max {:.3} ms\n  {} responses in {:.2}s, {:.2} MB read\nRequests/sec: {:.2}\nTransfer/sec: {:.2} MB\nErrors: connect {}, timeout {}, reset {}, status {}, short body {}, invalid {}\n",
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
        )
    }

    /// Machine-readable summary.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "responses": self.responses,
            "bytes": self.bytes,
            "seconds": self.elapsed.as_secs_f64(),
            "requests_per_sec": self.requests_per_sec(),
            "latency_ms": {
                "p50": self.pct_ms(0.5), "p90": self.pct_ms(0.9), "p99": self.pct_ms(0.99),
                "p99.9": self.pct_ms(0.999), "max": self.latency.max() as f64 / 1000.0,
            },
            "errors": {
                "connect": self.errors.connect, "timeout": self.errors.timeout, "reset": self.errors.reset,
                "status": self.errors.status, "short_body": self.errors.short_body, "invalid": self.errors.invalid,
            },
        })
    }
}
