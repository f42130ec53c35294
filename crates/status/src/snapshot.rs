//! Every worker's counters, read once and added up.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use ramjet_observe::stats::{self, Waiting};

/// Most downloads the status page lists (the slowest first).
pub const DOWNLOADS_LISTED: usize = 20;

/// FTP's counters, added over the workers.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Ftp {
    /// Control connections open now.
    pub sessions: u64,
    pub logins: u64,
    /// Files sent whole, listings sent, data bytes sent.
    pub files: u64,
    pub listings: u64,
    pub bytes: u64,
    /// Data connections refused: from another address than the control connection's.
    pub refused: u64,
}

/// Hand-off totals (see [`Snapshot::handoff`]).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Handoffs {
    pub connections: u64,
    pub messages: u64,
    pub refused: u64,
}

/// One location's requests by status class.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LocationCounts {
    pub host: String,
    pub location: String,
    /// 1xx, 2xx, 3xx, 4xx, 5xx.
    pub classes: [u64; 5],
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct WorkerCounts {
    pub worker: usize,
    pub requests: u64,
    pub connections: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct UpstreamServerCounts {
    pub upstream: String,
    pub server: String,
    pub requests: u64,
    pub failures: u64,
    pub in_flight: u64,
    /// Sum of the times to a response head, in seconds.
    pub header_seconds: f64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct DownloadNow {
    pub client: SocketAddr,
    pub request: String,
    pub sent: u64,
    pub total: u64,
    pub seconds: f64,
    /// Bytes per second over the last five seconds (since it started, when younger).
    pub rate: f64,
}

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Recent {
    pub requests_per_second: f64,
    pub bytes_per_second: f64,
    pub seconds: f64,
}

/// Connections by what they wait for.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Connections {
    pub open: u64,
    pub reading: u64,
    pub idle: u64,
    pub writing: u64,
    /// Idle ones waiting without a task (counted in `idle` too).
    pub parked: u64,
    /// Open and none of the above: being answered (a file loading, a backend).
    pub working: u64,
    pub accepted: u64,
}

/// The counters at one moment.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Snapshot {
    pub version: &'static str,
    pub uptime: f64,
    /// Seconds since the Unix epoch.
    pub started: u64,
    /// A graceful stop has begun: the `health` handler answers 503 (`timeouts.drain`).
    pub draining: bool,
    pub requests: u64,
    pub body_bytes: u64,
    /// Requests and body bytes per second over the last seconds (up to 10), and over how
    /// many; `None` in the first second.
    pub recent: Option<Recent>,
    pub connections: Connections,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub blocking_now: u64,
    pub blocking_total: u64,
    /// Connections handed to backend processes, in how many messages, and how many were
    /// answered 503 instead.
    pub handoff: Handoffs,
    /// TLS handshakes begun, completed, and completed by resuming a session.
    pub tls_handshakes: (u64, u64, u64),
    /// HTTP/2 connections, streams, and connections closed as floods.
    pub http2: (u64, u64, u64),
    pub ftp: Ftp,
    pub locations: Vec<LocationCounts>,
    pub workers: Vec<WorkerCounts>,
    pub upstreams: Vec<UpstreamServerCounts>,
    /// Every `[cache.NAME]`'s counters and sizes.
    pub caches: Vec<CacheCounts>,
    /// The slowest downloads in progress (by rate), at most `DOWNLOADS_LISTED`.
    pub downloads: Vec<DownloadNow>,
    pub downloads_in_progress: usize,
    /// The last minutes, one point a second (at most ten minutes), oldest first.
    pub history: Vec<Point>,
}

/// One cache's counters (since start) and its tiers' sizes now.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CacheCounts {
    pub name: String,
    /// Requests answered from storage, sent to the origin and stored, served stale,
    /// revalidated by a 304, passed on without storing, and made to wait for another's
    /// fetch.
    pub hits: u64,
    pub misses: u64,
    pub stale: u64,
    pub revalidated: u64,
    pub bypass: u64,
    pub collapsed: u64,
    pub stored: u64,
    pub evicted: u64,
    pub purged: u64,
    /// Body bytes of the hits, and of the answers fetched to be stored.
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    pub objects: u64,
}

impl CacheCounts {
    fn of(store: &ramjet_cache::Store) -> CacheCounts {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &store.counts;
        let (memory_bytes, disk_bytes, objects) = store.used();
        CacheCounts {
            name: store.zone().name,
            hits: c.hits.load(Relaxed),
            misses: c.misses.load(Relaxed),
            stale: c.stale.load(Relaxed),
            revalidated: c.revalidated.load(Relaxed),
            bypass: c.bypass.load(Relaxed),
            collapsed: c.collapsed.load(Relaxed),
            stored: c.stored.load(Relaxed),
            evicted: c.evicted.load(Relaxed),
            purged: c.purged.load(Relaxed),
            hit_bytes: c.hit_bytes.load(Relaxed),
            miss_bytes: c.miss_bytes.load(Relaxed),
            memory_bytes,
            disk_bytes,
            objects: objects as u64,
        }
    }
}

/// One second of the recent past: its rates and the connections open at its end.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Point {
    /// Seconds before the snapshot.
    pub ago: f64,
    pub requests_per_second: f64,
    pub bytes_per_second: f64,
    pub connections: u64,
}

/// Per-second rates between consecutive samples.
fn points(samples: &[stats::Sample]) -> Vec<Point> {
    let now = std::time::Instant::now();
    samples
        .windows(2)
        .map(|w| {
            let secs = w[1].at.duration_since(w[0].at).as_secs_f64().max(1e-3);
            Point {
                ago: now.duration_since(w[1].at).as_secs_f64(),
                requests_per_second: w[1].requests.saturating_sub(w[0].requests) as f64 / secs,
                bytes_per_second: w[1].bytes.saturating_sub(w[0].bytes) as f64 / secs,
                connections: w[1].connections,
            }
        })
        .collect()
}

impl Snapshot {
    pub fn take() -> Snapshot {
        let reg = stats::registry();
        let workers = reg.workers();
        let names = reg.locations();
        let mut locations: Vec<LocationCounts> = names
            .iter()
            .map(|(host, location)| LocationCounts {
                host: host.clone(),
                location: location.clone(),
                classes: [0; 5],
            })
            .collect();
        let upstream_names = reg.upstreams();
        let mut upstreams: Vec<UpstreamServerCounts> = upstream_names
            .iter()
            .map(|(u, s)| UpstreamServerCounts {
                upstream: u.clone(),
                server: s.clone(),
                requests: 0,
                failures: 0,
                in_flight: 0,
                header_seconds: 0.0,
            })
            .collect();
        let mut c = Connections::default();
        let (mut cache_hits, mut cache_misses, mut blocking_now, mut blocking_total) = (0, 0, 0, 0);
        let mut body_bytes = 0;
        let mut handoff = Handoffs::default();
        let mut tls_handshakes = (0, 0, 0);
        let mut http2 = (0, 0, 0);
        let mut ftp = Ftp::default();
        let mut per_worker = Vec::new();
        let mut downloads = Vec::new();
        for w in &workers {
            for (slot, l) in locations.iter_mut().enumerate() {
                for (sum, n) in l.classes.iter_mut().zip(w.requests_of(slot)) {
                    *sum += n;
                }
            }
            for (slot, u) in upstreams.iter_mut().enumerate() {
                if let Some(x) = w.upstream(slot as u16) {
                    u.requests += x.requests.get();
                    u.failures += x.failures.get();
                    u.in_flight += x.in_flight.get();
                    u.header_seconds += x.header_micros.get() as f64 / 1e6;
                }
            }
            c.open += w.open.get();
            c.reading += w.waiting(Waiting::Reading).get();
            c.idle += w.waiting(Waiting::Idle).get();
            c.writing += w.waiting(Waiting::Writing).get();
            c.parked += w.parked.get();
            c.accepted += w.accepted.get();
            cache_hits += w.cache_hits.get();
            cache_misses += w.cache_misses.get();
            blocking_now += w.blocking_now.get();
            blocking_total += w.blocking_total.get();
            // Downloads in progress count as they go, not only when they end.
            body_bytes += w.body_bytes.get() + w.bytes_in_progress();
            handoff.connections += w.handoff_connections.get();
            handoff.messages += w.handoff_messages.get();
            handoff.refused += w.handoff_refused.get();
            tls_handshakes.0 += w.tls_handshakes.get();
            tls_handshakes.1 += w.tls_handshakes_done.get();
            tls_handshakes.2 += w.tls_handshakes_resumed.get();
            http2.0 += w.http2_connections.get();
            http2.1 += w.http2_streams.get();
            http2.2 += w.http2_floods.get();
            ftp.sessions += w.ftp_sessions.get();
            ftp.logins += w.ftp_logins.get();
            ftp.files += w.ftp_files.get();
            ftp.listings += w.ftp_listings.get();
            ftp.bytes += w.ftp_bytes.get();
            ftp.refused += w.ftp_refused.get();
            per_worker.push(WorkerCounts {
                worker: w.worker,
                requests: w.requests_total(),
                connections: w.open.get(),
            });
            w.downloads(|list| {
                for (_, d) in list {
                    let seconds = d.started.elapsed().as_secs_f64();
                    let sent = d.sent.load(std::sync::atomic::Ordering::Relaxed);
                    downloads.push(DownloadNow {
                        client: d.client,
                        request: d.request.clone(),
                        sent,
                        total: d.total,
                        seconds,
                        rate: d.rate(),
                    });
                }
            });
        }
        // The counts read at slightly different moments: a connection moving between
        // states may be counted in two; never report a negative remainder.
        c.working = c.open.saturating_sub(c.reading + c.idle + c.writing);
        let downloads_in_progress = downloads.len();
        downloads.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        downloads.truncate(DOWNLOADS_LISTED);
        let requests = locations.iter().flat_map(|l| l.classes).sum();
        // Locations that answered nothing (or belonged to an older configuration) are left out.
        locations.retain(|l| l.classes.iter().any(|&n| n > 0));
        Snapshot {
            version: env!("CARGO_PKG_VERSION"),
            uptime: reg.started.elapsed().as_secs_f64(),
            started: reg
                .started_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or(Duration::ZERO)
                .as_secs(),
            draining: reg.draining(),
            requests,
            body_bytes,
            recent: reg.recent_rates().map(|(r, b, secs)| Recent {
                requests_per_second: r,
                bytes_per_second: b,
                seconds: secs,
            }),
            connections: c,
            cache_hits,
            cache_misses,
            blocking_now,
            blocking_total,
            handoff,
            tls_handshakes,
            http2,
            ftp,
            locations,
            workers: per_worker,
            upstreams,
            caches: ramjet_cache::store::all()
                .iter()
                .map(|c| CacheCounts::of(c))
                .collect(),
            downloads,
            downloads_in_progress,
            history: points(&reg.history()),
        }
    }
}
