//! `ramjet specweb`: the SPECweb99 workload's tools (the file set today).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressStyle};
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
    }
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
