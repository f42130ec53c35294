//! Integration tests: each starts the real `ramjet` binary and speaks raw bytes (and curl)
//! to it, then checks the server logged no unexpected error.

mod acme;
mod activation;
mod autoindex;
mod bench;
mod cache;
mod cache_real;
mod cgi;
mod changes;
mod codec;
mod conditional;
mod config;
mod docs;
mod edges;
mod files;
mod fleet;
mod ftp;
mod handoff;
mod handoff_apache;
mod http2;
mod lifecycle;
mod modules;
mod observe;
mod park;
mod protect;
mod proxy;
mod proxy_real;
mod ranges;
mod request_body;
mod security;
mod shaping;
mod specweb;
mod specweb99_module;
mod stream;
mod tls;
mod upgrade;
#[cfg(feature = "wasm")]
mod wasm;

use ramjet_testkit::Server;

pub const BIN: &str = env!("CARGO_BIN_EXE_ramjet");

/// A server whose root holds the given files (path, contents); `config` adds to the defaults.
pub fn server_with(files: &[(&str, &[u8])], config: &str) -> Server {
    let dir = Server::dir();
    for (path, data) in files {
        let p = dir.path().join("root").join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    Server::start(BIN, dir, config)
}

/// `n` deterministic pseudo-random bytes.
pub fn bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Run curl with `args`; returns (exit ok, stdout).
pub fn curl(args: &[&str]) -> (bool, Vec<u8>) {
    let out = std::process::Command::new("curl")
        .args(["-s", "--max-time", "20"])
        .args(args)
        .output()
        .expect("curl is installed");
    (out.status.success(), out.stdout)
}

/// Poll `f` until it gives a value (10 s at most).
pub fn poll_until<T>(mut f: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "condition not met within 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
