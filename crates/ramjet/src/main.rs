//! `ramjet`: command line, process setup and wiring. No request logic lives here.
#![forbid(unsafe_code)]

mod bench_cli;
#[cfg(feature = "fault-injection")]
mod fault;
mod handlers;
mod pid_file;
mod specweb_cli;
mod upgrade;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use handlers::Handlers;
use ramjet_config::Resolved;
use ramjet_observe::AccessLog;
use ramjet_pipeline::{BoundListener, Generation, HttpWorker};
use ramjet_runtime::signals::{Signal, Signals};

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
    /// Load generator: closed loop (wrk/ab), open loop (--rate), sweeps (--sweep) and slow
    /// downloads (--slow): `ramjet bench http://127.0.0.1:8080/x`.
    Bench(Box<bench_cli::BenchArgs>),
    /// The SPECweb99 workload: `ramjet specweb fileset --connections N DIR`.
    Specweb(specweb_cli::SpecwebArgs),
    /// Validate a configuration file and print it resolved, as TOML with every default
    /// filled in (exit status 0 when valid, 2 with the errors otherwise).
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Directory to serve (default: the current directory); not with --config.
    #[arg(conflicts_with = "config")]
    dir: Option<PathBuf>,
    /// Configuration file (TOML).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Listen address (repeatable); overrides the configuration.
    #[arg(long)]
    listen: Vec<SocketAddr>,
    /// Worker threads (at least 1); overrides the configuration.
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    workers: Option<usize>,
    /// Directory listings for directories without an index file: on by default when
    /// serving a directory without --config (a development and mirror server).
    #[arg(long, conflicts_with_all = ["config", "no_autoindex"])]
    autoindex: bool,
    /// No directory listings (403 for a directory without an index file).
    #[arg(long, conflicts_with = "config")]
    no_autoindex: bool,
    /// Access log target when no --config is given: off, stdout, stderr or a path.
    #[arg(long, conflicts_with = "config")]
    access_log: Option<String>,
    /// Server processes sharing the listeners (SO_REUSEPORT), each with its own workers
    /// and open-file limit: for more connections than one process may hold. This process
    /// starts them, passes signals on (TERM, INT, HUP, USR1) and ends when they have.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    processes: usize,
    /// Write the pid of the process to signal (HUP, USR1, USR2, TERM) to this file once
    /// listening; removed at exit (for logrotate and init scripts without systemd).
    #[arg(long)]
    pid_file: Option<PathBuf>,
}

/// Modules hosted outside `ramjet_modules`, by the features this program was built with.
const MORE_MODULES: &[ramjet_modules::Registration] = &[
    #[cfg(feature = "wasm")]
    ramjet_wasm::REGISTRATION,
];

/// The configuration's module starter: built-in modules and [`MORE_MODULES`].
fn start_module(
    name: &str,
    config: &toml::Table,
    context: &ramjet_config::MountContext<'_>,
) -> Result<ramjet_config::ModuleInstance, ramjet_config::ModuleError> {
    ramjet_modules::start_among(MORE_MODULES, name, config, context).map_err(|mut e| {
        if name == "wasm" && cfg!(not(feature = "wasm")) {
            e.message += "; WebAssembly modules need a build with `--features wasm`";
        }
        e
    })
}

/// Set in the processes a `--processes N` parent starts: their index.
const PROCESS_ENV: &str = "RAMJET_PROCESS";

fn main() -> ExitCode {
    // Descriptors inherited from whoever started us must not leak into CGI programs.
    ramjet_runtime::sys::cloexec_inherited();
    let cli = Cli::parse();
    ramjet_config::set_module_starter(start_module);
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        Command::Bench(args) => bench_cli::bench(*args),
        Command::Specweb(args) => specweb_cli::specweb(args),
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
    for w in &resolved.warnings {
        eprintln!("{}: warning: {w}", file.display());
    }
    // The resolved configuration on stdout (a valid file that loads back to the same
    // configuration), the verdict on stderr.
    print!("{}", resolved.to_toml());
    eprintln!("{}: ok", file.display());
    Ok(())
}

/// Load the configuration the way this invocation asks for, CLI overrides applied.
fn load(args: &ServeArgs) -> anyhow::Result<Resolved> {
    let mut resolved = match &args.config {
        Some(file) => ramjet_config::load_file(file)?,
        None => {
            let dir = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
            let mut r = ramjet_config::for_directory(&dir, &args.listen, !args.no_autoindex)?;
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
        resolved.proxy_protocol.clear();
    }
    if let Some(n) = args.workers {
        resolved.workers = n;
    }
    for w in &resolved.warnings {
        tracing::warn!("{w}");
    }
    // The caches are opened here, before any worker serves (a disk tier is read back in).
    ramjet_cache::store::open(&resolved.caches);
    Ok(resolved)
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    // Before anything else: these read and clear the environment's LISTEN_* variables
    // and what an upgrading old process passed.
    let activated = ramjet_runtime::sys::take_activated_listeners()
        .context("socket activation (systemd's LISTEN_FDS)")?;
    let mut inherited = ramjet_runtime::sys::upgrade::take_inherited()
        .context("upgrade: what the old process passed")?;
    // The program's path now: after an upgrade installs a new binary there, USR2 starts
    // that one (the running binary's own file may be gone by then).
    let exe = std::env::current_exe().context("finding this program")?;
    let resolved = load(&args)?;
    ramjet_observe::init_diagnostics(&resolved.log_level);
    #[cfg(feature = "wasm")]
    for note in ramjet_wasm::engine::take_notes() {
        tracing::warn!("{note}");
    }
    let child = std::env::var_os(PROCESS_ENV).is_some();
    if !activated.is_empty() && args.processes > 1 {
        anyhow::bail!(
            "socket activation passed {} socket(s), but --processes {} starts processes that bind their own; use one process (raise `workers` instead)",
            activated.len(),
            args.processes
        );
    }
    if args.processes > 1 && inherited.is_some() {
        anyhow::bail!("upgrade: --processes is not supported with USR2 upgrades");
    }
    if args.processes > 1 && !child {
        return supervise(&args, &resolved);
    }
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

    let passed = inherited.as_mut().map(|i| std::mem::take(&mut i.listeners));
    let listeners = if let Some(passed) = passed {
        tracing::info!(
            "upgrade: took over {} listening socket(s) from the old process",
            passed.len()
        );
        ramjet_runtime::adopt(
            passed,
            &resolved.listen,
            resolved.workers,
            resolved.limits.send_buffer,
        )?
    } else if activated.is_empty() {
        ramjet_runtime::bind(
            &resolved.listen,
            resolved.workers,
            resolved.limits.send_buffer,
            child,
        )?
    } else {
        let l = ramjet_runtime::adopt(
            activated,
            &resolved.listen,
            resolved.workers,
            resolved.limits.send_buffer,
        )?;
        for (i, want) in resolved.listen.iter().enumerate() {
            if !l.entries.contains(&Some(i)) {
                tracing::info!(
                    "not listening on {want} from `listen`: socket activation passed the sockets to use"
                );
            }
        }
        l
    };
    for (at, entry) in listeners.entries.iter().enumerate() {
        if entry.is_some_and(|e| resolved.ftp_of(e).is_some()) {
            listeners
                .server_speaks_first(at)
                .context("an FTP listener")?;
        }
    }
    // What a USR2 upgrade passes on: every socket the workers will accept on.
    let passable = upgrade::passable(&listeners).context("listeners for upgrades")?;
    let access_log = AccessLog::open(&resolved.access_log).context("opening the access log")?;
    let workers = resolved.workers;
    let pin = resolved.pin_workers;
    let mut grace = resolved.timeouts.shutdown;
    let addrs = listeners.addrs.clone();
    let schemes: Vec<&str> = listeners
        .entries
        .iter()
        .map(|&e| match e {
            Some(e) if resolved.ftp_of(e).is_some() => "ftp",
            Some(e) if resolved.tls_of(e).is_some() => "https",
            _ => "http",
        })
        .collect();
    let bound: Arc<[BoundListener]> = addrs
        .iter()
        .zip(&listeners.entries)
        .map(|(&addr, &entry)| BoundListener { addr, entry })
        .collect();
    let mut current = Arc::new(Generation {
        config: resolved,
        access_log,
    });
    let server = ramjet_runtime::start(
        listeners,
        pin,
        BLOCKING_THREADS_PER_WORKER,
        current.clone(),
        move |index, generation| HttpWorker::new(index, generation, content(), bound.clone()),
    )?;
    if let Some(inherited) = inherited {
        upgrade::take_over(inherited, server.injector(), addrs.clone());
    }
    let plural = if workers == 1 { "" } else { "s" };
    for (addr, scheme) in addrs.iter().zip(&schemes) {
        tracing::info!("listening on {scheme}://{addr} ({workers} worker{plural})");
    }
    if !ramjet_runtime::sys::openat2_available() {
        tracing::warn!(
            "this kernel has no openat2 (Linux 5.6+): files are opened a path component at a time, and no symlink below a root is followed"
        );
    }
    if schemes.contains(&"https") {
        let kernel = if ramjet_tls::kernel_tls_available() {
            "kernel TLS is available but not used yet"
        } else {
            "kernel TLS is not available (no tls ULP in this kernel)"
        };
        tracing::info!(
            "TLS: rustls with aws-lc-rs in user space; {kernel}: files over TLS are read and encrypted in 64 KiB pieces"
        );
    }
    for url in urls_to_open(&addrs, &schemes) {
        tracing::info!("open {url}");
    }
    // The `--processes` children leave it to their parent, which receives the signals.
    let _pid_file = match &args.pid_file {
        Some(p) if !child => {
            Some(pid_file::PidFile::write(p).with_context(|| format!("{}", p.display()))?)
        }
        _ => None,
    };

    // ACME: one process asks the CA (the first of `--processes`), and every process
    // reloads when a certificate arrives, as on SIGHUP.
    let first = std::env::var(PROCESS_ENV).map_or(true, |i| i == "0");
    if let Some(acme) = current
        .config
        .acme
        .clone()
        .filter(|a| !a.sites.is_empty() && first)
    {
        let target = if child {
            std::os::unix::process::parent_id()
        } else {
            std::process::id()
        };
        ramjet_acme::spawn(acme, move || {
            if let Err(e) = ramjet_runtime::sys::send_signal(target, "HUP") {
                tracing::error!("acme: reload after a new certificate: {e}");
            }
        })
        .context("starting the ACME thread")?;
    }

    let mut attempts = 0;
    let hand_to = signal_rt.block_on(async {
        loop {
            match signals.next().await {
                Signal::Stop => break None,
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
                Signal::Upgrade if child => {
                    tracing::warn!("USR2: upgrades are not supported with --processes; ignored")
                }
                Signal::Upgrade => {
                    attempts += 1;
                    match upgrade::start_new(&exe, &passable, attempts) {
                        Ok(path) => break Some(path),
                        Err(e) => {
                            tracing::error!("upgrade failed; this process goes on serving: {e:#}")
                        }
                    }
                }
            }
        }
    });
    // The copies kept for an upgrade would keep the sockets listening (accepting into a
    // queue nobody serves) after the workers close theirs.
    drop(passable);
    if let Some(path) = hand_to {
        let stuck = server.hand_over(upgrade::HAND_OVER_GRACE, path.clone());
        let _ = std::fs::remove_file(&path);
        if stuck > 0 {
            return Err(anyhow::anyhow!("{stuck} worker(s) did not stop in time"));
        }
        tracing::info!("upgrade: every connection handed over or finished; exiting");
        return Ok(());
    }
    let drain = current.config.timeouts.drain;
    if !drain.is_zero() {
        // A balancer's health check sees 503 and moves traffic off while this process
        // still serves what arrives; a second TERM/INT ends the wait.
        ramjet_observe::stats::registry().begin_draining();
        tracing::info!("draining: the health check answers 503 for {drain:?}, then stopping");
        signal_rt.block_on(async {
            let end = tokio::time::sleep(drain);
            tokio::pin!(end);
            loop {
                tokio::select! {
                    _ = &mut end => break,
                    s = signals.next() => match s {
                        Signal::Stop => break,
                        other => tracing::info!("draining: {other:?} ignored"),
                    },
                }
            }
        });
    }
    tracing::info!("stopping: finishing in-flight responses (up to {grace:?})");
    let stuck = server.stop(grace);
    if stuck > 0 {
        // A worker that never returned to its event loop cannot be joined; returning from
        // main ends the process with it still running.
        tracing::error!(
            "{stuck} worker(s) did not stop within the {grace:?} shutdown timeout; exiting anyway"
        );
        return Err(anyhow::anyhow!("{stuck} worker(s) did not stop in time"));
    }
    tracing::info!("stopped");
    Ok(())
}

/// `--processes N`: check the addresses are free, start N server processes of this binary
/// with the same arguments (they share the listeners through SO_REUSEPORT), pass signals
/// on, and end when they have all ended (an error if one failed).
fn supervise(args: &ServeArgs, resolved: &Resolved) -> anyhow::Result<()> {
    if resolved.listen.iter().any(|a| a.port() == 0) {
        anyhow::bail!("--processes needs fixed ports: with port 0 each process would get its own");
    }
    ramjet_runtime::claim_all(&resolved.listen)?;
    let exe = std::env::current_exe().context("finding this program to start its processes")?;
    let argv: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut children = Vec::new();
    for i in 0..args.processes {
        let child = std::process::Command::new(&exe)
            .args(&argv)
            .env(PROCESS_ENV, i.to_string())
            .spawn()
            .with_context(|| format!("starting server process {i}"))?;
        children.push(child);
    }
    tracing::info!("{} server processes started", children.len());
    let _pid_file = match &args.pid_file {
        Some(p) => Some(pid_file::PidFile::write(p).with_context(|| format!("{}", p.display()))?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut signals = rt.block_on(async { Signals::install() })?;
    let mut failed = 0;
    let mut running: Vec<Option<std::process::Child>> = children.into_iter().map(Some).collect();
    rt.block_on(async {
        let mut poll = tokio::time::interval(std::time::Duration::from_millis(100));
        let mut stopping = false;
        loop {
            for slot in running.iter_mut() {
                if let Some(c) = slot {
                    if let Ok(Some(status)) = c.try_wait() {
                        if !status.success() {
                            failed += 1;
                            if !stopping {
                                tracing::error!("server process {} ended: {status}", c.id());
                            }
                        }
                        *slot = None;
                    }
                }
            }
            if running.iter().all(Option::is_none) {
                return;
            }
            let ids: Vec<u32> = running.iter().flatten().map(|c| c.id()).collect();
            tokio::select! {
                _ = poll.tick() => {}
                s = signals.next() => {
                    let sig = match s {
                        Signal::Stop => { stopping = true; "TERM" }
                        Signal::Reload => "HUP",
                        Signal::ReopenLogs => "USR1",
                        Signal::Upgrade => {
                            tracing::warn!("USR2: upgrades are not supported with --processes; ignored");
                            continue;
                        }
                    };
                    for id in ids {
                        if let Err(e) = ramjet_runtime::sys::send_signal(id, sig) {
                            tracing::debug!("process {id}: {sig}: {e}");
                        }
                    }
                }
            }
        }
    });
    if failed > 0 {
        anyhow::bail!("{failed} server process(es) failed");
    }
    Ok(())
}

/// Each worker's handlers (wrapped for fault injection in test builds).
#[cfg(not(feature = "fault-injection"))]
fn content() -> Handlers {
    Handlers::new()
}

#[cfg(feature = "fault-injection")]
fn content() -> fault::Faults<Handlers> {
    fault::Faults(Handlers::new())
}

/// What to type into a browser: a wildcard address is reached as `localhost`, and each
/// port is named once.
fn urls_to_open(addrs: &[SocketAddr], schemes: &[&str]) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for (a, s) in addrs
        .iter()
        .zip(schemes.iter().chain(std::iter::repeat(&"http")))
    {
        let url = match a {
            a if a.ip().is_unspecified() => format!("{s}://localhost:{}/", a.port()),
            SocketAddr::V6(v6) => format!("{s}://[{}]:{}/", v6.ip(), v6.port()),
            SocketAddr::V4(v4) => format!("{s}://{v4}/"),
        };
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    urls
}

/// Build the next generation; listeners and worker count stay as started.
fn reload(args: &ServeArgs, current: &Generation) -> anyhow::Result<Arc<Generation>> {
    let mut next = load(args)?;
    if next.listen != current.config.listen || next.workers != current.config.workers {
        tracing::warn!(
            "listen addresses and worker count change only on restart; keeping the current ones"
        );
        next.listen = current.config.listen.clone();
        next.proxy_protocol = current.config.proxy_protocol.clone();
        next.tls = current.config.tls.clone();
        next.tls_files = current.config.tls_files.clone();
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
