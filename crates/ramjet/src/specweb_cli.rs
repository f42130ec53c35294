//! `ramjet specweb`: the SPECweb99 workload's tools: the file set and the client.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
use ramjet_bench::specweb::{self, SpecwebSpec};
use ramjet_specweb::fileset::{self, Progress, BYTES_PER_DIR};

#[derive(clap::Args)]
pub struct SpecwebArgs {
    #[command(subcommand)]
    command: SpecwebCommand,
}

#[derive(Subcommand)]
enum SpecwebCommand {
    /// Write the SPECweb99 file set for N connections under DIR/file_set (wafgen99):
    /// int(25 + N*40/61) directories of 36 files, 4.88 MiB each.
    Fileset {
        /// The largest number of simultaneous connections the set must serve.
        #[arg(long, short = 'c')]
        connections: u64,
        /// Directory that receives `file_set/` (usually the document root).
        dir: PathBuf,
        /// Check an existing set instead of writing one.
        #[arg(long)]
        verify: bool,
        /// Threads writing (or reading) directories in parallel (default: one per CPU).
        #[arg(long)]
        threads: Option<usize>,
        /// No progress bar even on a terminal.
        #[arg(long)]
        no_progress: bool,
    },
    /// Run the SPECweb99 workload against a server: load generators with rated receive,
    /// every reply checked, Reset and Fetch around each iteration; prints conforming
    /// connections, ops/s, the per-class table and the verdict with its reasons.
    Run(Box<RunArgs>),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The server, e.g. http://127.0.0.1:8080 (the file set at URL_ROOT/file_set/).
    url: String,
    /// Simultaneous connections (load generators).
    #[arg(long, short = 'c', default_value_t = 20)]
    connections: usize,
    /// URL path of the dynamic module (DYNAMIC_ROOT).
    #[arg(long, default_value = "/specweb99")]
    dynamic: String,
    /// URL path of the CGI (DYN_CGI_SCRIPT); without it the CGI share goes to the module.
    #[arg(long)]
    cgi: Option<String>,
    /// URL path above file_set/ (URL_ROOT).
    #[arg(long, default_value = "")]
    url_root: String,
    /// The load the file set was made for, when smaller than --connections: the load then
    /// draws only from the directories that set has (a test run, not a comparable result).
    /// By default the set must be the one for --connections (checked before the run).
    #[arg(long)]
    fileset_connections: Option<u64>,
    /// Warm-up before each measurement (not counted).
    #[arg(long, default_value = "5s", value_parser = ramjet_bench::parse_duration)]
    warmup: Duration,
    /// Measurement interval.
    #[arg(long = "run", default_value = "20s", value_parser = ramjet_bench::parse_duration)]
    run_time: Duration,
    /// Ramp-down after it (load goes on, not counted).
    #[arg(long, default_value = "2s", value_parser = ramjet_bench::parse_duration)]
    rampdown: Duration,
    /// Iterations; the median is reported.
    #[arg(long, default_value_t = 3)]
    iterations: usize,
    /// The official timings: warm-up 1200 s (300 s before iterations 2 and 3), 1200 s
    /// measured, 300 s ramp-down, 3 iterations (about 1 h 45 min).
    #[arg(long)]
    compliant: bool,
    /// Client threads.
    #[arg(long, short = 't', default_value_t = 1)]
    threads: usize,
    /// A reply that takes longer than this is an error.
    #[arg(long, default_value = "10s", value_parser = ramjet_bench::parse_duration)]
    timeout: Duration,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
    /// Search LO:HI[:STEP] for the most connections that still give a valid run (one
    /// iteration per probe, bisecting to STEP, default 50), then run the iterations there.
    #[arg(long, value_name = "LO:HI[:STEP]")]
    find_max: Option<String>,
    /// Client processes, each with --threads threads; the connections are dealt to them in
    /// turn, and this process runs Reset and Fetch and judges the whole, as the kit's manager.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// Source addresses for the connections, in turn: a list (127.0.0.2,127.0.0.3) or a
    /// range (127.0.0.2-127.0.0.20).
    #[arg(long)]
    sources: Option<String>,
    /// Run only client process K of N's load generators and print their counts as JSON
    /// (what --processes starts).
    #[arg(long, hide = true, value_name = "K/N", requires_all = ["start_at", "expired"])]
    part: Option<String>,
    /// With --part: when the warm-up starts, in milliseconds since the Unix epoch.
    #[arg(long, hide = true)]
    start_at: Option<u64>,
    /// With --part: the starts of the two expired ad ranges.
    #[arg(long, hide = true, value_name = "E1,E2")]
    expired: Option<String>,
}

pub fn specweb(args: SpecwebArgs) -> anyhow::Result<()> {
    match args.command {
        SpecwebCommand::Fileset {
            connections,
            dir,
            verify,
            threads,
            no_progress,
        } => fileset_cmd(connections, &dir, verify, threads, no_progress),
        SpecwebCommand::Run(args) => run_cmd(&args),
    }
}

/// Bisect `LO:HI[:STEP]` for the most connections with a valid iteration.
fn find_max(a: &RunArgs, spec: &SpecwebSpec, range: &str) -> anyhow::Result<usize> {
    let parts: Vec<usize> = range
        .split(':')
        .map(|p| p.parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|_| anyhow::anyhow!("--find-max {range}: expected LO:HI[:STEP]"))?;
    let (mut lo, mut hi, step) = match parts[..] {
        [lo, hi] => (lo, hi, 50),
        [lo, hi, step] => (lo, hi, step.max(1)),
        _ => bail!("--find-max {range}: expected LO:HI[:STEP]"),
    };
    if lo == 0 || hi <= lo {
        bail!("--find-max {range}: needs 0 < LO < HI");
    }
    let probe = |n: usize| -> anyhow::Result<bool> {
        let mut s = spec.clone();
        s.connections = n;
        let it = iteration(a, &s).map_err(|e| anyhow::anyhow!("{n} connections: {e}"))?;
        // On stderr, so --json output stays one document.
        eprintln!(
            "probe {n} connections: {} conforming, {:.1} ops/s, {}",
            it.conforming,
            it.ops_per_sec,
            if it.valid {
                "valid".to_string()
            } else {
                format!("invalid: {}", it.reasons.join("; "))
            }
        );
        Ok(it.valid)
    };
    if !probe(lo)? {
        bail!("--find-max: {lo} connections already give an invalid run");
    }
    if probe(hi)? {
        return Ok(hi);
    }
    while hi - lo > step {
        let mid = lo + (hi - lo) / 2;
        if probe(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

fn run_cmd(a: &RunArgs) -> anyhow::Result<()> {
    // Thousands of connections need the descriptors for them.
    let _ = ramjet_runtime::sys::raise_nofile_limit(1 << 20);
    let target = ramjet_bench::Target::parse(a.url.trim_end_matches('/'))
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.url))?;
    if a.connections == 0 || a.iterations == 0 {
        bail!("--connections and --iterations must be at least 1");
    }
    let mut spec = SpecwebSpec {
        addr: target.addr,
        host: target.host.clone(),
        url_root: a.url_root.trim_end_matches('/').to_string(),
        dynamic: a.dynamic.clone(),
        cgi: a.cgi.clone(),
        connections: a.connections,
        fileset_connections: a.fileset_connections,
        warmup: a.warmup,
        run: a.run_time,
        rampdown: a.rampdown,
        threads: a.threads,
        timeout: a.timeout,
        sources: match &a.sources {
            Some(s) => ramjet_bench::parse_sources(s).map_err(anyhow::Error::msg)?,
            None => Vec::new(),
        },
    };
    if let Some(part) = &a.part {
        return run_part(a, &spec, part);
    }
    if a.processes == 0 {
        bail!("--processes must be at least 1");
    }
    // The file set must hold every directory the load will ask for (for --find-max, the
    // load at the top of the range): a mismatch is named now, not found as 404s later.
    let mut top = spec.clone();
    if let Some(hi) = a
        .find_max
        .as_deref()
        .and_then(|r| r.split(':').nth(1))
        .and_then(|h| h.parse::<usize>().ok())
    {
        top.connections = hi;
    }
    specweb::check_file_set(&top).map_err(anyhow::Error::msg)?;
    if spec
        .fileset_connections
        .is_some_and(|f| f < spec.connections as u64)
    {
        eprintln!(
            "note: the load draws from the file set of {} connections, not {}: not a comparable SPECweb99 result",
            spec.fileset_connections.unwrap_or(0),
            spec.connections
        );
    }
    if let Some(range) = &a.find_max {
        spec.connections = find_max(a, &spec, range)?;
    }
    let iterations = if a.compliant { 3 } else { a.iterations };
    let mut results = Vec::new();
    for i in 0..iterations {
        if a.compliant {
            spec.warmup = Duration::from_secs(if i == 0 { 1200 } else { 300 });
            spec.run = Duration::from_secs(1200);
            spec.rampdown = Duration::from_secs(300);
        }
        if !a.json {
            eprintln!(
                "iteration {}: {} connections, warm-up {:?}, run {:?}, ramp-down {:?}",
                i + 1,
                spec.connections,
                spec.warmup,
                spec.run,
                spec.rampdown
            );
        }
        let it = iteration(a, &spec).map_err(|e| anyhow::anyhow!("iteration {}: {e}", i + 1))?;
        if !a.json {
            print!("{}", it.text());
        }
        results.push(it);
    }
    let median = specweb::median(&results).expect("at least one iteration");
    let valid = results.iter().all(|r| r.valid);
    if a.json {
        let out = serde_json::json!({
            "conforming": median.conforming,
            "valid": valid,
            "median": median,
            "iterations": results,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "\nSPECweb99-like result: {} conforming connections (median of {}), {:.1} ops/s: {}",
            median.conforming,
            results.len(),
            median.ops_per_sec,
            if valid {
                "VALID"
            } else {
                "INVALID (see the reasons above)"
            }
        );
    }
    if !valid {
        // A script (or CI) must not take an invalid run for a result.
        let first = results
            .iter()
            .flat_map(|r| r.reasons.first())
            .next()
            .cloned()
            .unwrap_or_default();
        bail!("the run is INVALID: {first}");
    }
    Ok(())
}

/// One iteration, its load in this process or in `--processes` client processes.
fn iteration(a: &RunArgs, spec: &SpecwebSpec) -> Result<specweb::Iteration, String> {
    if a.processes <= 1 {
        return specweb::run_iteration(spec, None);
    }
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let make = |plan: &specweb::Plan| -> Vec<std::process::Command> {
        (0..a.processes)
            .map(|k| {
                let mut c = std::process::Command::new(&exe);
                let ms = |d: Duration| format!("{}ms", d.as_millis());
                c.args(["specweb", "run", &a.url, "--dynamic", &a.dynamic])
                    .args(["-c", &spec.connections.to_string()])
                    .args(
                        spec.fileset_connections
                            .iter()
                            .flat_map(|f| ["--fileset-connections".to_string(), f.to_string()]),
                    )
                    .args(["--warmup", &ms(spec.warmup), "--run", &ms(spec.run)])
                    .args([
                        "--rampdown",
                        &ms(spec.rampdown),
                        "--timeout",
                        &ms(spec.timeout),
                    ])
                    .args(["-t", &spec.threads.to_string()])
                    .args(["--part", &format!("{k}/{}", a.processes)])
                    .args(["--start-at", &plan.start_unix_ms.to_string()])
                    .args([
                        "--expired",
                        &format!("{},{}", plan.expired.0, plan.expired.1),
                    ]);
                if !a.url_root.is_empty() {
                    c.args(["--url-root", &a.url_root]);
                }
                if let Some(cgi) = &a.cgi {
                    c.args(["--cgi", cgi]);
                }
                if let Some(s) = &a.sources {
                    c.args(["--sources", s]);
                }
                c
            })
            .collect()
    };
    specweb::run_iteration(spec, Some(&make))
}

/// `--part K/N`: one client process's load generators, their counts printed as JSON.
fn run_part(a: &RunArgs, spec: &SpecwebSpec, part: &str) -> anyhow::Result<()> {
    let bad = || anyhow::anyhow!("--part {part}: expected K/N with K < N");
    let (k, n) = part.split_once('/').ok_or_else(bad)?;
    let (k, n): (usize, usize) = (k.parse()?, n.parse()?);
    if k >= n {
        return Err(bad());
    }
    let expired = a.expired.as_deref().unwrap_or("");
    let (e1, e2) = expired
        .split_once(',')
        .and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?)))
        .ok_or_else(|| anyhow::anyhow!("--expired {expired}: expected E1,E2"))?;
    let plan = specweb::Plan {
        start_unix_ms: a.start_at.unwrap_or(0),
        expired: (e1, e2),
    };
    let stats = specweb::run_part(spec, k, n, &plan);
    println!("{}", serde_json::to_string(&stats)?);
    Ok(())
}

fn fileset_cmd(
    connections: u64,
    dir: &std::path::Path,
    verify: bool,
    threads: Option<usize>,
    no_progress: bool,
) -> anyhow::Result<()> {
    let dirs = fileset::dirs_for_connections(connections);
    let total = dirs * BYTES_PER_DIR;
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    if !verify {
        std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    } else if !dir.join("file_set").is_dir() {
        bail!("{}: no file_set directory to verify", dir.display());
    }
    let progress = Arc::new(Progress::default());
    let bar = (!no_progress && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.set_message(if verify { "verifying" } else { "writing" });
        bar
    });
    let start = Instant::now();
    let done = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        if let Some(bar) = &bar {
            let (progress, done) = (&progress, &done);
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    bar.set_position(progress.bytes.load(Ordering::Relaxed));
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
        let r = if verify {
            fileset::verify(dir, dirs, threads, &progress)
        } else {
            fileset::generate(dir, dirs, threads, &progress)
        };
        done.store(true, Ordering::Relaxed);
        r
    });
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = progress.bytes.load(Ordering::Relaxed);
    result.with_context(|| {
        format!(
            "{} {}",
            if verify { "verifying" } else { "writing" },
            dir.join("file_set").display()
        )
    })?;
    println!(
        "{} {} directories, {} files, {:.2} GiB in {:.1} s ({:.0} MiB/s): {}",
        if verify { "verified" } else { "wrote" },
        dirs,
        progress.files.load(Ordering::Relaxed),
        bytes as f64 / (1u64 << 30) as f64,
        secs,
        bytes as f64 / (1u64 << 20) as f64 / secs.max(1e-9),
        dir.join("file_set").display()
    );
    Ok(())
}
