//! Starting programs (CGI) from a thread with a descriptor table of its own.
//!
//! A process started from a worker gets a copy of the worker's descriptor table (every
//! connection, listener and open file: 3,000 to 100,000 entries) and then closes all of
//! them again at `exec`. Under SPECweb99 at 3,000 connections that closing alone was 3% of
//! the server CPU, and the copy is made while the event loop waits. So programs are
//! started by one thread that has left the process's table (`unshare(CLONE_FILES)`) and
//! closed its copy of everything but its end of a socket pair: a start copies three or
//! four descriptors, however many connections are open. The caller sends the program,
//! its directory, its environment and its stdin/stdout/stderr (`SCM_RIGHTS`) and gets the
//! pid back; the child is the process's, so the caller waits for it as for any child.
//!
//! The thread logs nothing and touches no descriptor it was not sent: in its table, the
//! numbers of the process's log files may name something else.

use std::ffi::OsStr;
use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError};

use rustix::net::{
    recvmsg, sendmsg, socketpair, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage,
    RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketFlags, SocketType,
};

/// The largest request: program, directory and environment (a CGI's is a few KiB; the
/// request head it comes from is capped well below this).
const MAX_REQUEST: usize = 256 * 1024;

/// What to start.
pub struct Program<'a> {
    pub path: &'a Path,
    pub dir: &'a Path,
    /// `NAME=value` entries: the whole environment.
    pub env: &'a [(String, String)],
    /// The child's stdin (`None`: `/dev/null`), stdout and stderr.
    pub stdin: Option<BorrowedFd<'a>>,
    pub stdout: BorrowedFd<'a>,
    pub stderr: BorrowedFd<'a>,
    /// Run as this uid and gid (supplementary groups dropped); `None`: as the server.
    pub user: Option<(u32, u32)>,
}

/// The caller's end of the starting thread's socket.
#[derive(Debug)]
pub struct Spawner {
    sock: Mutex<OwnedFd>,
}

impl Spawner {
    /// Start the thread.
    pub fn start() -> io::Result<Spawner> {
        let (ours, theirs) = socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        // The thread's end stays in the process's table until the thread has its own
        // copy; then it is closed here, so that the thread's end is only in the thread's
        // table and its exit shows at ours as end of file.
        let raw = theirs.as_raw_fd();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("ramjet-spawn".into())
            .spawn(move || serve(raw, tx))?;
        if rx.recv().unwrap_or(false) {
            drop(theirs);
        } else {
            // The table could not be unshared: the thread uses the process's, and owns
            // its end there.
            std::mem::forget(theirs);
        }
        Ok(Spawner {
            sock: Mutex::new(ours),
        })
    }

    /// The process's spawner, started at first use.
    pub fn shared() -> io::Result<&'static Spawner> {
        static SHARED: OnceLock<Spawner> = OnceLock::new();
        if let Some(s) = SHARED.get() {
            return Ok(s);
        }
        let s = Spawner::start()?;
        Ok(SHARED.get_or_init(|| s))
    }

    /// Start `p`; its pid. Blocking (for the blocking pool): one request at a time.
    pub fn blocking_spawn(&self, p: &Program<'_>) -> io::Result<u32> {
        // NUL ends each part of the message: one inside a part (a `%00` decoded into
        // PATH_INFO, say) would split it, and could add a variable of the client's choosing.
        let nul = |b: &[u8]| b.contains(&0);
        if nul(p.path.as_os_str().as_bytes())
            || nul(p.dir.as_os_str().as_bytes())
            || p.env
                .iter()
                .any(|(k, v)| nul(k.as_bytes()) || nul(v.as_bytes()) || k.contains('='))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a NUL byte in the program, its directory or its environment",
            ));
        }
        let mut msg = vec![u8::from(p.stdin.is_some()) | (u8::from(p.user.is_some()) << 1)];
        if let Some((uid, gid)) = p.user {
            msg.extend_from_slice(&uid.to_le_bytes());
            msg.extend_from_slice(&gid.to_le_bytes());
        }
        for part in [p.path.as_os_str().as_bytes(), p.dir.as_os_str().as_bytes()] {
            msg.extend_from_slice(part);
            msg.push(0);
        }
        for (k, v) in p.env {
            msg.extend_from_slice(k.as_bytes());
            msg.push(b'=');
            msg.extend_from_slice(v.as_bytes());
            msg.push(0);
        }
        if msg.len() > MAX_REQUEST {
            return Err(io::Error::other("environment too large"));
        }
        let fds: Vec<BorrowedFd<'_>> = p.stdin.into_iter().chain([p.stdout, p.stderr]).collect();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
            return Err(io::Error::other(
                "descriptors do not fit the control buffer",
            ));
        }
        let sock = self.sock.lock().unwrap_or_else(PoisonError::into_inner);
        retry(|| {
            sendmsg(
                &*sock,
                &[IoSlice::new(&msg)],
                &mut control,
                SendFlags::NOSIGNAL,
            )
        })?;
        let mut reply = [0u8; 512];
        let got = retry(|| {
            recvmsg(
                &*sock,
                &mut [IoSliceMut::new(&mut reply)],
                &mut RecvAncillaryBuffer::default(),
                RecvFlags::CMSG_CLOEXEC,
            )
        })?;
        decode_reply(&reply[..got.bytes])
    }
}

/// A pipe, both ends close-on-exec (a program gets its end through [`Spawner`], as 0, 1
/// or 2): (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

/// `f` again while a signal interrupts it.
fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            other => return other,
        }
    }
}

/// `[0, pid]` or `[1, errno, message]` (integers little-endian, 4 bytes).
fn decode_reply(r: &[u8]) -> io::Result<u32> {
    let word = |at: usize| {
        r.get(at..at + 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    match (r.first(), word(1)) {
        (Some(0), Some(pid)) if pid > 0 => Ok(pid as u32),
        (Some(1), Some(0)) => Err(io::Error::other(
            String::from_utf8_lossy(&r[5..]).into_owned(),
        )),
        (Some(1), Some(errno)) => Err(io::Error::from_raw_os_error(errno)),
        _ => Err(io::Error::other("the spawner has stopped")),
    }
}

/// The thread: leave the process's descriptor table, keep only `sock` (and 0-2), then
/// start what is asked until the other end closes.
fn serve(raw: RawFd, unshared: std::sync::mpsc::Sender<bool>) {
    // SAFETY: from here on this thread uses only descriptors it owns in its own table:
    // `raw` (copied into the new table under the same number), the ones it receives,
    // and what `Command` opens; it never uses a descriptor another thread created (it
    // logs nothing), which is what unsharing the table requires.
    let own =
        unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FILES) }.is_ok();
    if own {
        close_all_but(raw);
    }
    // SAFETY: `raw` is the spawner's end of the socket pair, open: in this thread's own
    // table when unshared (the creating thread closes its copy in the process's table
    // only after this message), else in the process's table, where the creating thread
    // gives up its ownership (forgets it) on this message. Either way this is its only
    // owner now.
    let mut sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let _ = unshared.send(own);
    if own {
        // Its number may be high (the table's size when the spawner started, say after
        // 15,000 connections), and a start copies the table up to the highest open
        // descriptor: move it to the lowest free one.
        if let Ok(low) = rustix::io::fcntl_dupfd_cloexec(&sock, 3) {
            sock = low;
        }
    }
    let mut msg = vec![0u8; MAX_REQUEST];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(3))];
    loop {
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let got = match retry(|| {
            recvmsg(
                &sock,
                &mut [IoSliceMut::new(&mut msg)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
        }) {
            Ok(got) if got.bytes > 0 => got,
            // The caller's end is closed (or broken): nothing more to start.
            _ => return,
        };
        let mut fds: Vec<OwnedFd> = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(r) = m {
                fds.extend(r);
            }
        }
        let reply = match start(&msg[..got.bytes], fds) {
            Ok(pid) => [&[0u8][..], &(pid as i32).to_le_bytes()].concat(),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(0);
                [&[1u8][..], &errno.to_le_bytes(), e.to_string().as_bytes()].concat()
            }
        };
        let mut none = SendAncillaryBuffer::default();
        let reply = &reply[..reply.len().min(512)];
        if retry(|| {
            sendmsg(
                &sock,
                &[IoSlice::new(reply)],
                &mut none,
                SendFlags::NOSIGNAL,
            )
        })
        .is_err()
        {
            return;
        }
    }
}

/// Start the program a request describes, with `fds` as its stdin (when the request says
/// so), stdout and stderr.
fn start(msg: &[u8], fds: Vec<OwnedFd>) -> io::Result<u32> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, "bad spawn request");
    let (&flags, mut rest) = msg.split_first().ok_or_else(bad)?;
    let mut user = None;
    if flags & 2 != 0 {
        let ids = rest.get(..8).ok_or_else(bad)?;
        let word = |i: usize| u32::from_le_bytes([ids[i], ids[i + 1], ids[i + 2], ids[i + 3]]);
        user = Some((word(0), word(4)));
        rest = &rest[8..];
    }
    let mut parts = rest.split(|&b| b == 0);
    let path = parts.next().ok_or_else(bad)?;
    let dir = parts.next().ok_or_else(bad)?;
    let mut fds = fds.into_iter();
    let stdin = match flags & 1 {
        1 => Stdio::from(fds.next().ok_or_else(bad)?),
        _ => Stdio::null(),
    };
    let stdout = fds.next().ok_or_else(bad)?;
    let stderr = fds.next().ok_or_else(bad)?;
    let mut cmd = Command::new(OsStr::from_bytes(path));
    cmd.current_dir(OsStr::from_bytes(dir)).env_clear();
    for kv in parts.filter(|p| !p.is_empty()) {
        let eq = kv.iter().position(|&b| b == b'=').ok_or_else(bad)?;
        cmd.env(
            OsStr::from_bytes(&kv[..eq]),
            OsStr::from_bytes(&kv[eq + 1..]),
        );
    }
    cmd.stdin(stdin)
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    if let Some((uid, gid)) = user {
        // setgid, then setuid; as root, the supplementary groups are dropped first.
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(gid);
    }
    // The child is not waited for here: the caller reaps it by its pid.
    Ok(cmd.spawn()?.id())
}

/// Close every descriptor of this thread's (unshared) table above 2 except `keep`.
fn close_all_but(keep: RawFd) {
    use rustix::fs::{openat, Dir, Mode, OFlags, CWD};
    let Ok(dirfd) = openat(
        CWD,
        "/proc/thread-self/fd",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return;
    };
    let listing = dirfd.as_raw_fd();
    let Ok(mut dir) = Dir::new(dirfd) else {
        return;
    };
    let mut fds: Vec<RawFd> = Vec::new();
    while let Some(Ok(entry)) = dir.read() {
        if let Some(fd) = std::str::from_utf8(entry.file_name().to_bytes())
            .ok()
            .and_then(|n| n.parse::<RawFd>().ok())
        {
            if fd > 2 && fd != keep && fd != listing {
                fds.push(fd);
            }
        }
    }
    drop(dir);
    for fd in fds {
        // SAFETY: the table is this thread's own copy (unshared), so these numbers name
        // nothing any Rust object of this thread owns (it owns only `keep`, left open, and
        // the listing's descriptor, left out and closed with it); the objects of other
        // threads hold their descriptors in the process's table, which this does not touch.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    fn pipe() -> (OwnedFd, OwnedFd) {
        super::pipe().unwrap()
    }

    #[test]
    fn the_program_gets_its_environment_and_stdio_and_the_thread_holds_few_descriptors() {
        // Descriptors the process holds (as a worker holds connections).
        let held: Vec<std::fs::File> = (0..200)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let s = Spawner::start().unwrap();
        let (out_r, out_w) = pipe();
        let (err_r, err_w) = pipe();
        let (in_r, in_w) = pipe();
        let env = vec![("A".to_string(), "b=c d".to_string())];
        let pid = s
            .blocking_spawn(&Program {
                path: Path::new("/bin/sh"),
                dir: Path::new("/"),
                env: &env,
                stdin: Some(in_r.as_fd()),
                stdout: out_w.as_fd(),
                stderr: err_w.as_fd(),
                user: None,
            })
            .unwrap();
        drop((out_w, err_w, in_r));
        drop(in_w);
        assert!(pid > 0);
        // sh with no script on stdin (closed) exits; now one that prints.
        let (out_r2, out_w2) = pipe();
        let (_err_r2, err_w2) = pipe();
        let script = std::env::temp_dir().join(format!("ramjet-spawn-{}.sh", std::process::id()));
        std::fs::write(
            &script,
            "#!/bin/sh\necho \"$A|$PWD|$(ls /proc/self/fd | wc -l)\"\necho oops >&2\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        s.blocking_spawn(&Program {
            path: &script,
            dir: Path::new("/tmp"),
            env: &env,
            stdin: None,
            stdout: out_w2.as_fd(),
            stderr: err_w2.as_fd(),
            user: None,
        })
        .unwrap();
        drop((out_w2, err_w2));
        let mut out = String::new();
        std::fs::File::from(out_r2)
            .read_to_string(&mut out)
            .unwrap();
        let fields: Vec<&str> = out.trim().split('|').collect();
        assert_eq!(fields[..2], ["b=c d", "/tmp"], "{out}");
        // 0, 1, 2 and the one ls reads through: none of the 200 held.
        let n: usize = fields[2].trim().parse().unwrap();
        assert!(n <= 5, "the program saw {n} descriptors");
        // The thread's own table: its socket, 0-2, nothing of the process's.
        let tid = thread_of("ramjet-spawn");
        let own: Vec<i32> = std::fs::read_dir(format!("/proc/self/task/{tid}/fd"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect();
        assert!(own.len() <= 6, "the spawner's table holds {own:?}");
        // And low ones: a start copies the table up to the highest (its socket was made
        // after the 200, so it was moved down).
        assert!(
            own.iter().all(|&fd| fd < 16),
            "the spawner's table holds {own:?}"
        );
        // A program that cannot start: its errno comes back.
        let (_r3, w3) = pipe();
        let e = s
            .blocking_spawn(&Program {
                path: Path::new("/nonexistent/x"),
                dir: Path::new("/"),
                env: &[],
                stdin: None,
                stdout: w3.as_fd(),
                stderr: w3.as_fd(),
                user: None,
            })
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        // A NUL inside a value would split it into another variable: refused.
        let sneaky = vec![("PATH_INFO".to_string(), "/a\0LD_PRELOAD=/x.so".to_string())];
        let e = s
            .blocking_spawn(&Program {
                path: &script,
                dir: Path::new("/"),
                env: &sneaky,
                stdin: None,
                stdout: w3.as_fd(),
                stderr: w3.as_fd(),
                user: None,
            })
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // As another user (cgi_user): the program runs with that uid and gid, and none
        // of the server's supplementary groups. Only root can switch.
        if rustix::process::getuid().is_root() {
            let (out_r4, out_w4) = pipe();
            let id = std::env::temp_dir().join(format!("ramjet-id-{}.sh", std::process::id()));
            std::fs::write(&id, "#!/bin/sh\necho \"$(id -u) $(id -g) $(id -G)\"\n").unwrap();
            std::fs::set_permissions(&id, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            s.blocking_spawn(&Program {
                path: &id,
                dir: Path::new("/"),
                env: &[],
                stdin: None,
                stdout: out_w4.as_fd(),
                stderr: w3.as_fd(),
                user: Some((65534, 65533)),
            })
            .unwrap();
            drop(out_w4);
            let mut out = String::new();
            std::fs::File::from(out_r4)
                .read_to_string(&mut out)
                .unwrap();
            assert_eq!(out.trim(), "65534 65533 65533");
            let _ = std::fs::remove_file(&id);
        }
        drop((held, out_r, err_r));
        let _ = std::fs::remove_file(&script);
    }

    fn thread_of(name: &str) -> String {
        for t in std::fs::read_dir("/proc/self/task").unwrap() {
            let t = t.unwrap();
            if std::fs::read_to_string(t.path().join("comm"))
                .unwrap()
                .trim()
                == name
            {
                return t.file_name().to_string_lossy().into_owned();
            }
        }
        panic!("no thread {name}");
    }
}
