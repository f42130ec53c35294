//! `ramjet`: command line, process setup and wiring. No request logic lives here.
#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ramjet_config::Resolved;
use ramjet_observe::AccessLog;
use ramjet_pipeline::{Generation, HttpWorker};
use ramjet_runtime::signals::{Signal, Signals};
use ramjet_static_files::StaticFiles;

/// Each worker's blocking pool (file opens, cold reads, listings) has at most this many threads.
const BLOCKING_THREADS_PER_WORKER: usize = 16;
/// File descriptors asked for at start; the kernel or the hard limit may give fewer.
const WANTED_FILES: u64 = 1 << 20;

#[derive(Parser)]
#[command(
    name = "ramjet",
    version,
    about = "A user-space web server and accelerator for Linux"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve DIR (default: the current directory) on port 8080, or what --config says.
    Serve(ServeArgs),
    /// Load generator (closed loop, wrk/ab style): `ramjet bench http://127.0.0.1:8080/x`.
    Bench(BenchArgs),
    /// Validate a configuration file and print it resolved.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory to serve when no --config is given.
    dir: Option<PathBuf>,
    /// Configuration file (TOML).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Listen address (repeatable); overrides the configuration.
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// Worker threads; overrides the configuration.
    #[arg(long)]
    workers: Option<usize>,
    /// Directory listings (when no --config is given).
    #[arg(long)]
    autoindex: bool,
    /// Access log target when no --config is given: off, stdout, stderr or a path.
    #[arg(long)]
    access_log: Option<String>,
}

#[derive(clap::Args)]
struct BenchArgs {
    /// URLs to request, round-robin per connection (http:// only).
    #[arg(required = true)]
    urls: Vec<String>,
    /// Concurrent connections.
    #[arg(short, long, default_value_t = 50)]
    connections: usize,
    /// How long to run (e.g. 10s, 500ms); default 10s unless -n is given.
    #[arg(short, long, value_parser = ramjet_bench::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Total requests to send (stops at whichever of -d and -n comes first).
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Threads, each with its own event loop.
    #[arg(short, long, default_value_t = 1)]
    threads: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: usize,
    /// A new connection for every request.
    #[arg(long)]
    no_keepalive: bool,
    /// Speak HTTP/1.0.
    #[arg(long)]
    http10: bool,
    /// Extra request header, e.g. -H "Accept-Encoding: gzip" (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Per-exchange timeout.
    #[arg(long, default_value = "10s", value_parser = ramjet_bench::parse_duration)]
    timeout: std::time::Duration,
    /// Count responses whose body is not this many bytes as errors.
    #[arg(long)]
    expect_length: Option<u64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let targets = args
        .urls
        .iter()
        .map(|u| ramjet_bench::Target::parse(u).map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let headers = args
        .headers
        .iter()
        .map(|h| {
            h.split_once(':')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                .ok_or_else(|| anyhow::anyhow!("header `{h}` is not `Name: value`"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let duration = match (args.duration, args.requests) {
        (None, None) => Some(std::time::Duration::from_secs(10)),
        (d, _) => d,
    };
    let spec = ramjet_bench::Spec {
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
    };
    if !args.json {
        println!(
            "Running {} @ {}\n  {} threads and {} connections",
            duration.map_or_else(
                || format!("{} requests", args.requests.unwrap_or(0)),
                |d| format!("{d:?} test")
            ),
            args.urls.join(" "),
            spec.threads,
            spec.connections
        );
    }
    let report = ramjet_bench::run(&spec);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.json())?);
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench(args),
        Command::CheckConfig { file } => check_config(&file),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ramjet: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let resolved = ramjet_config::load_file(file)?;
    println!("{resolved:#?}");
    println!("{}: ok", file.display());
    Ok(())
}

/// Load the configuration the way this invocation asks for, CLI overrides applied.
fn load(args: &ServeArgs) -> anyhow::Result<Resolved> {
    let mut resolved = match &args.config {
        Some(file) => ramjet_config::load_file(file)?,
        None => {
            let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
            let mut r = ramjet_config::for_directory(&dir, &args.listen, args.autoindex)?;
            if let Some(target) = &args.access_log {
                r.access_log.target = match target.as_str() {
                    "off" => ramjet_observe::LogTarget::Off,
                    "stdout" => ramjet_observe::LogTarget::Stdout,
                    "stderr" => ramjet_observe::LogTarget::Stderr,
                    path => ramjet_observe::LogTarget::File(path.into()),
                };
            }
            r
        }
    };
    if !args.listen.is_empty() {
        resolved.listen = args.listen.clone();
    }
    if let Some(n) = args.workers {
        resolved.workers = n.max(1);
    }
    Ok(resolved)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let resolved = load(&args)?;
    ramjet_observe::init_diagnostics(&resolved.log_level);
    match ramjet_runtime::sys::raise_nofile_limit(WANTED_FILES) {
        Ok(n) if n < WANTED_FILES => tracing::info!(
            "open files limited to {n} per process (hard limit); more concurrent connections need more processes"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot raise the open-files limit: {e}"),
    }
    let signal_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut signals = signal_rt.block_on(async { Signals::install() })?;

    let listeners = ramjet_runtime::bind(&resolved.listen, resolved.workers)?;
    let access_log = AccessLog::open(&resolved.access_log).context("opening the access log")?;
    let workers = resolved.workers;
    let pin = resolved.pin_workers;
    let mut grace = resolved.timeouts.shutdown;
    let addrs = listeners.addrs.clone();
    let mut current = Arc::new(Generation {
        config: resolved,
        access_log,
    });
    let server = ramjet_runtime::start(
        listeners,
        pin,
        BLOCKING_THREADS_PER_WORKER,
        current.clone(),
        |_, generation| HttpWorker::new(generation, StaticFiles::new()),
    )?;
    for addr in &addrs {
        tracing::info!("listening on http://{addr} ({workers} workers)");
    }

    signal_rt.block_on(async {
        loop {
            match signals.next().await {
                Signal::Stop => break,
                Signal::Reload => match reload(&args, &current) {
                    Ok(next) => {
                        grace = next.config.timeouts.shutdown;
                        current = next;
                        server.reload(current.clone());
                        tracing::info!("configuration reloaded from {}", current.config.source);
                    }
                    Err(e) => {
                        tracing::error!("reload refused, keeping the running configuration: {e:#}")
                    }
                },
                Signal::ReopenLogs => match current.access_log.reopen() {
                    Ok(()) => tracing::info!("access log reopened"),
                    Err(e) => tracing::error!("cannot reopen the access log: {e}"),
                },
                Signal::Upgrade => {
                    tracing::warn!("USR2 (binary upgrade) is not implemented yet; ignored")
                }
            }
        }
    });
    tracing::info!("stopping: finishing in-flight responses (up to {grace:?})");
    server.stop(grace);
    tracing::info!("stopped");
    Ok(())
}

/// Build the next generation; listeners and worker count stay as started.
fn reload(args: &ServeArgs, current: &Generation) -> anyhow::Result<Arc<Generation>> {
    let mut next = load(args)?;
    if next.listen != current.config.listen || next.workers != current.config.workers {
        tracing::warn!(
            "listen addresses and worker count change only on restart; keeping the current ones"
        );
        next.listen = current.config.listen.clone();
        next.workers = current.config.workers;
    }
    let access_log = if next.access_log == current.config.access_log {
        current.access_log.clone()
    } else {
        AccessLog::open(&next.access_log).context("opening the access log")?
    };
    Ok(Arc::new(Generation {
        config: next,
        access_log,
    }))
}
