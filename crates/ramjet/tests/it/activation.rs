//! systemd socket activation (`LISTEN_PID`/`LISTEN_FDS`): ramjet serves on the sockets it
//! is given, by systemd's own launcher and by a launcher written here that passes sockets
//! of its choosing.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn site() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello from a passed socket").unwrap();
    dir
}

/// The body of GET /hello.txt at `addr`, once the server answers there (10 s at most).
fn hello(addr: SocketAddr, prefix: &[u8]) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = TcpStream::connect(addr) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut req = prefix.to_vec();
            req.extend_from_slice(
                b"GET /hello.txt HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            );
            if s.write_all(&req).is_ok() {
                let mut out = String::new();
                if s.read_to_string(&mut out).is_ok() && !out.is_empty() {
                    return out;
                }
            }
        }
        assert!(Instant::now() < end, "nothing answered on {addr}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Start ramjet through a Python launcher that listens on `sockets` addresses (port 0:
/// any), passes them as descriptors 3, 4, ... with LISTEN_FDS, and names `pid_offset` +
/// its own pid in LISTEN_PID; returns the process and the bound addresses.
fn launch(sockets: &[&str], pid_offset: i64, args: &[&str]) -> (Running, Vec<SocketAddr>) {
    let script = r#"
import os, socket, sys
n = int(sys.argv[1]); offset = int(sys.argv[2]); addrs = sys.argv[3:3 + n]; cmd = sys.argv[3 + n:]
socks = []
for a in addrs:
    host, port = a.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, int(port)))
    s.listen(128)
    socks.append(s)
print(" ".join("%s:%d" % s.getsockname() for s in socks), flush=True)
# Out of the way first (a socket may already be descriptor 3 or 4), then into place;
# dup2 onto the same number would not clear close-on-exec, so set it explicitly.
high = [os.dup2(s.fileno(), 100 + i) for i, s in enumerate(socks)]
for i, fd in enumerate(high):
    os.dup2(fd, 3 + i)
    os.set_inheritable(3 + i, True)
os.environ["LISTEN_FDS"] = str(n)
os.environ["LISTEN_PID"] = str(os.getpid() + offset)
os.execv(cmd[0], cmd)
"#;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(sockets.len().to_string())
        .arg(pid_offset.to_string())
        .args(sockets)
        .arg(crate::BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0] as char);
    }
    let addrs = line
        .split_whitespace()
        .map(|a| a.parse().unwrap())
        .collect();
    (Running(child), addrs)
}

#[test]
fn systemd_socket_activate_hands_its_listener_to_ramjet() {
    let dir = site();
    // A free port for systemd's launcher to listen on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _launcher = Running(
        Command::new("systemd-socket-activate")
            .args(["-l", &addr.to_string(), crate::BIN, "serve"])
            .arg(dir.path())
            .args(["--workers", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("systemd-socket-activate (Debian's systemd package)"),
    );
    let body = hello(addr, b"");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.ends_with("hello from a passed socket"), "{body}");
    // Both workers accept on the one passed socket: many connections all get answers.
    for _ in 0..20 {
        assert!(hello(addr, b"").ends_with("hello from a passed socket"));
    }
}

#[test]
fn passed_sockets_keep_their_listen_entrys_options_and_unpassed_entries_are_not_bound() {
    let dir = site();
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let proxied = probe.local_addr().unwrap();
    drop(probe);
    // `listen` names the first passed socket (with PROXY protocol) and an address that is
    // not passed; the second passed socket is in no entry and gets the defaults.
    let unpassed = TcpListener::bind("127.0.0.1:0").unwrap();
    let unpassed_addr = unpassed.local_addr().unwrap();
    drop(unpassed);
    let config = dir.path().join("ramjet.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [{{ address = \"{proxied}\", proxy_protocol = true }}, \"{unpassed_addr}\"]\n[log]\naccess = \"off\"\n[[location]]\nroot = \"{}\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    // Passed in the other order than `listen` names them: options follow the address,
    // not the position.
    let (_server, addrs) = launch(
        &["127.0.0.1:0", &proxied.to_string()],
        0,
        &["serve", "--config", config.to_str().unwrap()],
    );
    assert_eq!(addrs.len(), 2);
    assert_eq!(addrs[1], proxied);
    let header = b"PROXY TCP4 192.0.2.7 127.0.0.1 4242 80\r\n";
    let body = hello(addrs[1], header);
    assert!(body.ends_with("hello from a passed socket"), "{body}");
    let body = hello(addrs[0], b"");
    assert!(body.ends_with("hello from a passed socket"), "{body}");
    // Without its header, the PROXY listener refuses the connection.
    let mut s = TcpStream::connect(addrs[1]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(!out.contains("hello from a passed socket"), "{out}");
    // The entry that was not passed is not bound by ramjet.
    assert!(TcpStream::connect(unpassed_addr).is_err());
}

#[test]
fn sockets_meant_for_another_process_are_left_alone() {
    let dir = site();
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let own = probe.local_addr().unwrap();
    drop(probe);
    // LISTEN_PID names another process: ramjet binds its own --listen address instead.
    let (_server, passed) = launch(
        &["127.0.0.1:0"],
        1,
        &[
            "serve",
            dir.path().to_str().unwrap(),
            "--listen",
            &own.to_string(),
        ],
    );
    let body = hello(own, b"");
    assert!(body.ends_with("hello from a passed socket"), "{body}");
    // The passed socket was not served (it accepts into a queue nobody reads).
    let mut s = TcpStream::connect(passed[0]).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: t\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 16];
    assert!(
        s.read(&mut buf).is_err(),
        "the other process's socket answered"
    );
}

#[test]
fn a_passed_descriptor_that_is_not_a_listening_socket_is_a_clear_error() {
    let dir = site();
    // Descriptor 3 is a UDP socket: refused, naming the descriptor.
    let script = r#"
import os, socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 0))
os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[1], sys.argv[1:])
"#;
    let out = Command::new("python3")
        .args(["-c", script, crate::BIN, "serve"])
        .arg(dir.path())
        .output()
        .expect("python3");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("descriptor 3 passed by LISTEN_FDS") && err.contains("not a TCP socket"),
        "{err}"
    );
    // With --processes the passed sockets cannot be shared: refused, saying why.
    let (mut server, _) = launch(
        &["127.0.0.1:0"],
        0,
        &["serve", dir.path().to_str().unwrap(), "--processes", "2"],
    );
    let status = server.0.wait().unwrap();
    assert!(!status.success());
    let mut err = String::new();
    server
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("--processes 2"), "{err}");
}
