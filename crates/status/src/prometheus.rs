//! The Prometheus text exposition format (0.0.4): `# HELP`, `# TYPE`, then samples with
//! escaped label values. Written here rather than through `prometheus-client`'s registry,
//! whose labelled families take a lock per update: these counters are per-worker plain
//! stores, added up only now. The format is checked by Prometheus' own Python parser in
//! the integration tests.

use std::fmt::Write;

use crate::snapshot::{Snapshot, UpstreamServerCounts};

const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// A label value with `\`, `"` and newlines escaped.
fn label(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

fn family(o: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} {kind}");
}

pub(crate) fn render(s: &Snapshot) -> String {
    let mut o = String::with_capacity(4096);
    family(&mut o, "ramjet_up", "gauge", "1 while the server answers.");
    let _ = writeln!(o, "ramjet_up 1");
    family(
        &mut o,
        "ramjet_start_time_seconds",
        "gauge",
        "When the server started (Unix time).",
    );
    let _ = writeln!(o, "ramjet_start_time_seconds {}", s.started);
    family(
        &mut o,
        "ramjet_uptime_seconds",
        "gauge",
        "Seconds since the server started.",
    );
    let _ = writeln!(o, "ramjet_uptime_seconds {:.3}", s.uptime);
    family(
        &mut o,
        "ramjet_draining",
        "gauge",
        "1 once a graceful stop has begun (the health handler answers 503).",
    );
    let _ = writeln!(o, "ramjet_draining {}", u8::from(s.draining));

    family(
        &mut o,
        "ramjet_requests_total",
        "counter",
        "Requests answered, by virtual host, location and status class (location \"\": before one was found).",
    );
    for l in &s.locations {
        for (class, n) in CLASSES.iter().zip(l.classes) {
            if n > 0 {
                let _ = writeln!(
                    o,
                    "ramjet_requests_total{{host=\"{}\",location=\"{}\",class=\"{class}\"}} {n}",
                    label(&l.host),
                    label(&l.location)
                );
            }
        }
    }
    family(
        &mut o,
        "ramjet_response_body_bytes_total",
        "counter",
        "Response body bytes sent.",
    );
    let _ = writeln!(o, "ramjet_response_body_bytes_total {}", s.body_bytes);

    family(
        &mut o,
        "ramjet_connections_accepted_total",
        "counter",
        "Client connections accepted.",
    );
    let _ = writeln!(
        o,
        "ramjet_connections_accepted_total {}",
        s.connections.accepted
    );
    family(
        &mut o,
        "ramjet_connections",
        "gauge",
        "Open client connections by state: reading a head, idle between requests, writing a response, working on an answer.",
    );
    let c = &s.connections;
    for (state, n) in [
        ("reading", c.reading),
        ("idle", c.idle),
        ("writing", c.writing),
        ("working", c.working),
    ] {
        let _ = writeln!(o, "ramjet_connections{{state=\"{state}\"}} {n}");
    }

    family(
        &mut o,
        "ramjet_connections_parked",
        "gauge",
        "Idle keep-alive connections waiting without a task (counted as idle too).",
    );
    let _ = writeln!(o, "ramjet_connections_parked {}", c.parked);
    family(
        &mut o,
        "ramjet_worker_requests_total",
        "counter",
        "Requests answered by each worker.",
    );
    for w in &s.workers {
        let _ = writeln!(
            o,
            "ramjet_worker_requests_total{{worker=\"{}\"}} {}",
            w.worker, w.requests
        );
    }
    family(
        &mut o,
        "ramjet_worker_connections",
        "gauge",
        "Open client connections of each worker.",
    );
    for w in &s.workers {
        let _ = writeln!(
            o,
            "ramjet_worker_connections{{worker=\"{}\"}} {}",
            w.worker, w.connections
        );
    }

    family(
        &mut o,
        "ramjet_file_cache_hits_total",
        "counter",
        "Static requests answered from the open-file cache without waiting.",
    );
    let _ = writeln!(o, "ramjet_file_cache_hits_total {}", s.cache_hits);
    family(
        &mut o,
        "ramjet_file_cache_misses_total",
        "counter",
        "Static requests that waited for the disk (open, stat, read or listing).",
    );
    let _ = writeln!(o, "ramjet_file_cache_misses_total {}", s.cache_misses);
    family(
        &mut o,
        "ramjet_blocking_jobs",
        "gauge",
        "Jobs on the blocking pool now (its queue and its threads).",
    );
    let _ = writeln!(o, "ramjet_blocking_jobs {}", s.blocking_now);
    family(
        &mut o,
        "ramjet_blocking_jobs_total",
        "counter",
        "Jobs given to the blocking pool.",
    );
    let _ = writeln!(o, "ramjet_blocking_jobs_total {}", s.blocking_total);
    for (name, help, v) in [
        (
            "ramjet_handoff_connections_total",
            "Client connections handed to backend processes.",
            s.handoff.connections,
        ),
        (
            "ramjet_handoff_messages_total",
            "Messages that carried them (a message holds up to 64 connections).",
            s.handoff.messages,
        ),
        (
            "ramjet_handoff_refused_total",
            "Connections answered 503 because their backend could not take them.",
            s.handoff.refused,
        ),
        (
            "ramjet_tls_handshakes_total",
            "TLS handshakes begun.",
            s.tls_handshakes.0,
        ),
        (
            "ramjet_tls_handshakes_completed_total",
            "TLS handshakes completed.",
            s.tls_handshakes.1,
        ),
        (
            "ramjet_tls_handshakes_resumed_total",
            "TLS handshakes completed by resuming a session.",
            s.tls_handshakes.2,
        ),
        (
            "ramjet_http2_connections_total",
            "HTTP/2 connections (h2 by ALPN, or h2c by prior knowledge).",
            s.http2.0,
        ),
        (
            "ramjet_http2_streams_total",
            "HTTP/2 streams (requests) opened.",
            s.http2.1,
        ),
        (
            "ramjet_http2_floods_total",
            "HTTP/2 connections closed with GOAWAY as floods.",
            s.http2.2,
        ),
        (
            "ramjet_ftp_logins_total",
            "FTP logins (anonymous).",
            s.ftp.logins,
        ),
        (
            "ramjet_ftp_files_total",
            "Files sent whole over FTP.",
            s.ftp.files,
        ),
        (
            "ramjet_ftp_listings_total",
            "Directory listings sent over FTP.",
            s.ftp.listings,
        ),
        (
            "ramjet_ftp_bytes_total",
            "Bytes sent on FTP data connections.",
            s.ftp.bytes,
        ),
        (
            "ramjet_ftp_data_refused_total",
            "FTP data connections refused: from another address than the control one's.",
            s.ftp.refused,
        ),
    ] {
        family(&mut o, name, "counter", help);
        let _ = writeln!(o, "{name} {v}");
    }
    family(
        &mut o,
        "ramjet_ftp_sessions",
        "gauge",
        "FTP control connections open now.",
    );
    let _ = writeln!(o, "ramjet_ftp_sessions {}", s.ftp.sessions);
    family(
        &mut o,
        "ramjet_downloads",
        "gauge",
        "Responses of 1 MiB or more being sent now.",
    );
    let _ = writeln!(o, "ramjet_downloads {}", s.downloads_in_progress);

    type Value = fn(&UpstreamServerCounts) -> String;
    let upstream: [(&str, &str, &str, Value); 4] = [
        (
            "ramjet_upstream_requests_total",
            "counter",
            "Attempts sent to each upstream server.",
            |u| u.requests.to_string(),
        ),
        (
            "ramjet_upstream_failures_total",
            "counter",
            "Attempts that failed (connect, timeout, closed, invalid response).",
            |u| u.failures.to_string(),
        ),
        (
            "ramjet_upstream_in_flight",
            "gauge",
            "Requests waiting on each upstream server now.",
            |u| u.in_flight.to_string(),
        ),
        (
            "ramjet_upstream_header_seconds_total",
            "counter",
            "Time from sending a request to its response head, summed (divide by the requests for the mean).",
            |u| format!("{:.6}", u.header_seconds),
        ),
    ];
    if !s.caches.is_empty() {
        family(
            &mut o,
            "ramjet_cache_requests_total",
            "counter",
            "Requests to each cache by result: hit (from storage), miss (fetched and stored), stale (a stale answer served), revalidated (refreshed by a 304), bypass (passed on, not stored), collapsed (waited for another request's fetch).",
        );
        for c in &s.caches {
            for (result, v) in [
                ("hit", c.hits),
                ("miss", c.misses),
                ("stale", c.stale),
                ("revalidated", c.revalidated),
                ("bypass", c.bypass),
                ("collapsed", c.collapsed),
            ] {
                let _ = writeln!(
                    o,
                    "ramjet_cache_requests_total{{cache=\"{}\",result=\"{result}\"}} {v}",
                    label(&c.name)
                );
            }
        }
        type CacheValue = fn(&crate::snapshot::CacheCounts) -> u64;
        let per_cache: [(&str, &str, &str, CacheValue); 8] = [
            (
                "ramjet_cache_hit_bytes_total",
                "counter",
                "Body bytes answered from storage.",
                |c| c.hit_bytes,
            ),
            (
                "ramjet_cache_miss_bytes_total",
                "counter",
                "Body bytes fetched from the origin to be stored.",
                |c| c.miss_bytes,
            ),
            (
                "ramjet_cache_stored_total",
                "counter",
                "Answers stored whole.",
                |c| c.stored,
            ),
            (
                "ramjet_cache_evicted_total",
                "counter",
                "Answers evicted from a tier by the size manager.",
                |c| c.evicted,
            ),
            (
                "ramjet_cache_purged_total",
                "counter",
                "Answers removed by PURGE or invalidation.",
                |c| c.purged,
            ),
            (
                "ramjet_cache_memory_bytes",
                "gauge",
                "Bytes held by the memory tier.",
                |c| c.memory_bytes,
            ),
            (
                "ramjet_cache_disk_bytes",
                "gauge",
                "Bytes held by the disk tier.",
                |c| c.disk_bytes,
            ),
            (
                "ramjet_cache_objects",
                "gauge",
                "Stored answers (variants counted apart).",
                |c| c.objects,
            ),
        ];
        for (name, kind, help, value) in per_cache {
            family(&mut o, name, kind, help);
            for c in &s.caches {
                let _ = writeln!(o, "{name}{{cache=\"{}\"}} {}", label(&c.name), value(c));
            }
        }
    }
    if !s.upstreams.is_empty() {
        for (name, kind, help, value) in upstream {
            family(&mut o, name, kind, help);
            for u in &s.upstreams {
                let _ = writeln!(
                    o,
                    "{name}{{upstream=\"{}\",server=\"{}\"}} {}",
                    label(&u.upstream),
                    label(&u.server),
                    value(u)
                );
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(label("/dl/"), "/dl/");
    }
}
