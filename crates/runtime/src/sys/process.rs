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
