use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;

/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Kernel CPU-time unit in /proc/PID/stat (USER_HZ is 100 on every Linux architecture
/// ramjet targets).
const TICKS_PER_SECOND: u64 = 100;
/// First look at an idle server's CPU: at most this many ticks and it is idle.
const IDLE_GLANCE: Duration = Duration::from_millis(250);
const IDLE_GLANCE_TICKS: u64 = 2;
/// Otherwise a longer look: this share of one CPU (in percent) over it is a busy loop. A
/// spinning worker on a loaded 2-core CI machine still gets far more than this; an idle
/// server (a log flush and a cache tick a second) far less.
const BUSY_WINDOW: Duration = Duration::from_secs(1);
const BUSY_PERCENT: u64 = 20;

/// A running `ramjet serve` process with its own document root and config file.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
    /// The first TLS listener's address, if the configuration has one.
    pub tls_addr: Option<SocketAddr>,
    /// The first FTP listener's address, if the configuration has one.
    pub ftp_addr: Option<SocketAddr>,
    /// Temporary directory: `root/` is the document root; the config file lives beside it.
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// A fresh temporary directory with an empty `root/` (fill it before [`Server::start`]).
    pub fn dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("root")).expect("root dir");
        dir
    }

    /// Start `bin` with `config` (TOML; `listen` and `root` default to a free loopback port
    /// and `root/`). The config may use `{dir}` for the temporary directory.
    pub fn start(bin: &str, dir: tempfile::TempDir, config: &str) -> Server {
        Server::start_with_env(bin, dir, config, &[])
    }

    /// As [`Server::start`], with environment variables set for the server.
    pub fn start_with_env(
        bin: &str,
        dir: tempfile::TempDir,
        config: &str,
        env: &[(&str, &str)],
    ) -> Server {
        Server::start_under(&[], bin, dir, config, env)
    }

    /// As [`Server::start_with_env`], the server started by `wrapper` (a program and its
    /// arguments, given the server's command line after them; e.g. a shell that sets a
    /// `ulimit` and `exec`s it).
    pub fn start_under(
        wrapper: &[&str],
        bin: &str,
        dir: tempfile::TempDir,
        config: &str,
        env: &[(&str, &str)],
    ) -> Server {
        let mut text = config.replace("{dir}", &dir.path().display().to_string());
        if !text.contains("listen") {
            text = format!("listen = [\"127.0.0.1:0\"]\n{text}");
        }
        if !text.contains("[[location]]") && !text.contains("[[vhost]]") {
            text.push_str("\n[[location]]\nroot = \"root\"\n");
        }
        let config_path = dir.path().join("ramjet.toml");
        std::fs::write(&config_path, text).expect("write config");
        let mut command = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = command
            .args(["serve", "--config"])
            .arg(&config_path)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn ramjet");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = stderr.clone();
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            // Every "listening on" line, then the first "open URL" line, which follows them.
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split(' ').next().unwrap_or("").to_string();
                    let _ = tx.send(Some(url));
                } else if line.contains(" open http") || line.contains(" open ftp") {
                    let _ = tx.send(None);
                }
                lines.lock().unwrap().push(line);
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let (mut addr, mut tls_addr, mut ftp_addr) = (None, None, None);
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(Some(url)) => {
                    let (scheme, a) = url.split_once("://").expect("listening URL");
                    let a: SocketAddr = a.parse().expect("listening address");
                    if scheme == "https" {
                        tls_addr.get_or_insert(a);
                    } else if scheme == "ftp" {
                        ftp_addr.get_or_insert(a);
                    } else {
                        addr.get_or_insert(a);
                    }
                }
                Ok(None) if addr.is_some() || tls_addr.is_some() || ftp_addr.is_some() => break,
                Ok(None) => {}
                Err(_) => {
                    let _ = child.kill();
                    panic!("server did not start: {:?}", stderr.lock().unwrap());
                }
            }
        }
        Server {
            child: Some(child),
            addr: addr.or(tls_addr).or(ftp_addr).expect("a listener"),
            tls_addr,
            ftp_addr,
            dir,
            config_path,
            stderr,
        }
    }

    /// The document root.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr)
    }

    /// One request on a new connection, `Connection: close`, returning the response.
    pub fn get(&self, path: &str) -> crate::Response {
        let mut c = self.client();
        c.send(
            format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        c.response(false)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Whether the server process has exited (it is reaped if so).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// Send a signal (e.g. `libc::SIGHUP`).
    pub fn signal(&self, sig: i32) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Rewrite the config file (same substitutions as `start`) — for reload tests.
    pub fn rewrite_config(&self, config: &str) {
        let mut text = config.replace("{dir}", &self.dir.path().display().to_string());
        if !text.contains("listen") {
            text = format!("listen = [\"127.0.0.1:0\"]\n{text}");
        }
        if !text.contains("[[location]]") && !text.contains("[[vhost]]") {
            text.push_str("\n[[location]]\nroot = \"root\"\n");
        }
        std::fs::write(&self.config_path, text).expect("write config");
    }

    /// Diagnostics printed so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait until a diagnostics line contains `needle`.
    pub fn wait_for_log(&self, needle: &str, within: Duration) -> bool {
        let end = Instant::now() + within;
        while Instant::now() < end {
            if self.stderr().iter().any(|l| l.contains(needle)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Panic if the server logged an ERROR or WARN line not matching one of `allowed`.
    pub fn assert_clean_log(&self, allowed: &[&str]) {
        let bad: Vec<String> = self
            .stderr()
            .into_iter()
            .filter(|l| l.contains("ERROR") || l.contains("WARN"))
            .filter(|l| !allowed.iter().any(|a| l.contains(a)))
            .collect();
        assert!(
            bad.is_empty(),
            "unexpected errors in the server log: {bad:#?}"
        );
    }

    /// Descriptors the server process has open now (`/proc/PID/fd`).
    pub fn open_fds(&self) -> usize {
        let pid = self.child.as_ref().expect("running").id();
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// A line of `/proc/PID/status` in kB (e.g. "VmHWM", the peak resident memory).
    pub fn status_kb(&self, field: &str) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status.lines().find_map(|l| {
            let rest = l.strip_prefix(field)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
    }

    /// CPU time (user + system, in ticks) the server process has used so far.
    pub fn cpu_ticks(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    }

    /// The watchdog: `Some(percent of a CPU)` when the server burns CPU although no client
    /// is talking to it (a busy loop), `None` when it is idle or gone.
    pub fn busy_while_idle(&self) -> Option<u64> {
        let t0 = self.cpu_ticks()?;
        std::thread::sleep(IDLE_GLANCE);
        let t1 = self.cpu_ticks()?;
        if t1 - t0 <= IDLE_GLANCE_TICKS {
            return None;
        }
        std::thread::sleep(BUSY_WINDOW);
        let t2 = self.cpu_ticks()?;
        let percent = (t2 - t1) * 100 / (TICKS_PER_SECOND * BUSY_WINDOW.as_millis() as u64 / 1000);
        (percent >= BUSY_PERCENT).then_some(percent)
    }

    /// Panic if the server burns CPU while no client talks to it (see [`Server::busy_while_idle`]).
    pub fn assert_idle(&self) {
        if let Some(percent) = self.busy_while_idle() {
            panic!(
                "watchdog: the server used {percent}% of a CPU with no client talking to it (a busy loop?); log: {:#?}",
                self.stderr()
            );
        }
    }

    /// Stop with TERM and wait for the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(30))
    }

    /// Wait for the process to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let end = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > end {
                let _ = child.kill();
                panic!("server did not exit in {within:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    /// Every test ends with the watchdog: whichever test leaves the server spinning fails.
    fn drop(&mut self) {
        let busy = if std::thread::panicking() {
            None
        } else {
            self.busy_while_idle()
        };
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(percent) = busy {
            panic!(
                "watchdog: the server used {percent}% of a CPU after the test, with no client talking to it (a busy loop?); log: {:#?}",
                self.stderr()
            );
        }
    }
}
