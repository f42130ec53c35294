use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::client::Client;

/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A running `ramjet serve` process with its own document root and config file.
pub struct Server {
    child: Option<Child>,
    pub addr: SocketAddr,
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
        let mut text = config.replace("{dir}", &dir.path().display().to_string());
        if !text.contains("listen") {
            text = format!("listen = [\"127.0.0.1:0\"]\n{text}");
        }
        if !text.contains("[[location]]") && !text.contains("[[vhost]]") {
            text.push_str("\n[[location]]\nroot = \"root\"\n");
        }
        let config_path = dir.path().join("ramjet.toml");
        std::fs::write(&config_path, text).expect("write config");
        let mut child = Command::new(bin)
            .args(["serve", "--config"])
            .arg(&config_path)
            .env("RUST_LOG", "info")
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
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split(' ').next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
                lines.lock().unwrap().push(line);
            }
        });
        let addr = match rx.recv_timeout(START_TIMEOUT) {
            Ok(a) => a.parse().expect("listening address"),
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start: {:?}", stderr.lock().unwrap());
            }
        };
        Server {
            child: Some(child),
            addr,
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
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
