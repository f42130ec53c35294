//! `ramjet bench` end to end against the real server: the closed loop's exact counts, a
//! sweep written as CSV, JSON and SVG and plotted again from JSON, and slow downloads spread
//! over two processes and two source addresses.

use std::process::Command;

use crate::{bytes, server_with, BIN};

fn bench(args: &[&str]) -> String {
    let out = Command::new(BIN).arg("bench").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ramjet bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn closed_loop_counts_exactly_and_reports_json() {
    let s = server_with(&[("4k.bin", &bytes(4096, 1))], "");
    let out = bench(&[
        "-c",
        "4",
        "-n",
        "500",
        "--pipeline",
        "2",
        "--json",
        "--expect-length",
        "4096",
        &s.url("/4k.bin"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["responses"], 500);
    assert_eq!(v["errors"]["total"], 0);
    s.assert_clean_log(&[]);
}

#[test]
fn h2_multiplexes_streams_and_counts_exactly() {
    let s = server_with(
        &[("4k.bin", &bytes(4096, 1)), ("1.bin", b"1")],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let out = bench(&[
        "--h2",
        "-c",
        "3",
        "-n",
        "600",
        "--pipeline",
        "8",
        "--json",
        &s.url("/4k.bin"),
        &s.url("/1.bin"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["responses"], 600);
    assert_eq!(v["errors"]["total"], 0);
    // Over HTTP/2: 3 connections, 600 streams (the metrics request is HTTP/1.1).
    let (_, m) = crate::curl(&[&s.url("/metrics")]);
    let m = String::from_utf8(m).unwrap();
    assert!(m.contains("ramjet_http2_connections_total 3\n"), "{m}");
    assert!(m.contains("ramjet_http2_streams_total 600\n"), "{m}");
    // A body of the wrong length is counted as such.
    let out = bench(&[
        "--h2",
        "-n",
        "10",
        "--json",
        "--expect-length",
        "4096",
        &s.url("/1.bin"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["errors"]["short_body"], 10);
    s.assert_clean_log(&[]);
}

#[test]
fn h2_over_tls_negotiates_h2_and_counts_exactly() {
    let s = crate::tls::tls_server(
        &[("4k.bin", &bytes(4096, 3))],
        "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\n",
    );
    let url = format!("https://localhost:{}/4k.bin", s.tls_addr.unwrap().port());
    let out = bench(&[
        "--h2",
        "-c",
        "2",
        "-n",
        "300",
        "--pipeline",
        "4",
        "--json",
        &url,
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["responses"], 300);
    assert_eq!(v["errors"]["total"], 0);
    let (_, m) = crate::curl(&[&s.url("/metrics")]);
    let m = String::from_utf8(m).unwrap();
    assert!(
        m.contains("ramjet_tls_handshakes_completed_total 2\n"),
        "{m}"
    );
    assert!(m.contains("ramjet_http2_streams_total 300\n"), "{m}");
    // https:// without --h2 is refused with a reason.
    let refused = Command::new(BIN)
        .args(["bench", "-n", "1", &url])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("https:// URLs need --h2"));
    s.assert_clean_log(&[]);
}

#[test]
fn sweep_writes_csv_json_and_svg() {
    let s = server_with(&[("4k.bin", &bytes(4096, 2))], "");
    let dir = tempfile::tempdir().unwrap();
    let (csv, svg, again) = (
        dir.path().join("s.csv"),
        dir.path().join("s.svg"),
        dir.path().join("again.svg"),
    );
    let out = bench(&[
        "--sweep",
        "200:600:200",
        "-d",
        "1s",
        "--pause",
        "0s",
        "-c",
        "4",
        "--json",
        "--label",
        "ramjet",
        "--csv",
        csv.to_str().unwrap(),
        "--svg",
        svg.to_str().unwrap(),
        &s.url("/4k.bin"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    for (step, rate) in steps.iter().zip([200.0, 400.0, 600.0]) {
        let achieved = step["achieved"].as_f64().unwrap();
        assert!((achieved - rate).abs() <= rate * 0.05, "{step}");
    }
    let text = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text.starts_with("offered,achieved,"));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("ramjet replies/s"));

    // Plotted again, next to itself under another label, from the saved JSON.
    let json = dir.path().join("s.json");
    std::fs::write(&json, &out).unwrap();
    bench(&[
        "--plot",
        &format!("a={}", json.display()),
        "--plot",
        &format!("b={}", json.display()),
        "--svg",
        again.to_str().unwrap(),
    ]);
    let plot = std::fs::read_to_string(&again).unwrap();
    assert!(plot.contains("a p99") && plot.contains("b p99"));
    s.assert_clean_log(&[]);
}

#[test]
fn slow_downloads_over_two_processes_and_two_sources() {
    let mut s = server_with(
        &[("big.bin", &bytes(4 << 20, 3))],
        "[log]\naccess = \"{dir}/access.log\"\n",
    );
    let out = bench(&[
        "--slow",
        "-c",
        "20",
        "-d",
        "3s",
        "--throttle",
        "20KB",
        "--processes",
        "2",
        "--sources",
        "127.0.0.1-127.0.0.2",
        "--json",
        &s.url("/big.bin"),
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["wanted"], 20, "{v}");
    assert_eq!(v["established"], 20, "{v}");
    assert_eq!(v["alive_at_end"], 20, "{v}");
    assert_eq!(v["kept_rate"], 20, "{v}");
    // Both addresses reached the server: its access log (flushed on stop) records them.
    s.stop();
    let log = std::fs::read_to_string(s.path("access.log")).unwrap();
    let log: Vec<&str> = log.lines().collect();
    for ip in ["127.0.0.1 ", "127.0.0.2 "] {
        assert!(
            log.iter().any(|l| l.starts_with(ip)),
            "no request from {ip}"
        );
    }
}
