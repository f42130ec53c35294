//! The SPECweb99 client (`ramjet specweb run`): load generators as the kit's client runs
//! them, every reply validated, Reset before and Fetch after each iteration, and the
//! manager's verdict: how many connections conformed, and whether the run is valid
//! (specweb99.md §4).

mod check;
mod loadgen;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ramjet_specweb::deck::CLASS_SHARES;
use ramjet_specweb::fileset::{dirs_for_connections, file_name};
use ramjet_specweb::postlog;
use ramjet_specweb::tables::{ADS, SEARCH_INTERVAL};
use ramjet_specweb::Zipf;
use serde::Serialize;
use tokio::net::TcpStream;

pub use check::Op;
pub use loadgen::LgStats;
use loadgen::Shared;

/// A conforming connection's rate (`USER_SPEED_LIMIT`).
pub const SPEED_LIMIT: f64 = 320_000.0;
/// The most errors a class may have (`MAX_ERROR_RATE`, 1% as the manager prints it).
const MAX_ERROR_RATE: f64 = 0.0105;
/// How far a class's share may stray, relative (`MIX_TOLERANCE`).
const MIX_TOLERANCE: f64 = 0.105;
/// The least share of conforming connections of a valid run (`MIN_CONFORM_PCT`).
const MIN_CONFORM_PCT: f64 = 95.0;
/// The speed limits of the cumulative-conformance table (the kit's six are UNCONFIRMED).
pub const LIMITS: [u32; 6] = [400_000, 380_000, 360_000, 340_000, 320_000, 300_000];

/// One run's settings.
#[derive(Debug, Clone)]
pub struct SpecwebSpec {
    pub addr: SocketAddr,
    pub host: String,
    /// `URL_ROOT`: where `file_set/` is in URL space (default "").
    pub url_root: String,
    /// The dynamic module's URL path (`DYNAMIC_ROOT`).
    pub dynamic: String,
    /// The CGI's URL path (`DYN_CGI_SCRIPT`); none: its share goes to the module.
    pub cgi: Option<String>,
    /// Simultaneous connections (load generators).
    pub connections: usize,
    /// The load the file set was made for (its directory count); at least `connections`.
    /// The load the file set was made for, when not the connections run (`--fileset-connections`).
    pub fileset_connections: Option<u64>,
    pub warmup: Duration,
    pub run: Duration,
    pub rampdown: Duration,
    pub threads: usize,
    pub timeout: Duration,
    /// Source addresses, one per connection in turn (none: the kernel picks).
    pub sources: Vec<std::net::IpAddr>,
}

/// Per class, over the measurement interval.
#[derive(Debug, Clone, Serialize)]
pub struct ClassRow {
    pub class: u32,
    pub ops: u64,
    pub errors: u64,
    pub share: f64,
    pub target_share: f64,
    pub mean_bytes: f64,
}

/// Per request type.
#[derive(Debug, Clone, Serialize)]
pub struct OpRow {
    pub op: Op,
    pub ops: u64,
    pub errors: u64,
    pub share: f64,
}

/// One iteration's result.
#[derive(Debug, Clone, Serialize)]
pub struct Iteration {
    pub connections: usize,
    pub conforming: usize,
    pub conform_pct: f64,
    pub ops_per_sec: f64,
    pub ops: u64,
    pub mean_bit_rate: f64,
    pub min_bit_rate: f64,
    pub max_bit_rate: f64,
    pub classes: Vec<ClassRow>,
    pub ops_by_type: Vec<OpRow>,
    /// Connections (valid ones) at or above each of [`LIMITS`].
    pub conformance: Vec<(u32, usize)>,
    pub invalid_connections: usize,
    pub posts_sent: u64,
    pub post_log_records: u64,
    pub valid: bool,
    pub reasons: Vec<String>,
    /// Some of the errors seen, with what they were about.
    pub sample_errors: Vec<String>,
}

/// One GET to the module (Reset, Fetch), its body.
async fn command(spec: &SpecwebSpec, query: &str) -> Result<Vec<u8>, String> {
    let (status, body) = get(spec, &format!("{}?{query}", spec.dynamic)).await?;
    if status != 200 {
        return Err(format!("status {status}"));
    }
    Ok(body)
}

/// One GET of `target` on a connection of its own: the status and the body.
async fn get(spec: &SpecwebSpec, target: &str) -> Result<(u16, Vec<u8>), String> {
    let mut s = tokio::time::timeout(spec.timeout, TcpStream::connect(spec.addr))
        .await
        .map_err(|_| "connect: timeout".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        spec.host
    );
    let mut buf = Vec::new();
    let got = tokio::time::timeout(
        Duration::from_secs(60),
        loadgen::exchange(&mut s, req.as_bytes(), &mut buf),
    )
    .await
    .map_err(|_| "timeout".to_string())??;
    Ok((got.status, buf[got.head_len..got.total].to_vec()))
}

/// The directories the load draws from: those of the file set made for
/// `fileset_connections` (by default the connections run).
pub fn dirs_needed(spec: &SpecwebSpec) -> u64 {
    dirs_for_connections(spec.fileset_connections.unwrap_or(spec.connections as u64))
}

/// The most connections a file set of `dirs` directories was made for.
pub fn connections_for_dirs(dirs: u64) -> u64 {
    // dirs_for_connections is monotonic: the largest c with 25 + 40c/61 <= dirs.
    let mut c = dirs.saturating_sub(25) * 61 / 40;
    while dirs_for_connections(c + 1) <= dirs {
        c += 1;
    }
    while c > 0 && dirs_for_connections(c) > dirs {
        c -= 1;
    }
    c
}

/// Check that the server has the directories the load will ask for, before a run: a
/// file set made for fewer connections answers 404 to part of the load, which would only
/// show as an INVALID run. `Err` names the mismatch and what to do.
pub fn check_file_set(spec: &SpecwebSpec) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let needed = dirs_needed(spec);
    let has = |d: u64| -> Result<bool, String> {
        let path = format!("{}/{}", spec.url_root, file_name(d, 0, 0));
        let (status, _) = rt.block_on(get(spec, &path))?;
        Ok(status == 200)
    };
    if has(needed - 1)? {
        return Ok(());
    }
    // How many there are: bisect for the first missing directory.
    let (mut lo, mut hi) = (0u64, needed - 1);
    if !has(0)? {
        return Err(format!(
            "no file set at {}/file_set/ (GET {}/{} is not 200): make one with `ramjet specweb fileset --connections {} DIR` under the server's root, or give --url-root",
            spec.url_root,
            spec.url_root,
            file_name(0, 0, 0),
            spec.connections
        ));
    }
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if has(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let dirs = lo + 1;
    let made_for = connections_for_dirs(dirs);
    Err(format!(
        "the file set has {dirs} directories, made for at most {made_for} connections; a load of {} connections draws from {needed}: make it again with `ramjet specweb fileset --connections {} DIR`, or pass --fileset-connections {made_for} to draw from the directories there are (not a comparable result)",
        spec.connections, spec.connections
    ))
}

/// The records of a Fetch reply: the count line and the records between `<pre>` and
/// `</pre>`, checked as the manager checks them.
fn post_log_check(body: &[u8], sent: [u64; 4], ok: [u64; 4]) -> (u64, Vec<String>) {
    let text = String::from_utf8_lossy(body);
    let mut reasons = Vec::new();
    let Some(pre) = text
        .split("<pre>\n")
        .nth(1)
        .and_then(|t| t.split("\n</pre>").next())
    else {
        return (0, vec!["Fetch: no <pre> section".into()]);
    };
    let mut lines = pre.lines();
    let count: u64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(u64::MAX);
    let mut records = 0u64;
    let mut by_class = [0u64; 4];
    let mut last = 0u64;
    for line in lines.filter(|l| !l.trim().is_empty()) {
        match postlog::parse_record(line.as_bytes()) {
            Ok(p) => {
                if p.recno <= last {
                    reasons.push(format!("post log: record {} after {last}", p.recno));
                    break;
                }
                last = p.recno;
                records += 1;
                if let Some(n) = by_class.get_mut(p.class as usize) {
                    *n += 1;
                } else {
                    reasons.push(format!("post log: record {} of class {}", p.recno, p.class));
                    break;
                }
            }
            Err(e) => {
                reasons.push(format!("post log: {e}"));
                break;
            }
        }
    }
    if count != records {
        reasons.push(format!(
            "post log: header says {count} records, it holds {records}"
        ));
    }
    // As the manager compares them: per class of the posted file.
    for c in 0..4 {
        if by_class[c] > sent[c] {
            reasons.push(format!(
                "post log: {} class {c} records for {} class {c} POSTs sent",
                by_class[c], sent[c]
            ));
        }
        if (by_class[c] as f64) < ok[c] as f64 * 0.99 {
            reasons.push(format!(
                "post log: {} class {c} records for {} class {c} POSTs answered",
                by_class[c], ok[c]
            ));
        }
    }
    (records, reasons)
}

/// The two expired ranges' starts as the manager picks them, ascending.
fn expired_starts(now: u64) -> (u32, u32) {
    let ts1 = (now % 360) as u32;
    let ts2 = ts1 + 100;
    if ts2 > 359 {
        (ts2 - 360, ts1)
    } else {
        (ts1, ts2)
    }
}

/// Makes the client processes of an iteration for its plan.
pub type SpawnParts<'a> = dyn Fn(&Plan) -> Vec<std::process::Command> + 'a;

/// When and how one iteration's load runs: the same for every client process.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The warm-up starts, in milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
    /// The starts of the two expired ad ranges the Reset made.
    pub expired: (u32, u32),
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Run one iteration: Reset, the load generators through warm-up, measurement and
/// ramp-down, Fetch, and the verdict. With `spawn`, the load runs in the client processes
/// it makes for a plan (each `ramjet specweb run --part K/N ...`, printing its
/// [`LgStats`] as JSON), as the kit's manager drives several clients.
pub fn run_iteration(
    spec: &SpecwebSpec,
    spawn: Option<&SpawnParts<'_>>,
) -> Result<Iteration, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (e1, e2) = expired_starts(unix_ms() / 1000);
    let pttime = (spec.warmup + spec.run + spec.rampdown).as_secs().max(1);
    let n = spec.connections;
    rt.block_on(command(
        spec,
        &format!(
            "command/Reset&maxload={n}&pttime={pttime}&maxthread={n}&exp={e1},{e2}&urlroot={}/file_set/",
            spec.url_root
        ),
    ))
    .map_err(|e| format!("Reset: {e}"))?;
    let lgs = match spawn {
        None => run_part(
            spec,
            0,
            1,
            &Plan {
                start_unix_ms: unix_ms(),
                expired: (e1, e2),
            },
        ),
        Some(make) => {
            // Time for every process to start before the warm-up begins.
            let plan = Plan {
                start_unix_ms: unix_ms() + 1000,
                expired: (e1, e2),
            };
            crate::fleet::run_children::<Vec<LgStats>>(make(&plan))?
                .into_iter()
                .flatten()
                .collect()
        }
    };
    let fetched = rt.block_on(command(spec, "command/Fetch"));
    Ok(evaluate(spec, &lgs, fetched))
}

/// The load generators of client process `part` of `parts` (connections `part`,
/// `part + parts`, ...) from the plan's start until the ramp-down ends.
pub fn run_part(spec: &SpecwebSpec, part: usize, parts: usize, plan: &Plan) -> Vec<LgStats> {
    let mut expired = vec![false; ADS as usize];
    for start in [plan.expired.0, plan.expired.1] {
        for i in 0..SEARCH_INTERVAL {
            expired[((start + i) % ADS) as usize] = true;
        }
    }
    let n = spec.connections;
    let dirs = dirs_needed(spec);
    std::thread::sleep(Duration::from_millis(
        plan.start_unix_ms.saturating_sub(unix_ms()),
    ));
    let start = Instant::now();
    let warm_end = start + spec.warmup;
    let run_end = warm_end + spec.run;
    let shared = Arc::new(Shared {
        addr: spec.addr,
        host: spec.host.clone(),
        url_root: spec.url_root.clone(),
        dynamic: spec.dynamic.clone(),
        cgi: spec.cgi.clone(),
        users: n as u32,
        dirs: Zipf::new(dirs as usize, 1.0),
        files: Zipf::new(9, 1.0),
        expired,
        timeout: spec.timeout,
        sources: spec.sources.clone(),
        warm_end,
        run_end,
        stop: run_end + spec.rampdown,
    });
    let mine: Arc<Vec<usize>> = Arc::new((part..n).step_by(parts.max(1)).collect());
    let threads = spec.threads.max(1).min(mine.len().max(1));
    let per_thread = crate::threads::on_threads(threads, &[], move |t| {
        let shared = shared.clone();
        let mine = mine.clone();
        async move {
            // One deck per client thread, each seeded as its own client.
            let deck = std::rc::Rc::new(std::cell::RefCell::new(loadgen::Deck::new(
                part * threads + t,
            )));
            let tasks: Vec<_> = mine
                .iter()
                .skip(t)
                .step_by(threads)
                .map(|&i| tokio::task::spawn_local(loadgen::run(i, shared.clone(), deck.clone())))
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.unwrap_or_default());
            }
            out
        }
    });
    per_thread.into_iter().flatten().collect()
}

fn evaluate(spec: &SpecwebSpec, lgs: &[LgStats], fetched: Result<Vec<u8>, String>) -> Iteration {
    let mut reasons = Vec::new();
    let mut class_ops = [0u64; 4];
    let mut class_errors = [0u64; 4];
    let mut class_bytes = [0u64; 4];
    let mut op_ops = [0u64; 5];
    let mut op_errors = [0u64; 5];
    let mut invalid = 0;
    let mut conforming = 0;
    let mut rates = Vec::new();
    let mut valid_rates = Vec::new();
    let mut sample_errors = Vec::new();
    for (i, lg) in lgs.iter().enumerate() {
        for c in 0..4 {
            class_ops[c] += lg.class_ops[c];
            class_errors[c] += lg.class_errors[c];
            class_bytes[c] += lg.class_bytes[c];
        }
        for o in 0..5 {
            op_ops[o] += lg.op_ops[o];
            op_errors[o] += lg.op_errors[o];
        }
        // Classes 0-2 per load generator; class 3 is checked over all of them.
        let why = (0..3).find_map(|c| {
            let (ops, errs) = (lg.class_ops[c], lg.class_errors[c]);
            if ops == 0 {
                Some(format!("connection {i}: no class {c} operation"))
            } else if errs as f64 / ops as f64 > MAX_ERROR_RATE {
                Some(format!("connection {i}: class {c} errors {errs} of {ops}"))
            } else {
                None
            }
        });
        let rate = lg.bit_rate();
        rates.push(rate);
        match why {
            Some(w) => {
                invalid += 1;
                if invalid <= 3 {
                    reasons.push(w);
                }
            }
            None => {
                valid_rates.push(rate);
                if rate >= SPEED_LIMIT {
                    conforming += 1;
                }
            }
        }
        for e in &lg.errors {
            if sample_errors.len() < 10 {
                sample_errors.push(e.clone());
            }
        }
    }
    if invalid > 3 {
        reasons.push(format!("{} more invalid connections", invalid - 3));
    }
    let total: u64 = class_ops.iter().sum();
    if class_ops[3] == 0 {
        reasons.push("class 3: no operation".into());
    } else if class_errors[3] as f64 / class_ops[3] as f64 > MAX_ERROR_RATE {
        reasons.push(format!(
            "class 3: errors {} of {}",
            class_errors[3], class_ops[3]
        ));
    }
    let classes: Vec<ClassRow> = (0..4)
        .map(|c| {
            let share = if total == 0 {
                0.0
            } else {
                class_ops[c] as f64 / total as f64
            };
            ClassRow {
                class: c as u32,
                ops: class_ops[c],
                errors: class_errors[c],
                share,
                target_share: CLASS_SHARES[c],
                mean_bytes: if class_ops[c] == 0 {
                    0.0
                } else {
                    class_bytes[c] as f64 / class_ops[c] as f64
                },
            }
        })
        .collect();
    for r in &classes {
        if (r.share - r.target_share).abs() > r.target_share * MIX_TOLERANCE {
            reasons.push(format!(
                "class {} mix {:.3}, outside {:.3} ± {:.1}%",
                r.class,
                r.share,
                r.target_share,
                MIX_TOLERANCE * 100.0
            ));
        }
    }
    let posts_sent: u64 = lgs.iter().flat_map(|l| l.posts_sent).sum();
    let per_class = |f: fn(&LgStats) -> [u64; 4]| {
        lgs.iter().fold([0u64; 4], |mut acc, l| {
            for (a, n) in acc.iter_mut().zip(f(l)) {
                *a += n;
            }
            acc
        })
    };
    let post_log_records = match fetched {
        Ok(body) => {
            let (records, why) = post_log_check(
                &body,
                per_class(|l| l.posts_sent),
                per_class(|l| l.posts_ok),
            );
            reasons.extend(why);
            records
        }
        Err(e) => {
            reasons.push(format!("Fetch: {e}"));
            0
        }
    };
    let n = spec.connections.max(1);
    let conform_pct = 100.0 * conforming as f64 / n as f64;
    if conform_pct < MIN_CONFORM_PCT {
        reasons.push(format!(
            "{conforming} of {n} connections conforming ({conform_pct:.1}%, at least {MIN_CONFORM_PCT}% needed)"
        ));
    }
    let conformance = LIMITS
        .iter()
        .map(|&l| {
            (
                l,
                valid_rates.iter().filter(|&&r| r >= f64::from(l)).count(),
            )
        })
        .collect();
    let mean = if rates.is_empty() {
        0.0
    } else {
        rates.iter().sum::<f64>() / rates.len() as f64
    };
    Iteration {
        connections: spec.connections,
        conforming,
        conform_pct,
        ops_per_sec: total as f64 / spec.run.as_secs_f64().max(1e-9),
        ops: total,
        mean_bit_rate: mean,
        min_bit_rate: rates
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .min(mean),
        max_bit_rate: rates.iter().copied().fold(0.0, f64::max),
        classes,
        ops_by_type: Op::ALL
            .iter()
            .enumerate()
            .map(|(i, &op)| OpRow {
                op,
                ops: op_ops[i],
                errors: op_errors[i],
                share: if total == 0 {
                    0.0
                } else {
                    op_ops[i] as f64 / total as f64
                },
            })
            .collect(),
        conformance,
        invalid_connections: invalid,
        posts_sent,
        post_log_records,
        valid: reasons.is_empty(),
        reasons,
        sample_errors,
    }
}

/// The reported iteration: the median by conforming connections, then throughput.
pub fn median(iterations: &[Iteration]) -> Option<&Iteration> {
    let mut sorted: Vec<&Iteration> = iterations.iter().collect();
    sorted.sort_by(|a, b| {
        a.conforming
            .cmp(&b.conforming)
            .then(a.ops_per_sec.total_cmp(&b.ops_per_sec))
    });
    sorted.get(sorted.len() / 2).copied()
}

impl Iteration {
    /// The report as text.
    pub fn text(&self) -> String {
        let mut o = String::new();
        o.push_str(&format!(
            "{} conforming of {} connections ({:.1}%), {:.1} ops/s ({} ops), bit rate per connection mean {:.0} min {:.0} max {:.0} bit/s\n",
            self.conforming, self.connections, self.conform_pct, self.ops_per_sec, self.ops,
            self.mean_bit_rate, self.min_bit_rate, self.max_bit_rate
        ));
        o.push_str("class   ops  errors  share (target)  mean bytes\n");
        for c in &self.classes {
            o.push_str(&format!(
                "{:>5} {:>5} {:>7}  {:.3} ({:.2})   {:>10.0}\n",
                c.class, c.ops, c.errors, c.share, c.target_share, c.mean_bytes
            ));
        }
        o.push_str("request type     ops  errors  share\n");
        for r in &self.ops_by_type {
            o.push_str(&format!(
                "{:<12} {:>7} {:>7}  {:.4}\n",
                r.op.name(),
                r.ops,
                r.errors,
                r.share
            ));
        }
        o.push_str("conforming at:");
        for (l, n) in &self.conformance {
            o.push_str(&format!(" {}k {n}", l / 1000));
        }
        o.push_str(&format!(
            "\nPOSTs sent {}, post log records {}\n",
            self.posts_sent, self.post_log_records
        ));
        if self.valid {
            o.push_str("VALID\n");
        } else {
            o.push_str("INVALID:\n");
            for r in &self.reasons {
                o.push_str(&format!("  {r}\n"));
            }
        }
        for e in &self.sample_errors {
            o.push_str(&format!("  error: {e}\n"));
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_starts_ascend() {
        assert_eq!(expired_starts(360 * 5 + 10), (10, 110));
        assert_eq!(expired_starts(300), (40, 300));
        assert_eq!(expired_starts(259), (259, 359));
        assert_eq!(expired_starts(260), (0, 260));
    }

    #[test]
    fn post_log_checks() {
        let rec = |n| {
            let p = postlog::Post {
                recno: n,
                time: 1,
                pid: 2,
                dir: 3,
                class: 1,
                num: 4,
                client: 5,
                filename: "/file_set/dir00003/class1_4".into(),
                user_id: 10001,
            };
            String::from_utf8(postlog::record(&p).to_vec()).unwrap()
        };
        let body = |count: &str, recs: &[u64]| {
            let mut s = format!("<html>\n<pre>\n{count}\n");
            for &r in recs {
                s.push_str(&rec(r));
            }
            s.push_str("\n</pre>\n</body></html>\n");
            s.into_bytes()
        };
        // The records are of class 1.
        let c1 = |n| [0, n, 0, 0];
        assert_eq!(
            post_log_check(&body("         2", &[1, 2]), c1(2), c1(2)),
            (2, vec![])
        );
        assert!(
            post_log_check(&body("         3", &[1, 2]), c1(2), c1(2)).1[0]
                .contains("header says 3")
        );
        assert!(post_log_check(&body("         2", &[2, 1]), c1(2), c1(2)).1[0].contains("after"));
        assert!(
            post_log_check(&body("         2", &[1, 2]), c1(1), c1(1)).1[0]
                .contains("class 1 POSTs sent")
        );
        assert!(post_log_check(&body("         1", &[1]), c1(5), c1(5)).1[0].contains("answered"));
        // Totals that match but classes that do not: the manager's check fails it.
        let why = post_log_check(&body("         2", &[1, 2]), [2, 0, 0, 0], [2, 0, 0, 0]).1;
        assert!(
            why.iter()
                .any(|w| w.contains("2 class 1 records for 0 class 1 POSTs sent")),
            "{why:?}"
        );
        assert!(
            why.iter()
                .any(|w| w.contains("0 class 0 records for 2 class 0 POSTs answered")),
            "{why:?}"
        );
    }

    #[test]
    fn file_set_sizes_and_loads() {
        for c in [1u64, 5, 10, 61, 100, 1000, 3000] {
            let d = dirs_for_connections(c);
            let back = connections_for_dirs(d);
            assert_eq!(dirs_for_connections(back), d, "{c}");
            assert!(
                back >= c && dirs_for_connections(back + 1) > d,
                "{c} -> {back}"
            );
        }
    }
}
