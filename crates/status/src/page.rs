//! The status page: HTML for a person, JSON for a script.

use std::fmt::Write;

use crate::snapshot::Snapshot;

/// Apache mod_status's machine-readable form (`?auto`), which existing monitoring checks
/// and exporters parse: `Key: value` lines. ramjet has no worker slots, so the "workers" and
/// the scoreboard are its connections: `R` reading a head, `W` writing an answer or being
/// answered, `K` idle between requests; `BusyWorkers` the first two, `IdleWorkers` the last.
pub(crate) fn auto(s: &Snapshot, host: &str) -> String {
    let c = &s.connections;
    let up = s.uptime.max(1e-3);
    let busy = c.reading + c.writing + c.working;
    let mut o = String::with_capacity(1024);
    let now = httpdate::fmt_http_date(std::time::SystemTime::now());
    let started =
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.started));
    let _ = write!(
        o,
        "{host}\nServerVersion: ramjet/{}\nServerMPM: ramjet\nCurrentTime: {now}\nRestartTime: {started}\n\
         ServerUptimeSeconds: {up_s}\nServerUptime: {}\nTotal Accesses: {}\nTotal kBytes: {}\n\
         Uptime: {up_s}\nReqPerSec: {:.6}\nBytesPerSec: {:.6}\nBytesPerReq: {:.6}\n\
         BusyWorkers: {busy}\nIdleWorkers: {}\nConnsTotal: {}\nConnsAsyncWriting: {}\n\
         ConnsAsyncKeepAlive: {}\nConnsAsyncClosing: 0\n",
        s.version,
        uptime(s.uptime),
        s.requests,
        s.body_bytes / 1024,
        s.requests as f64 / up,
        s.body_bytes as f64 / up,
        if s.requests > 0 {
            s.body_bytes as f64 / s.requests as f64
        } else {
            0.0
        },
        c.idle,
        c.open,
        c.writing,
        c.idle,
        up_s = s.uptime as u64,
    );
    o.push_str("Scoreboard: ");
    for (ch, n) in [
        ('R', c.reading),
        ('W', c.writing + c.working),
        ('K', c.idle),
    ] {
        o.extend(std::iter::repeat_n(ch, n as usize));
    }
    o.push('\n');
    o
}

pub(crate) fn json(s: &Snapshot) -> Vec<u8> {
    let mut v = serde_json::to_vec_pretty(s).unwrap_or_default();
    v.push(b'\n');
    v
}

fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            c => o.push(c),
        }
    }
    o
}

/// Bytes with a binary unit (`1.5 MiB`).
fn bytes(n: f64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

fn uptime(secs: f64) -> String {
    let s = secs as u64;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d} d {h} h {m} min")
    } else if h > 0 {
        format!("{h} h {m} min {s} s")
    } else {
        format!("{m} min {s} s")
    }
}

/// One line chart of `values` (oldest first) as inline SVG: drawn here, nothing fetched.
fn chart(title: &str, values: &[f64], show: impl Fn(f64) -> String) -> String {
    const W: f64 = 600.0;
    const H: f64 = 80.0;
    let max = values.iter().copied().fold(0.0, f64::max);
    let top = if max > 0.0 { max * 1.1 } else { 1.0 };
    let n = values.len().max(2) as f64 - 1.0;
    let mut line = String::new();
    for (i, v) in values.iter().enumerate() {
        let x = W * i as f64 / n;
        let y = H - H * v / top;
        let _ = write!(line, "{}{x:.1},{y:.1}", if i == 0 { "" } else { " " });
    }
    let last = values.last().copied().unwrap_or(0.0);
    format!(
        "<figure class=\"chart\"><figcaption>{title}: now {}, peak {}</figcaption>\
         <svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\">\
         <title>{title}</title><rect width=\"{W}\" height=\"{H}\" fill=\"#f6f6f6\"/>\
         <polyline fill=\"none\" stroke=\"#2060b0\" stroke-width=\"1.5\" points=\"{line}\"/></svg></figure>\n",
        show(last),
        show(max)
    )
}

/// The last minutes as three charts: requests/s, bytes/s and open connections.
fn charts(s: &Snapshot) -> String {
    if s.history.len() < 2 {
        return "<p>The charts start after the first seconds.</p>\n".into();
    }
    let minutes = (s.history.first().map_or(0.0, |p| p.ago) / 60.0).ceil();
    let req: Vec<f64> = s.history.iter().map(|p| p.requests_per_second).collect();
    let bps: Vec<f64> = s.history.iter().map(|p| p.bytes_per_second).collect();
    let conns: Vec<f64> = s.history.iter().map(|p| p.connections as f64).collect();
    format!(
        "<h2>The last {minutes:.0} min</h2>\n{}{}{}",
        chart("requests/s", &req, |v| format!("{v:.0}")),
        chart("bytes/s", &bps, |v| format!("{}/s", bytes(v))),
        chart("connections", &conns, |v| format!("{v:.0}"))
    )
}

pub(crate) fn html(s: &Snapshot, refresh: Option<u32>) -> String {
    let mut o = String::with_capacity(8192);
    let up = s.uptime.max(1e-3);
    let started =
        httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(s.started));
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ramjet status</title>{}\
         <style>body{{font-family:sans-serif}}td,th{{padding:2px 10px;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}\
         figure.chart{{display:inline-block;margin:0 16px 8px 0}}figcaption{{font-size:90%}}</style></head><body>\n\
         <h1>ramjet {} status</h1>\n<p>Started {started}; up {}.{}{}</p>\n",
        refresh.map_or(String::new(), |n| format!(
            "<meta http-equiv=\"refresh\" content=\"{n}\">"
        )),
        s.version,
        uptime(s.uptime),
        refresh.map_or(String::new(), |n| format!(" Refreshed every {n} s.")),
        if s.draining {
            " <strong>Draining</strong>: stopping; the health check answers 503."
        } else {
            ""
        }
    );
    o.push_str(&charts(s));
    let _ = write!(
        o,
        "<table>\n<tr><th>requests</th><td>{}</td><td>{:.1}/s</td></tr>\n\
         <tr><th>body bytes sent</th><td>{}</td><td>{}/s</td></tr>\n\
         <tr><th>last {:.0} s</th><td>{:.1} requests/s</td><td>{}/s</td></tr>\n\
         <tr><th>file cache hits / misses</th><td>{}</td><td>{}</td></tr>\n\
         <tr><th>blocking jobs now / total</th><td>{}</td><td>{}</td></tr>\n\
         <tr><th>handed off / in messages / refused</th><td>{}</td><td>{} / {}</td></tr>\n\
         <tr><th>FTP sessions now / logins</th><td>{}</td><td>{}</td></tr>\n\
         <tr><th>FTP files / listings / bytes</th><td>{} / {}</td><td>{}</td></tr>\n</table>\n",
        s.requests,
        s.requests as f64 / up,
        bytes(s.body_bytes as f64),
        bytes(s.body_bytes as f64 / up),
        s.recent.map_or(0.0, |r| r.seconds),
        s.recent.map_or(0.0, |r| r.requests_per_second),
        bytes(s.recent.map_or(0.0, |r| r.bytes_per_second)),
        s.cache_hits,
        s.cache_misses,
        s.blocking_now,
        s.blocking_total,
        s.handoff.connections,
        s.handoff.messages,
        s.handoff.refused,
        s.ftp.sessions,
        s.ftp.logins,
        s.ftp.files,
        s.ftp.listings,
        bytes(s.ftp.bytes as f64)
    );
    let c = &s.connections;
    let _ = write!(
        o,
        "<h2>Connections</h2>\n<table>\n<tr><th>open</th><th>reading</th><th>idle</th>\
         <th>(parked)</th><th>writing</th><th>working</th><th>accepted</th></tr>\n\
         <tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n</table>\n",
        c.open, c.reading, c.idle, c.parked, c.writing, c.working, c.accepted
    );
    o.push_str("<h2>Workers</h2>\n<table>\n<tr><th>worker</th><th>requests</th><th>connections</th></tr>\n");
    for w in &s.workers {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            w.worker, w.requests, w.connections
        );
    }
    o.push_str("</table>\n<h2>Locations</h2>\n<table>\n<tr><th>host</th><th>location</th><th>1xx</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th></tr>\n");
    for l in s
        .locations
        .iter()
        .filter(|l| l.classes.iter().any(|&n| n > 0))
    {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td>",
            escape(&l.host),
            escape(if l.location.is_empty() {
                "(none)"
            } else {
                &l.location
            })
        );
        for n in l.classes {
            let _ = write!(o, "<td>{n}</td>");
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
    if !s.caches.is_empty() {
        o.push_str("<h2>Caches</h2>\n<table>\n<tr><th>cache</th><th>hits</th><th>misses</th><th>stale</th><th>revalidated</th><th>bypass</th><th>collapsed</th><th>hit bytes</th><th>memory</th><th>disk</th><th>objects</th></tr>\n");
        for c in &s.caches {
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&c.name),
                c.hits,
                c.misses,
                c.stale,
                c.revalidated,
                c.bypass,
                c.collapsed,
                c.hit_bytes,
                c.memory_bytes,
                c.disk_bytes,
                c.objects
            );
        }
        o.push_str("</table>\n");
    }
    if !s.upstreams.is_empty() {
        o.push_str("<h2>Upstreams</h2>\n<table>\n<tr><th>upstream</th><th>server</th><th>requests</th><th>failures</th><th>in flight</th><th>mean time to head</th></tr>\n");
        for u in &s.upstreams {
            let mean = if u.requests > u.failures {
                format!(
                    "{:.1} ms",
                    1000.0 * u.header_seconds / (u.requests - u.failures) as f64
                )
            } else {
                "-".into()
            };
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{mean}</td></tr>",
                escape(&u.upstream),
                escape(&u.server),
                u.requests,
                u.failures,
                u.in_flight
            );
        }
        o.push_str("</table>\n");
    }
    let _ = write!(
        o,
        "<h2>Downloads in progress: {}</h2>\n<p>Responses of 1 MiB or more, slowest first.</p>\n<table>\n\
         <tr><th>client</th><th>request</th><th>sent</th><th>of</th><th>time</th><th>rate</th></tr>\n",
        s.downloads_in_progress
    );
    for d in &s.downloads {
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1} s</td><td>{}/s</td></tr>",
            d.client,
            escape(&d.request),
            bytes(d.sent as f64),
            bytes(d.total as f64),
            d.seconds,
            bytes(d.rate)
        );
    }
    o.push_str("</table>\n</body></html>\n");
    o
}
