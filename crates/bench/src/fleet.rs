//! Load over several processes: each child prints its report as JSON on stdout and the
//! reports are read back here. Slow downloads need it because this machine allows 20,000
//! open files per process, so 100,000 connections take at least five children (`ramjet
//! bench --slow ... --json`, their [`SlowReport`]s merged); the SPECweb99 client uses it
//! for `--processes` (`ramjet specweb run --part K/N`, per-connection counts).

use std::process::{Command, Stdio};

use crate::slow::SlowReport;

/// Start every command, wait for all, merge their JSON reports. A child that fails or prints
/// no report is an error naming it.
pub fn run_processes(children: Vec<Command>) -> Result<SlowReport, String> {
    let mut total: Option<SlowReport> = None;
    for r in run_children::<SlowReport>(children)? {
        match total.as_mut() {
            Some(t) => t.merge(&r),
            None => total = Some(r),
        }
    }
    total.ok_or_else(|| "no processes".to_string())
}

/// Start every command, wait for all, and read the JSON each prints on stdout. A child
/// that fails or prints no report is an error naming it.
pub(crate) fn run_children<T: serde::de::DeserializeOwned>(
    children: Vec<Command>,
) -> Result<Vec<T>, String> {
    let mut running = Vec::with_capacity(children.len());
    for (k, mut cmd) in children.into_iter().enumerate() {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("process {k}: {e}"))?;
        running.push(child);
    }
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for (k, child) in running.into_iter().enumerate() {
        match child.wait_with_output() {
            Ok(out) if out.status.success() => match serde_json::from_slice::<T>(&out.stdout) {
                Ok(r) => reports.push(r),
                Err(e) => failures.push(format!("process {k}: unreadable report: {e}")),
            },
            Ok(out) => failures.push(format!("process {k} exited with {}", out.status)),
            Err(e) => failures.push(format!("process {k}: {e}")),
        }
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    Ok(reports)
}
