//! FTP load (`ramjet bench ftp://HOST:PORT/PATH`): sessions of connect, anonymous login,
//! for a file path EPSV + RETR (the body read, or dropped in the kernel with
//! `--discard-body`), and QUIT, run by `connections` tasks at once; or (`hold`) that many
//! sessions logged in and kept idle, for memory per idle control connection.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// What to run.
#[derive(Debug, Clone)]
pub struct FtpSpec {
    pub addr: SocketAddr,
    /// A file to RETR in each session; `None`: log in and out only.
    pub path: Option<String>,
    pub connections: usize,
    /// Stop after this many sessions (else at `duration`).
    pub sessions: Option<u64>,
    pub duration: Duration,
    /// Per-step timeout.
    pub timeout: Duration,
    pub discard: bool,
    /// Log `connections` sessions in, report, and hold them idle for `duration`.
    pub hold: bool,
    /// With `hold`: logins in flight at once.
    pub connect_at_once: usize,
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FtpReport {
    pub sessions: u64,
    pub errors: u64,
    /// Bytes of files received.
    pub bytes: u64,
    pub seconds: f64,
    pub sessions_per_second: f64,
    pub gbit_per_second: f64,
    /// Session time percentiles, milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// With `hold`: sessions logged in and held.
    pub held: u64,
    pub first_error: Option<String>,
}

struct Control {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
    line: String,
}

impl Control {
    async fn connect(addr: SocketAddr) -> io::Result<Control> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (r, w) = stream.into_split();
        let mut c = Control {
            reader: BufReader::with_capacity(512, r),
            writer: w,
            line: String::new(),
        };
        c.expect(220).await?;
        Ok(c)
    }

    /// The next reply's code (multi-line replies read to their end) and last line.
    async fn reply(&mut self) -> io::Result<u16> {
        self.line.clear();
        if self.reader.read_line(&mut self.line).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let code: u16 = self
            .line
            .get(..3)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| io::Error::other(format!("not a reply: {:?}", self.line)))?;
        if self.line.as_bytes().get(3) == Some(&b'-') {
            let end = format!("{code} ");
            loop {
                self.line.clear();
                if self.reader.read_line(&mut self.line).await? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                if self.line.starts_with(&end) {
                    break;
                }
            }
        }
        Ok(code)
    }

    async fn expect(&mut self, want: u16) -> io::Result<()> {
        let got = self.reply().await?;
        if got != want {
            return Err(io::Error::other(format!(
                "expected {want}, got {}",
                self.line.trim_end()
            )));
        }
        Ok(())
    }

    async fn cmd(&mut self, line: &str, want: u16) -> io::Result<()> {
        // One write per command: a line in two segments waits on Nagle and delayed ACKs.
        let mut bytes = Vec::with_capacity(line.len() + 2);
        bytes.extend_from_slice(line.as_bytes());
        bytes.extend_from_slice(b"\r\n");
        self.writer.write_all(&bytes).await?;
        self.expect(want).await
    }

    async fn login(addr: SocketAddr) -> io::Result<Control> {
        let mut c = Control::connect(addr).await?;
        c.writer.write_all(b"USER anonymous\r\n").await?;
        // 230 at once (no password asked) is a login too (RFC 959).
        match c.reply().await? {
            230 => {}
            331 => c.cmd("PASS bench@", 230).await?,
            _ => return Err(io::Error::other(format!("USER: {}", c.line.trim_end()))),
        }
        Ok(c)
    }

    /// EPSV then RETR `path`: the bytes received.
    async fn retrieve(&mut self, addr: SocketAddr, path: &str, discard: bool) -> io::Result<u64> {
        self.cmd("EPSV", 229).await?;
        let port: u16 = self
            .line
            .split("|||")
            .nth(1)
            .and_then(|r| r.split('|').next())
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| io::Error::other("no port in the EPSV reply"))?;
        let mut data = TcpStream::connect(SocketAddr::new(addr.ip(), port)).await?;
        self.cmd(&format!("RETR {path}"), 150).await?;
        let mut total = 0u64;
        if discard {
            let mut scratch: Vec<std::mem::MaybeUninit<u8>> = Vec::with_capacity(1 << 20);
            scratch.resize_with(1 << 20, std::mem::MaybeUninit::uninit);
            loop {
                data.readable().await?;
                match data.try_io(tokio::io::Interest::READABLE, || {
                    ramjet_runtime::sys::recv_discard(&data, &mut scratch)
                }) {
                    Ok(0) => break,
                    Ok(n) => total += n as u64,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        } else {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                let n = data.read(&mut buf).await?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
        }
        self.expect(226).await?;
        Ok(total)
    }
}

/// One whole session: the bytes of its file.
async fn session(spec: &FtpSpec) -> io::Result<u64> {
    let mut c = Control::login(spec.addr).await?;
    let bytes = match &spec.path {
        Some(p) => c.retrieve(spec.addr, p, spec.discard).await?,
        None => 0,
    };
    c.cmd("QUIT", 221).await?;
    Ok(bytes)
}

#[derive(Default)]
struct Tally {
    sessions: u64,
    errors: u64,
    bytes: u64,
    first_error: Option<String>,
}

/// Run `spec` on one thread (pinned to `cpu` when given).
pub fn run_ftp(spec: FtpSpec, cpu: Option<usize>) -> FtpReport {
    let cpus: Vec<usize> = cpu.into_iter().collect();
    crate::threads::on_threads(1, &cpus, move |_| {
        let spec = spec.clone();
        async move {
            if spec.hold {
                hold(&spec).await
            } else {
                load(&spec).await
            }
        }
    })
    .pop()
    .expect("one thread")
}

async fn load(spec: &FtpSpec) -> FtpReport {
    let tally = std::rc::Rc::new(std::cell::RefCell::new(Tally::default()));
    let hist = std::rc::Rc::new(std::cell::RefCell::new(
        Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("histogram"),
    ));
    let start = Instant::now();
    let end = start + spec.duration;
    let started = std::rc::Rc::new(std::cell::Cell::new(0u64));
    let mut tasks = Vec::new();
    for _ in 0..spec.connections.max(1) {
        let (spec, tally, hist, started) =
            (spec.clone(), tally.clone(), hist.clone(), started.clone());
        tasks.push(tokio::task::spawn_local(async move {
            loop {
                if Instant::now() >= end || spec.sessions.is_some_and(|n| started.get() >= n) {
                    break;
                }
                started.set(started.get() + 1);
                let t0 = Instant::now();
                let r = tokio::time::timeout(spec.timeout, session(&spec)).await;
                let mut t = tally.borrow_mut();
                match r {
                    Ok(Ok(bytes)) => {
                        t.sessions += 1;
                        t.bytes += bytes;
                        let micros = t0.elapsed().as_micros() as u64;
                        let _ = hist.borrow_mut().record(micros.max(1));
                    }
                    Ok(Err(e)) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| e.to_string());
                    }
                    Err(_) => {
                        t.errors += 1;
                        t.first_error.get_or_insert_with(|| "timeout".into());
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let seconds = start.elapsed().as_secs_f64();
    let t = tally.borrow();
    let h = hist.borrow();
    FtpReport {
        sessions: t.sessions,
        errors: t.errors,
        bytes: t.bytes,
        seconds,
        sessions_per_second: t.sessions as f64 / seconds,
        gbit_per_second: t.bytes as f64 * 8.0 / seconds / 1e9,
        p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
        held: 0,
        first_error: t.first_error.clone(),
    }
}

/// Log `connections` sessions in (at most `connect_at_once` logging in at once), say so on
/// stdout, hold them for `duration`, then QUIT each.
async fn hold(spec: &FtpSpec) -> FtpReport {
    let start = Instant::now();
    let gate = std::rc::Rc::new(tokio::sync::Semaphore::new(spec.connect_at_once.max(1)));
    let mut tasks = Vec::new();
    for _ in 0..spec.connections {
        let (gate, addr, timeout) = (gate.clone(), spec.addr, spec.timeout);
        tasks.push(tokio::task::spawn_local(async move {
            let _turn = gate.acquire().await;
            tokio::time::timeout(timeout, Control::login(addr))
                .await
                .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))
                .and_then(|r| r)
        }));
    }
    let mut held = Vec::new();
    let mut tally = Tally::default();
    for t in tasks {
        match t.await {
            Ok(Ok(c)) => held.push(c),
            Ok(Err(e)) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    println!("holding {} sessions", held.len());
    tokio::time::sleep(spec.duration).await;
    let n = held.len() as u64;
    for mut c in held {
        let _ = c.cmd("QUIT", 221).await;
    }
    let seconds = start.elapsed().as_secs_f64();
    FtpReport {
        sessions: n,
        errors: tally.errors,
        bytes: 0,
        seconds,
        sessions_per_second: 0.0,
        gbit_per_second: 0.0,
        p50_ms: 0.0,
        p99_ms: 0.0,
        held: n,
        first_error: tally.first_error,
    }
}

/// `ftp://HOST:PORT/PATH` as the address and the path (`None` for `/` or none).
pub fn parse_ftp_url(url: &str) -> Result<(SocketAddr, Option<String>), String> {
    let rest = url
        .strip_prefix("ftp://")
        .ok_or_else(|| format!("`{url}` is not an ftp:// URL"))?;
    let (authority, path) = rest
        .find('/')
        .map_or((rest, ""), |i| (&rest[..i], &rest[i..]));
    let addr = authority
        .parse::<SocketAddr>()
        .or_else(|_| format!("{authority}:21").parse::<SocketAddr>())
        .map_err(|_| format!("`{authority}` is not IP:PORT"))?;
    let path = (!path.is_empty() && path != "/").then(|| path.to_string());
    Ok((addr, path))
}

#[cfg(test)]
mod tests {
    use super::parse_ftp_url;

    #[test]
    fn urls() {
        assert_eq!(
            parse_ftp_url("ftp://127.0.0.1:2121/a/b.bin").unwrap(),
            ("127.0.0.1:2121".parse().unwrap(), Some("/a/b.bin".into()))
        );
        assert_eq!(
            parse_ftp_url("ftp://[::1]:2121/").unwrap(),
            ("[::1]:2121".parse().unwrap(), None)
        );
        assert_eq!(
            parse_ftp_url("ftp://127.0.0.1").unwrap(),
            ("127.0.0.1:21".parse().unwrap(), None)
        );
        assert_eq!(
            parse_ftp_url("ftp://[::1]").unwrap(),
            ("[::1]:21".parse().unwrap(), None)
        );
        assert!(parse_ftp_url("http://x/").is_err());
        assert!(parse_ftp_url("ftp://name:21/").is_err());
    }
}
