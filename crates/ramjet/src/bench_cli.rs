//! `ramjet bench`: command-line front end of the load generator (crate `ramjet-bench`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use ramjet_bench::{Counter, Progress, SlowSpec, Spec, Sweep, Target};

/// Connections one slow-download process holds at most, below the per-process open-file
/// limit (the rest of the limit is left for the runtime's own descriptors).
const FD_MARGIN: u64 = 200;
/// Source addresses get at most this many connections each (the ephemeral port range is
/// about 28,000 ports per address and server port).
const PER_SOURCE: usize = 20_000;

#[derive(clap::Args)]
pub struct BenchArgs {
    /// URLs to request, round-robin per connection (http:// only).
    urls: Vec<String>,
    /// A file of URLs, one `URL [weight]` per line, added to the rotation.
    #[arg(long)]
    urls_file: Option<PathBuf>,
    /// Concurrent connections (open loop without keep-alive: the most open at once).
    #[arg(short, long, default_value_t = 50)]
    connections: usize,
    /// How long to run (e.g. 10s, 500ms); default 10s unless -n is given.
    #[arg(short, long, value_parser = ramjet_bench::parse_duration)]
    duration: Option<Duration>,
    /// Total requests to send (closed loop; stops at whichever of -d and -n comes first).
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Threads, each with its own event loop.
    #[arg(short, long, default_value_t = 1)]
    threads: usize,
    /// Pin the load threads to these CPUs, e.g. 1 or 1,3.
    #[arg(long, value_delimiter = ',')]
    cpus: Vec<usize>,
    /// Requests in flight per connection (closed loop).
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// A new connection for every request.
    #[arg(long)]
    no_keepalive: bool,
    /// Keep-alive connections of N requests each, all for one URL, the last asking to
    /// close; the next connection takes the next URL (httperf's --num-calls; closed loop).
    #[arg(long, value_name = "N", conflicts_with = "no_keepalive")]
    requests_per_connection: Option<u64>,
    /// Speak HTTP/1.0.
    #[arg(long)]
    http10: bool,
    /// Speak HTTP/2: cleartext by prior knowledge for http:// URLs, TLS with ALPN h2 for
    /// https:// ones (the certificate is not checked); --pipeline N is then N streams in
    /// flight per connection (h2load's -m). Closed loop, keep-alive.
    #[arg(long, conflicts_with_all = ["http10", "no_keepalive", "requests_per_connection", "rate", "sweep", "discard_body", "slow"])]
    h2: bool,
    /// Extra request header, e.g. -H "Accept-Encoding: gzip" (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Per-exchange timeout.
    #[arg(long, default_value = "10s", value_parser = ramjet_bench::parse_duration)]
    timeout: Duration,
    /// Count responses whose body is not this many bytes as errors.
    #[arg(long)]
    expect_length: Option<u64>,
    /// Drop the bytes of Content-Length bodies in the kernel (recv MSG_TRUNC) instead of
    /// reading them: counted, never looked at, so large-file runs measure the server
    /// rather than the client's copying.
    #[arg(long)]
    discard_body: bool,
    /// Open loop: offer this many requests per second whatever the response times.
    #[arg(long)]
    rate: Option<f64>,
    /// Sweep the open-loop rate FROM:TO:STEP, one -d long run per step.
    #[arg(long)]
    sweep: Option<String>,
    /// Pause between sweep steps.
    #[arg(long, default_value = "1s", value_parser = ramjet_bench::parse_duration)]
    pause: Duration,
    /// Write the sweep as CSV to this file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the sweep (or the --plot inputs) as an SVG plot to this file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Name of this sweep's series in plots and JSON.
    #[arg(long, default_value = "server")]
    label: String,
    /// Plot earlier sweeps instead of running one: LABEL=FILE, FILE from `--sweep --json`.
    #[arg(long)]
    plot: Vec<String>,
    /// Plot title.
    #[arg(long, default_value = "ramjet bench sweep")]
    title: String,
    /// Slow downloads: hold -c downloads of the (single) URL for -d, each read at --throttle.
    #[arg(long)]
    slow: bool,
    /// Per-connection read rate for --slow, e.g. 16kbit, 2KB, 1Mbit (per second).
    #[arg(long, default_value = "16kbit")]
    throttle: String,
    /// Source addresses for --slow: a list (127.0.0.2,127.0.0.3) or a range
    /// (127.0.0.1-127.0.0.8); default 127.0.0.1.. as many as 20,000 connections each need.
    #[arg(long)]
    sources: Option<String>,
    /// Processes for --slow (default: as many as the per-process open-file limit needs).
    #[arg(long)]
    processes: Option<usize>,
    /// Connection attempts in flight at once per process (--slow), logins in flight at once
    /// (FTP --hold).
    #[arg(long, default_value_t = 256)]
    connect_concurrency: usize,
    /// SO_RCVBUF per connection for --slow (the kernel doubles it).
    #[arg(long, default_value_t = 4096)]
    recv_buffer: u32,
    /// How often each --slow connection reads (fewer wake-ups for very many connections;
    /// the receive buffer must hold rate x this).
    #[arg(long, default_value = "500ms", value_parser = ramjet_bench::parse_duration)]
    read_every: Duration,
    /// FTP (an ftp:// URL): log -c sessions in, hold them idle for -d, then QUIT them (for
    /// memory per idle control connection).
    #[arg(long)]
    hold: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// No progress bar even on a terminal.
    #[arg(long)]
    no_progress: bool,
}

/// `https://host/path` as `http://host:443/path` (the port made explicit), for the target
/// parser; other URLs as they are.
fn https_as_http(url: &str) -> String {
    let Some(rest) = url.strip_prefix("https://") else {
        return url.to_string();
    };
    let (authority, path) = rest
        .find('/')
        .map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let has_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        && !authority.ends_with(']');
    if has_port {
        format!("http://{authority}{path}")
    } else {
        format!("http://{authority}:443{path}")
    }
}

pub fn bench(args: BenchArgs) -> anyhow::Result<()> {
    if !args.plot.is_empty() {
        return plot(&args);
    }
    if args.urls.iter().any(|u| u.starts_with("ftp://")) {
        return ftp(&args);
    }
    // `https://` only with --h2 (HTTP/2 over TLS), every URL of the run the same scheme.
    let tls = args.urls.iter().any(|u| u.starts_with("https://"));
    if tls && !args.h2 {
        bail!("https:// URLs need --h2 (HTTP/2 over TLS); the HTTP/1 load is cleartext");
    }
    if tls && !args.urls.iter().all(|u| u.starts_with("https://")) {
        bail!("mix of http:// and https:// URLs: one scheme per run");
    }
    let mut targets = args
        .urls
        .iter()
        .map(|u| Target::parse(&https_as_http(u)).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if let Some(file) = &args.urls_file {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let list =
            ramjet_bench::parse_url_list(&text).map_err(|e| anyhow!("{}: {e}", file.display()))?;
        targets.extend(list);
    }
    if targets.is_empty() {
        bail!("give at least one URL (or --urls-file, or --plot)");
    }
    if args.slow {
        return slow(&args, targets);
    }
    let headers = args
        .headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| anyhow!("header `{h}` is not `Name: value`"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let duration = match (args.duration, args.requests) {
        (None, None) => Some(Duration::from_secs(10)),
        (d, _) if args.rate.is_some() || args.sweep.is_some() => {
            Some(d.unwrap_or(Duration::from_secs(10)))
        }
        (d, _) => d,
    };
    if let Some(rate) = args.rate {
        if rate.is_nan() || rate <= 0.0 {
            bail!("--rate must be positive");
        }
    }
    let spec = Spec {
        targets,
        connections: args.connections.max(1),
        duration,
        requests: args.requests,
        keep_alive: !args.no_keepalive,
        http10: args.http10,
        pipeline: args.pipeline.max(1),
        headers,
        threads: args.threads.max(1),
        timeout: args.timeout,
        expect_length: args.expect_length,
        rate: args.rate,
        cpus: args.cpus.clone(),
        discard_body: args.discard_body,
        per_connection: args.requests_per_connection,
        http2: args.h2,
        tls,
    };
    if let Some(sweep) = &args.sweep {
        return run_sweep(&args, &spec, sweep);
    }
    if !args.json {
        let what = match (spec.rate, duration) {
            (Some(r), Some(d)) => format!("{d:?} open-loop test at {r} requests/s"),
            (_, Some(d)) => format!("{d:?} test"),
            _ => format!("{} requests", args.requests.unwrap_or(0)),
        };
        println!(
            "Running {what} @ {}\n  {} threads and {} connections",
            args.urls.join(" "),
            spec.threads,
            spec.connections
        );
    }
    let done = Counter::default();
    let progress = Progress::start(
        !args.no_progress && !args.json,
        duration.unwrap_or(Duration::from_secs(3600)),
        "responses",
        done.clone(),
    );
    let report = ramjet_bench::run_counted(&spec, &done);
    drop(progress);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

fn run_sweep(args: &BenchArgs, spec: &Spec, sweep: &str) -> anyhow::Result<()> {
    let rates = ramjet_bench::parse_sweep(sweep).map_err(anyhow::Error::msg)?;
    if !args.json {
        println!("{}", ramjet_bench::CSV_HEADER);
    }
    let steps = ramjet_bench::sweep(spec, &rates, args.pause, |step| {
        if !args.json {
            println!("{}", ramjet_bench::csv_line(step));
        }
    });
    if let Some(path) = &args.csv {
        std::fs::write(path, ramjet_bench::csv(&steps))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        let svg = ramjet_bench::sweep_svg(&args.title, &[(args.label.clone(), steps.clone())])
            .map_err(anyhow::Error::msg)?;
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let doc = Sweep {
            label: args.label.clone(),
            steps,
        };
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    Ok(())
}

/// `--plot LABEL=FILE ... --svg OUT`: one plot of several saved sweeps.
fn plot(args: &BenchArgs) -> anyhow::Result<()> {
    let out = args
        .svg
        .as_ref()
        .ok_or_else(|| anyhow!("--plot needs --svg OUT"))?;
    let mut series = Vec::new();
    for item in &args.plot {
        let (label, file) = item
            .split_once('=')
            .ok_or_else(|| anyhow!("--plot `{item}`: expected LABEL=FILE"))?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let saved: Sweep =
            serde_json::from_str(&text).with_context(|| format!("{file}: not a sweep JSON"))?;
        series.push((label.to_string(), saved.steps));
    }
    let svg = ramjet_bench::sweep_svg(&args.title, &series).map_err(anyhow::Error::msg)?;
    std::fs::write(out, svg).with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

fn slow(args: &BenchArgs, targets: Vec<Target>) -> anyhow::Result<()> {
    let [target] = <[Target; 1]>::try_from(targets)
        .map_err(|_| anyhow!("--slow takes exactly one URL (a large file)"))?;
    let rate = ramjet_bench::parse_rate(&args.throttle).map_err(anyhow::Error::msg)?;
    let duration = args.duration.unwrap_or(Duration::from_secs(60));
    let connections = args.connections.max(1);
    let sources = match &args.sources {
        Some(s) => ramjet_bench::parse_sources(s).map_err(anyhow::Error::msg)?,
        None if target.addr.ip().is_loopback() && target.addr.is_ipv4() => {
            let n = connections.div_ceil(PER_SOURCE).min(250);
            (1..=n as u8)
                .map(|k| IpAddr::from([127, 0, 0, k]))
                .collect()
        }
        None => Vec::new(),
    };
    let per_process = ramjet_runtime::sys::raise_nofile_limit(1 << 20)
        .unwrap_or(1024)
        .saturating_sub(FD_MARGIN)
        .max(1) as usize;
    let processes = args
        .processes
        .unwrap_or_else(|| connections.div_ceil(per_process))
        .max(1);
    if !args.json {
        println!(
            "Holding {connections} downloads of {}{} at {rate} B/s each for {duration:?}\n  {processes} processes, {} threads each, sources {}",
            target.host,
            target.path,
            args.threads.max(1),
            if sources.is_empty() {
                "chosen by the kernel".to_string()
            } else {
                sources
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            }
        );
    }
    let established = Counter::default();
    let report = if processes == 1 {
        let spec = SlowSpec {
            target,
            connections,
            bytes_per_sec: rate,
            duration,
            sources,
            threads: args.threads.max(1),
            cpus: args.cpus.clone(),
            connect_concurrency: args.connect_concurrency.max(1),
            timeout: args.timeout,
            recv_buffer: args.recv_buffer,
            read_every: args.read_every,
        };
        let progress = Progress::start(
            !args.no_progress && !args.json,
            duration,
            "connections established",
            established.clone(),
        );
        let r = ramjet_bench::run_slow(&spec, &established);
        drop(progress);
        r
    } else {
        let exe = std::env::current_exe().context("finding this executable")?;
        let url = format!("http://{}{}", target.host, target.path);
        let source_list = sources
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let children = (0..processes)
            .map(|k| {
                let share = connections / processes + usize::from(k < connections % processes);
                let mut cmd = std::process::Command::new(&exe);
                cmd.args([
                    "bench",
                    "--slow",
                    "--json",
                    "--no-progress",
                    "--processes",
                    "1",
                ])
                .arg(&url)
                .args(["-c", &share.to_string()])
                .args(["-d", &format!("{}ms", duration.as_millis())])
                .args(["-t", &args.threads.max(1).to_string()])
                .args(["--throttle", &rate.to_string()])
                .args(["--timeout", &format!("{}ms", args.timeout.as_millis())])
                .args([
                    "--connect-concurrency",
                    &args.connect_concurrency.to_string(),
                ])
                .args(["--recv-buffer", &args.recv_buffer.to_string()]);
                if !source_list.is_empty() {
                    cmd.args(["--sources", &source_list]);
                }
                if !args.cpus.is_empty() {
                    let cpus: Vec<String> = args.cpus.iter().map(ToString::to_string).collect();
                    cmd.args(["--cpus", &cpus.join(",")]);
                }
                cmd
            })
            .collect();
        let progress = Progress::start(
            !args.no_progress && !args.json,
            duration,
            "(per-process counts at the end)",
            established.clone(),
        );
        let r = ramjet_bench::run_processes(children).map_err(anyhow::Error::msg)?;
        drop(progress);
        r
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

/// `ramjet bench ftp://HOST:PORT/[FILE]`: sessions of login, RETR FILE (if given) and QUIT
/// by -c tasks at once, for -d or -n sessions; or --hold.
fn ftp(args: &BenchArgs) -> anyhow::Result<()> {
    let [url] = args.urls.as_slice() else {
        bail!("FTP load takes one ftp:// URL");
    };
    let (addr, path) = ramjet_bench::parse_ftp_url(url).map_err(anyhow::Error::msg)?;
    let spec = ramjet_bench::FtpSpec {
        addr,
        path,
        connections: args.connections.max(1),
        sessions: args.requests,
        duration: args
            .duration
            .unwrap_or(Duration::from_secs(if args.requests.is_some() {
                3600
            } else {
                10
            })),
        timeout: args.timeout,
        discard: args.discard_body,
        hold: args.hold,
        connect_at_once: args.connect_concurrency,
    };
    let report = ramjet_bench::run_ftp(spec, args.cpus.first().copied());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.hold {
        println!(
            "held {} sessions ({} errors){}",
            report.held,
            report.errors,
            report
                .first_error
                .as_deref()
                .map_or(String::new(), |e| format!("; first error: {e}"))
        );
    } else {
        println!(
            "{} sessions in {:.2} s: {:.1}/s, {:.2} Gbit/s; session p50 {:.2} ms, p99 {:.2} ms; {} errors{}",
            report.sessions,
            report.seconds,
            report.sessions_per_second,
            report.gbit_per_second,
            report.p50_ms,
            report.p99_ms,
            report.errors,
            report
                .first_error
                .as_deref()
                .map_or(String::new(), |e| format!(" (first: {e})"))
        );
    }
    if report.errors > 0 && report.sessions == 0 {
        bail!("every session failed");
    }
    Ok(())
}
