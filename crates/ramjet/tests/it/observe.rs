//! `/metrics` read by Prometheus' own text-format parser, and the status page.

use std::io::{Read, Write};
use std::process::{Command, Stdio};

use ramjet_testkit::{Backend, Flow, Server};
use serde_json::Value;

/// Samples of a scrape as Prometheus' Python parser reads them: (name, labels, value).
fn scrape(s: &Server, path: &str) -> Vec<(String, Value, f64)> {
    let (ok, text) = crate::curl(&[&s.url(path)]);
    assert!(ok);
    let mut py = Command::new("python3")
        .args([
            "-c",
            "import sys, json\n\
             from prometheus_client.parser import text_string_to_metric_families as parse\n\
             print(json.dumps([[x.name, x.labels, x.value] for f in parse(sys.stdin.read()) for x in f.samples]))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    py.stdin.take().unwrap().write_all(&text).unwrap();
    let out = py.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser refused the scrape: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&text)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[0].as_str().unwrap().to_string(),
                x[1].clone(),
                x[2].as_f64().unwrap(),
            )
        })
        .collect()
}

/// The value of `name` with these labels (all given must match), summed over the rest.
fn value(samples: &[(String, Value, f64)], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l[*k] == *v))
        .map(|(_, _, v)| v)
        .sum()
}

/// A site with files under `/` and the status page at `/server-status`.
const STATUS_SITE: &str =
    "[[location]]\nroot = \"root\"\n[[location]]\npath = \"/server-status\"\nhandlers = [\"status\"]\n";
#[test]
fn metrics_are_counted_per_location_and_class_and_parse_as_prometheus() {
    let backend = Backend::start(|x| {
        x.ok(b"from the backend");
        Flow::Keep
    });
    let dir = Server::dir();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("root/a.txt"), "hello").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        &format!(
            "workers = 2\n\
             [upstream.app]\nservers = [\"{}\"]\n\
             [upstream.\"gone \\\"q\\\"\"]\nservers = [\"127.0.0.1:1\"]\n\
             [[location]]\nroot = \"root\"\n\
             [[location]]\npath = \"/app/\"\nproxy = \"app\"\n\
             [[location]]\npath = \"/down/\"\nproxy = \"gone \\\"q\\\"\"\n\
             [[location]]\npath = \"/metrics\"\nhandlers = [\"metrics\"]\nallow = [\"127.0.0.1\"]\n",
            backend.addr
        ),
    );
    for _ in 0..3 {
        assert_eq!(s.get("/a.txt").status, 200);
    }
    for _ in 0..2 {
        assert_eq!(s.get("/missing").status, 404);
    }
    assert_eq!(s.get("/app/x").text(), "from the backend");
    assert_eq!(s.get("/down/x").status, 502);
    // Counted when logged, just after the bytes are written: poll.
    let m = crate::poll_until(|| {
        let m = scrape(&s, "/metrics");
        let twos = value(
            &m,
            "ramjet_requests_total",
            &[("location", "/"), ("class", "2xx")],
        );
        let proxied = value(
            &m,
            "ramjet_requests_total",
            &[("location", "/down/"), ("class", "5xx")],
        );
        (twos == 3.0 && proxied == 1.0).then_some(m)
    });
    let req = |loc: &str, class: &str| {
        value(
            &m,
            "ramjet_requests_total",
            &[("host", "*"), ("location", loc), ("class", class)],
        )
    };
    assert_eq!(req("/", "4xx"), 2.0);
    assert_eq!(req("/app/", "2xx"), 1.0);
    assert_eq!(
        value(&m, "ramjet_worker_requests_total", &[]),
        7.0 + req("/metrics", "2xx")
    );
    assert_eq!(
        value(&m, "ramjet_file_cache_hits_total", &[])
            + value(&m, "ramjet_file_cache_misses_total", &[]),
        5.0
    );
    assert!(value(&m, "ramjet_response_body_bytes_total", &[]) >= 15.0 + 16.0);
    assert!(value(&m, "ramjet_connections_accepted_total", &[]) >= 7.0);
    // This scrape's own connection is open and being answered.
    assert!(value(&m, "ramjet_connections", &[]) >= 1.0);
    assert_eq!(value(&m, "ramjet_up", &[]), 1.0);
    let server = backend.addr.to_string();
    assert_eq!(
        value(
            &m,
            "ramjet_upstream_requests_total",
            &[("upstream", "app"), ("server", &server)]
        ),
        1.0
    );
    assert_eq!(
        value(&m, "ramjet_upstream_failures_total", &[("upstream", "app")]),
        0.0
    );
    // A label value with quotes, escaped and read back.
    assert!(
        value(
            &m,
            "ramjet_upstream_failures_total",
            &[("upstream", "gone \"q\"")]
        ) >= 1.0
    );
    // Protected: another address gets 403.
    let (ok, code) = crate::curl(&[
        "--interface",
        "127.0.0.2",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &s.url("/metrics"),
    ]);
    assert!(ok);
    assert_eq!(code, b"403");
    s.assert_clean_log(&["502", "127.0.0.1:1"]);
}

/// A server with files and a status page at /server-status, and a client that asked for
/// its 8 MiB file and does not read: the download stays in progress.
fn status_server_with_a_stalled_download() -> (Server, std::net::TcpStream) {
    let dir = Server::dir();
    std::fs::create_dir_all(dir.path().join("root")).unwrap();
    std::fs::write(dir.path().join("root/big.bin"), crate::bytes(8 << 20, 7)).unwrap();
    std::fs::write(dir.path().join("root/small.txt"), "s").unwrap();
    let s = Server::start(
        crate::BIN,
        dir,
        "[limits]\nsend_buffer = \"8k\"\n[[location]]\nroot = \"root\"\n[[location]]\npath = \"/server-status\"\nhandlers = [\"status\"]\n",
    );
    let mut slow = std::net::TcpStream::connect(s.addr).unwrap();
    slow.write_all(b"GET /big.bin HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 1];
    slow.read_exact(&mut first).unwrap();
    (s, slow)
}

#[test]
fn the_status_page_lists_slow_downloads_and_connection_states() {
    let (s, slow) = status_server_with_a_stalled_download();
    // A keep-alive connection left idle after one request.
    let mut idle = s.client();
    idle.send(b"GET /small.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(idle.response(false).text(), "s");
    let status = crate::poll_until(|| {
        let (ok, body) = crate::curl(&[&s.url("/server-status?json")]);
        assert!(ok);
        let v: Value = serde_json::from_slice(&body).unwrap();
        (v["downloads_in_progress"] == 1 && v["connections"]["idle"].as_u64() >= Some(1))
            .then_some(v)
    });
    let d = &status["downloads"][0];
    assert_eq!(d["request"], "GET /big.bin HTTP/1.1");
    assert!(d["client"].as_str().unwrap().starts_with("127.0.0.1:"));
    assert_eq!(d["total"], 8 << 20);
    assert!(d["sent"].as_u64().unwrap() < 8 << 20);
    assert!(status["connections"]["writing"].as_u64() >= Some(1));
    assert!(status["uptime"].as_f64().unwrap() > 0.0);
    // The HTML page says the same to a person.
    let (ok, html) = crate::curl(&[&s.url("/server-status")]);
    assert!(ok);
    let html = String::from_utf8(html).unwrap();
    assert!(html.contains("Downloads in progress: 1"), "{html}");
    assert!(html.contains("GET /big.bin HTTP/1.1"));
    assert!(html.contains("<h2>Connections</h2>"));
    // The client goes away: the download leaves the list.
    drop(slow);
    crate::poll_until(|| {
        let (_, body) = crate::curl(&[&s.url("/server-status?json")]);
        let v: Value = serde_json::from_slice(&body).ok()?;
        (v["downloads_in_progress"] == 0).then_some(())
    });
    // Only GET and HEAD.
    let (_, code) = crate::curl(&[
        "-X",
        "POST",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &s.url("/server-status"),
    ]);
    assert_eq!(code, b"405");
    s.assert_clean_log(&[]);
}

/// Run headless Chromium (as CI installs it) with `args` and a profile of its own under
/// `dir`; stdout, or a panic naming what went wrong. At most 120 s.
pub(crate) fn chromium(dir: &std::path::Path, args: &[&str]) -> String {
    let profile = dir.join(format!("chromium-profile-{}", args.len()));
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium is installed (.ci/run installs Debian's package)");
    let mut out = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let end = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            panic!("chromium {args:?} did not finish in 120 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    out.push_str(&reader.join().unwrap());
    assert!(status.success(), "chromium {args:?}: {status}");
    out
}

/// The status page as a browser shows it: rendered by headless Chromium, screenshot kept
/// under the test target's tmp directory (`target/tmp/artifacts/status-page.png`), and the
/// DOM it built says what the JSON says.
#[test]
fn the_status_page_renders_in_chromium_and_matches_the_json() {
    // Content that stays put while the browser looks: a stalled download and a 404.
    let (s, slow) = status_server_with_a_stalled_download();
    let (_, code) = crate::curl(&["-o", "/dev/null", "-w", "%{http_code}", &s.url("/nope")]);
    assert_eq!(code, b"404");
    let json = crate::poll_until(|| {
        let (_, body) = crate::curl(&[&s.url("/server-status?json")]);
        let v: Value = serde_json::from_slice(&body).ok()?;
        (v["downloads_in_progress"] == 1).then_some(v)
    });

    let artifacts = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let work = tempfile::tempdir().unwrap();
    let url = s.url("/server-status");
    chromium(
        work.path(),
        &[&format!("--screenshot={}", shot.display()), &url],
    );
    let png = std::fs::read(&shot).expect("chromium wrote the screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    assert_eq!(width, 1280, "IHDR width");
    // A blank 1280x900 page compresses to a few hundred bytes; text and tables do not.
    assert!(
        png.len() > 8_000,
        "the screenshot looks empty: {} bytes",
        png.len()
    );

    let dom = chromium(work.path(), &["--dump-dom", &url]);
    let version = json["version"].as_str().unwrap();
    assert!(dom.contains(&format!("ramjet {version} status")), "{dom}");
    assert!(dom.contains("Downloads in progress: 1"), "{dom}");
    let d = &json["downloads"][0];
    for field in ["client", "request"] {
        let v = d[field].as_str().unwrap();
        assert!(
            dom.contains(v),
            "the page lacks the download's {field} {v}: {dom}"
        );
    }
    assert!(dom.contains("8.0 MiB"), "the download's total: {dom}");
    // One row per worker in the page's workers table, as in the JSON.
    let workers = dom
        .split("<h2>Workers</h2>")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    assert_eq!(
        workers.matches("<tr>").count() - 1,
        json["workers"].as_array().unwrap().len(),
        "{workers}"
    );
    // Every location the JSON lists (the files location with its 404, the status page's
    // own) is a row of the page's locations table; the page may have counted more since.
    let locations = dom
        .split("<h2>Locations</h2>")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap();
    let listed = json["locations"].as_array().unwrap();
    assert!(!listed.is_empty(), "{json}");
    for l in listed {
        let row = format!(
            "<tr><td>{}</td><td>{}</td>",
            l["host"].as_str().unwrap(),
            Some(l["location"].as_str().unwrap())
                .filter(|n| !n.is_empty())
                .unwrap_or("(none)")
        );
        assert!(locations.contains(&row), "{row} missing from {locations}");
    }
    assert!(
        locations.matches("<tr>").count() > listed.len(),
        "{locations}"
    );
    drop(slow);
    s.assert_clean_log(&[]);
}

/// A download in progress counts in the totals as it goes (it used to count only when it
/// ended: 14 KiB shown while 3 MB/s flowed), and its rate is taken over the last seconds,
/// from what the client has taken (sent less what is still queued in the socket), so a
/// client that reads at 200 KiB/s is shown near that, not at the rate the socket buffers
/// were filled at first. (A client whose own receive buffer grows to megabytes is shown
/// at the rate its host takes bytes until that buffer is full: the server sees no more.)
#[test]
fn running_downloads_count_as_they_go_at_their_recent_rate() {
    let dir = Server::dir();
    std::fs::write(dir.path().join("root/big.bin"), crate::bytes(24 << 20, 9)).unwrap();
    let s = Server::start(crate::BIN, dir, STATUS_SITE);
    let url = s.url("/big.bin");
    // A client reading at 200 KiB/s (1600 kbit/s) with a small receive buffer, as
    // `ramjet bench --slow` holds mirror downloads: the 24 MiB would take two minutes; it is
    // ended below.
    let mut curl = Command::new(crate::BIN)
        .args([
            "bench",
            "--slow",
            "-c",
            "1",
            "--throttle",
            "1600kbit",
            "-d",
            "60s",
            &url,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("ramjet bench");
    let status = |s: &Server| {
        let (_, body) = crate::curl(&[&s.url("/server-status?json")]);
        serde_json::from_slice::<Value>(&body).ok()
    };
    // The bytes already sent show in the totals while the download runs.
    let v = crate::poll_until(|| {
        status(&s)
            .filter(|v| v["downloads_in_progress"] == 1 && v["body_bytes"].as_u64() > Some(1 << 20))
    });
    assert!(v["downloads"][0]["sent"].as_u64() <= v["body_bytes"].as_u64());
    // After a few seconds the rate is the client's: within 200 KiB/s +- 50% (the
    // average since the start still counts the socket buffer filled at first).
    let (rate, average) = crate::poll_until(|| {
        let v = status(&s)?;
        let d = &v["downloads"][0];
        let (seconds, sent, rate) = (
            d["seconds"].as_f64()?,
            d["sent"].as_f64()?,
            d["rate"].as_f64()?,
        );
        (seconds >= 7.0).then_some((rate, sent / seconds))
    });
    let _ = curl.kill();
    let _ = curl.wait();
    let target = 200.0 * 1024.0;
    assert!(
        rate > target * 0.5 && rate < target * 1.5,
        "shown {rate:.0} B/s for a client reading {target} B/s (average since start {average:.0})"
    );
}

/// `?auto`, Apache mod_status's machine-readable form, read by the Prometheus exporter
/// monitoring setups use for Apache (Debian's `prometheus-apache-exporter`): every value
/// parses and says what the server did.
#[test]
fn the_auto_form_is_read_by_the_apache_exporter() {
    let s = crate::server_with(&[("a.txt", b"hello")], STATUS_SITE);
    for _ in 0..5 {
        s.get("/a.txt");
    }
    let mut idle = s.client();
    idle.send(b"GET /a.txt HTTP/1.1\r\nHost: t\r\n\r\n");
    idle.response(false);
    let (ok, auto) = crate::curl(&[&s.url("/server-status?auto")]);
    let auto = String::from_utf8(auto).unwrap();
    assert!(ok && auto.contains("\nTotal Accesses: "), "{auto}");
    assert!(auto.contains("\nScoreboard: "), "{auto}");
    let port = crate::proxy_real::free_port();
    let mut exporter = Command::new("prometheus-apache-exporter")
        .arg(format!("--scrape_uri={}", s.url("/server-status?auto")))
        .arg(format!("--telemetry.address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus-apache-exporter (Debian; .ci/deps installs it)");
    let metrics = crate::poll_until(|| {
        let (ok, body) = crate::curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
        let text = String::from_utf8_lossy(&body).into_owned();
        (ok && text.contains("apache_up")).then_some(text)
    });
    let _ = exporter.kill();
    let _ = exporter.wait();
    let sample = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    assert_eq!(sample("apache_up "), 1.0);
    assert!(sample("apache_accesses_total ") >= 6.0, "{metrics}");
    assert!(sample("apache_uptime_seconds_total ") >= 0.0);
    assert!(
        sample("apache_scoreboard{state=\"keepalive\"}") >= 1.0,
        "{metrics}"
    );
    assert!(
        sample("apache_connections{state=\"total\"}") >= 1.0,
        "{metrics}"
    );
    assert!(metrics.contains("apache_info{mpm=\"ramjet\""), "{metrics}");
    assert!(
        !metrics.contains("apache_exporter_scrape_failures_total 1"),
        "{metrics}"
    );
}

/// `?refresh=N` reloads the page (Apache's parameter), and the page draws the last
/// minutes itself as inline SVG: requests/s, bytes/s, connections.
#[test]
fn the_status_page_refreshes_and_draws_the_last_minutes() {
    let s = crate::server_with(&[("a.txt", b"hello")], STATUS_SITE);
    let html = crate::poll_until(|| {
        s.get("/a.txt");
        let (_, body) = crate::curl(&[&s.url("/server-status?refresh=5")]);
        let html = String::from_utf8(body).ok()?;
        html.contains("<svg").then_some(html)
    });
    assert!(
        html.contains("<meta http-equiv=\"refresh\" content=\"5\">"),
        "{html}"
    );
    assert_eq!(html.matches("<svg").count(), 3, "{html}");
    for title in ["requests/s", "bytes/s", "connections"] {
        assert!(html.contains(&format!("<title>{title}</title>")), "{html}");
    }
    assert!(!html.contains("http-equiv=\"refresh\" content=\"0"));
    // Out of range is clamped; nothing is fetched from elsewhere.
    let (_, body) = crate::curl(&[&s.url("/server-status?refresh=0")]);
    assert!(String::from_utf8_lossy(&body).contains("content=\"1\""));
    assert!(!html.contains("src=\"http"), "{html}");
    let json: Value = serde_json::from_slice(&s.get("/server-status?json").body).unwrap();
    assert!(!json["history"].as_array().unwrap().is_empty(), "{json}");
}

/// A listing with a 210-character file name fits a 1280-px window: the name wraps in its
/// column instead of pushing the others off the screen. Measured in headless Chromium
/// through a page of the same origin that frames the listing and writes down its width.
#[test]
fn a_listing_with_a_long_name_fits_the_window() {
    // No hyphen or space: nothing a browser would break the name at.
    let long = format!("{}.iso", "release_2026_11_amd64_netinst_".repeat(7));
    assert!(long.len() >= 200);
    let probe = "<!DOCTYPE html><html><body><iframe id=\"f\" src=\"/pub/\" style=\"width:1280px;height:600px;border:0\"></iframe><script>document.getElementById('f').onload=function(){var d=this.contentDocument.documentElement;document.body.setAttribute('data-width',String(d.scrollWidth));};</script></body></html>";
    let s = crate::server_with(
        &[
            (&format!("pub/{long}"), b"x"),
            ("pub/short.txt", b"y"),
            ("probe.html", probe.as_bytes()),
        ],
        "[[location]]\nroot = \"root\"\nautoindex = true\n",
    );
    let work = tempfile::tempdir().unwrap();
    let dom = chromium(
        work.path(),
        &[
            "--virtual-time-budget=5000",
            "--dump-dom",
            &s.url("/probe.html"),
        ],
    );
    let width: u32 = dom
        .split("data-width=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no width in {dom}"));
    assert!(width <= 1280, "the listing is {width} px wide");
}
