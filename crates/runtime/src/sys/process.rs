use std::io;

/// Raise `RLIMIT_NOFILE` towards `want`: the soft limit up to the hard one, and the hard one
/// too when permitted. Returns the soft limit now in force.
pub fn raise_nofile_limit(want: u64) -> io::Result<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let cur = getrlimit(Resource::Nofile);
    let hard = cur.maximum.unwrap_or(u64::MAX);
    if hard < want
        && setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: Some(want),
            },
        )
        .is_ok()
    {
        return Ok(want);
    }
    let soft = want.min(hard);
    if cur.current.is_some_and(|c| c >= soft) {
        return Ok(cur.current.unwrap_or(soft));
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(soft),
            maximum: cur.maximum,
        },
    )?;
    Ok(soft)
}

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set)?;
    Ok(())
}

/// Send signal `sig` (`"TERM"`, `"HUP"`, `"USR1"`, `"INT"`) to process `pid`.
pub fn send_signal(pid: u32, sig: &str) -> io::Result<()> {
    use rustix::process::{kill_process, Pid, Signal};
    let sig = match sig {
        "TERM" => Signal::TERM,
        "INT" => Signal::INT,
        "HUP" => Signal::HUP,
        "USR1" => Signal::USR1,
        _ => return Err(io::Error::other(format!("unknown signal {sig}"))),
    };
    let pid = Pid::from_raw(pid as i32).ok_or_else(|| io::Error::other("pid 0"))?;
    kill_process(pid, sig)?;
    Ok(())
}

/// Mark every descriptor from 3 up that this process inherited close-on-exec, so none
/// reaches a program it starts (a CGI) by accident. Call at start, before any thread: the
/// descriptors it means to keep (activated or upgraded listeners) stay open; they are
/// passed on only where a spawn clears the flag for itself (an upgrade).
pub fn cloexec_inherited() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: `fd` was listed open in /proc/self/fd a moment ago and nothing else runs
        // yet (no thread can close it meanwhile); it is only borrowed for the fcntl calls,
        // and one that has gone since (the read_dir's own) just makes them fail.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        if let Ok(flags) = rustix::io::fcntl_getfd(borrowed) {
            let _ = rustix::io::fcntl_setfd(borrowed, flags | rustix::io::FdFlags::CLOEXEC);
        }
    }
}

/// A pidfd for child `pid` (non-blocking), registered with the current tokio runtime: it
/// becomes readable when the child ends. Call inside the runtime.
pub fn child_pidfd(pid: u32) -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use rustix::process::{pidfd_open, Pid, PidfdFlags};
    let raw = Pid::from_raw(pid as i32).ok_or_else(|| io::Error::other("pid 0"))?;
    let fd = pidfd_open(raw, PidfdFlags::NONBLOCK)?;
    // SAFETY: the AsyncFd takes ownership of the pidfd, so the descriptor stays open and
    // the same for as long as it is registered.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into())
}
