//! Rate sweeps (autobench style): the open loop at rates from A to B in steps, one line per
//! step, as CSV or JSON.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::progress::Counter;
use crate::report::Report;
use crate::spec::Spec;

/// One step of a sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// Requests per second offered (due).
    pub offered: f64,
    /// Responses per second received.
    pub achieved: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    /// Failed requests per second (all kinds).
    pub errors_per_sec: f64,
    pub errors: u64,
    /// Requests due but not answered when the step ended.
    pub unfinished: u64,
}

impl Step {
    pub fn from_report(r: &Report) -> Step {
        let secs = r.elapsed.as_secs_f64().max(1e-9);
        Step {
            offered: r.offered_per_sec().unwrap_or(0.0),
            achieved: r.requests_per_sec(),
            p50_ms: r.pct_ms(0.5),
            p90_ms: r.pct_ms(0.9),
            p99_ms: r.pct_ms(0.99),
            errors_per_sec: r.errors.total() as f64 / secs,
            errors: r.errors.total(),
            unfinished: r.unfinished(),
        }
    }
}

/// A labelled sweep, as `ramjet bench --sweep --json` prints it and `--plot` reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub label: String,
    pub steps: Vec<Step>,
}

/// Most steps one sweep may have.
const MAX_STEPS: usize = 10_000;

/// Rates `from`, `from + step`, ... up to and including `to`.
pub fn rates(from: f64, to: f64, step: f64) -> Result<Vec<f64>, String> {
    // Finite too: an infinite STEP made `from + 0 * step` a NaN rate (found by the fuzzer).
    let finite = from.is_finite() && to.is_finite() && step.is_finite();
    if !(finite && from > 0.0 && to >= from && step > 0.0) {
        return Err(format!(
            "sweep {from}:{to}:{step}: need 0 < FROM <= TO and STEP > 0, all finite"
        ));
    }
    let n = ((to - from) / step + 1e-9).floor();
    if !n.is_finite() || n >= MAX_STEPS as f64 {
        return Err(format!(
            "sweep {from}:{to}:{step}: more than {MAX_STEPS} steps"
        ));
    }
    Ok((0..=n as usize).map(|k| from + k as f64 * step).collect())
}

/// Parse `FROM:TO:STEP`.
pub fn parse_sweep(s: &str) -> Result<Vec<f64>, String> {
    let parts: Vec<f64> = s
        .split(':')
        .map(|p| p.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("sweep `{s}`: expected FROM:TO:STEP, e.g. 1000:20000:1000"))?;
    match parts.as_slice() {
        [from, to, step] => rates(*from, *to, *step),
        _ => Err(format!("sweep `{s}`: expected FROM:TO:STEP")),
    }
}

/// Run `spec` in the open loop at each rate, pausing `pause` between steps; `each` sees every
/// step as it finishes.
pub fn sweep(
    spec: &Spec,
    rates: &[f64],
    pause: Duration,
    mut each: impl FnMut(&Step),
) -> Vec<Step> {
    let mut steps = Vec::with_capacity(rates.len());
    for (k, &rate) in rates.iter().enumerate() {
        if k > 0 {
            std::thread::sleep(pause);
        }
        let mut s = spec.clone();
        s.rate = Some(rate);
        s.requests = None;
        let report = crate::closed::run_counted(&s, &Counter::default());
        let step = Step::from_report(&report);
        each(&step);
        steps.push(step);
    }
    steps
}

pub const CSV_HEADER: &str =
    "offered,achieved,p50_ms,p90_ms,p99_ms,errors_per_sec,errors,unfinished";

/// One CSV line (no newline).
pub fn csv_line(s: &Step) -> String {
    format!(
        "{:.1},{:.1},{:.3},{:.3},{:.3},{:.1},{},{}",
        s.offered,
        s.achieved,
        s.p50_ms,
        s.p90_ms,
        s.p99_ms,
        s.errors_per_sec,
        s.errors,
        s.unfinished
    )
}

/// The whole sweep as CSV with a header line.
pub fn csv(steps: &[Step]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for s in steps {
        out.push_str(&csv_line(s));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_lists() {
        assert_eq!(parse_sweep("100:500:200").unwrap(), [100.0, 300.0, 500.0]);
        assert_eq!(parse_sweep("1000:1000:5").unwrap(), [1000.0]);
        assert_eq!(parse_sweep("0.5:1.5:0.5").unwrap(), [0.5, 1.0, 1.5]);
        assert!(parse_sweep("5:1:1").is_err());
        assert!(parse_sweep("1:5").is_err());
        assert!(parse_sweep("a:b:c").is_err());
        assert!(parse_sweep("1:1e18:1e-9").is_err());
        assert!(parse_sweep("1:inf:1").is_err());
        // An infinite step (here by overflow) once gave a NaN rate.
        assert!(parse_sweep("2:2:72E7374").is_err());
        assert!(parse_sweep("2:2:inf").is_err());
        assert!(parse_sweep("nan:2:1").is_err());
    }

    #[test]
    fn csv_has_one_line_per_step() {
        let step = Step {
            offered: 1000.0,
            achieved: 999.5,
            p50_ms: 0.1,
            p90_ms: 0.2,
            p99_ms: 0.3,
            errors_per_sec: 0.0,
            errors: 0,
            unfinished: 1,
        };
        let text = csv(&[step.clone(), step]);
        assert_eq!(text.lines().count(), 3);
        assert_eq!(
            text.lines().nth(1),
            Some("1000.0,999.5,0.100,0.200,0.300,0.0,0,1")
        );
    }
}
