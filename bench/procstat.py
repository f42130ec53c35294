"""CPU of server process trees from /proc, waiting for a port, stopping a server: shared
by the bench scripts that count a server's CPU with everything it starts (CGI programs,
databases)."""
import os
import socket
import subprocess
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CGROUP = Path("/sys/fs/cgroup")


def proc_cpu(pid):
    """A process's CPU and its reaped children's (utime, stime, cutime, cstime), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICK


def tree(pids):
    """The given processes and all their live descendants."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    out, todo = set(), list(pids)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(c for c, pp in parent.items() if pp == p)
    return out


def tree_cpu(pids):
    """CPU seconds of the processes, their live descendants and what they reaped."""
    total = 0.0
    for p in tree(pids):
        try:
            total += proc_cpu(p)
        except OSError:
            pass
    return total


def self_signed_cert(work):
    """An ECDSA P-256 certificate for localhost and 127.0.0.1 under `work` (made once):
    (certificate path, key path)."""
    cert, key = work / "cert.pem", work / "key.pem"
    if not cert.exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                        "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "30", "-subj", "/CN=localhost",
                        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       check=True, capture_output=True, text=True)
    return cert, key


def sum_kb(pids, file, field):
    """The sum of a `Field:  N kB` line of /proc/PID/`file` over `pids` (gone ones skipped)."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/{file}").read_text().splitlines():
                if line.startswith(field + ":"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_rss_kb(pid):
    """Resident KB of a process and its live descendants."""
    return sum_kb(tree([pid]), "status", "VmRSS")


def tool_versions(commands):
    """The first line each of `commands` (e.g. ["nginx", "-v"]) prints, for reports."""
    out = []
    for cmd in commands:
        try:
            p = subprocess.run(cmd, capture_output=True, text=True)
            out.append((p.stdout + p.stderr).splitlines()[0].strip())
        except (OSError, IndexError):
            pass
    return out


def wait_port(port, proc=None, within=20):
    """Until something accepts on 127.0.0.1:port; fails if `proc` (if given) exits first."""
    end = time.time() + within
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"the server on {port} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def cpu_busy(cpu):
    """Seconds CPU `cpu` has been busy (everything but idle and iowait) since boot: what
    all processes pinned to it used, whoever reaps them."""
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] == f"cpu{cpu}":
            v = [int(x) for x in f[1:]]
            return (sum(v[:8]) - v[3] - v[4]) / TICK
    raise SystemExit(f"no cpu{cpu} in /proc/stat")


def stop(*procs):
    """TERM each, then wait; KILL one that has not ended within 20 s."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def write_report(out, lines):
    """The report's lines as `out`/report.md (the directory made if needed), and on stdout."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


APACHE_MODULES = "/usr/lib/apache2/modules"


def nginx_conf_head(conf):
    """The main context every benchmark gives nginx: one process in the foreground, its pid
    and error log under `conf`, room for many connections. The `http` block follows."""
    return f"""worker_processes 1;
daemon off;
master_process off;
worker_rlimit_nofile 20000;
error_log {conf}/nginx-error.log;
pid {conf}/nginx.pid;
events {{ worker_connections 19000; multi_accept on; }}
"""


def apache_conf_head(d, port, user):
    """What every bench Apache's configuration starts with: its root, pid file and error
    log in `d`, listening on 127.0.0.1:`port`, `user` (User/Group lines, or ""), and the
    modules besides its MPM and CGI module (authz_core, mime, alias, env) with mime.types."""
    m = APACHE_MODULES
    return (f'ServerRoot "{d}"\nListen 127.0.0.1:{port}\nServerName localhost\n{user}'
            f'PidFile {d}/httpd.pid\nErrorLog {d}/error.log\nLogLevel warn\n'
            f"LoadModule authz_core_module {m}/mod_authz_core.so\n"
            f"LoadModule mime_module {m}/mod_mime.so\nLoadModule alias_module {m}/mod_alias.so\n"
            f"LoadModule env_module {m}/mod_env.so\nTypesConfig /etc/mime.types\n")


def start_apache(conf, port, **popen):
    """Apache in the foreground with `conf`, on CPU 0, in its own session (prefork's
    shutdown signals its whole process group), once it accepts on `port`."""
    proc = subprocess.Popen(["taskset", "-c", "0", "/usr/sbin/apache2", "-f", str(conf),
                             "-DFOREGROUND"], start_new_session=True, **popen)
    wait_port(port, proc)
    return proc


class Group:
    """A v1 cgroup in the cpuacct and memory hierarchies."""

    def __init__(self, name):
        self.dirs = [CGROUP / c / f"ramjet-bench-{name}" for c in ("cpuacct", "memory")]
        for d in self.dirs:
            if d.exists():
                d.rmdir()
            d.mkdir()

    def join_command(self, cmd):
        """`cmd` run by a shell that first enters the group (so all it forks is counted)."""
        enter = "; ".join(f"echo $$ > {d}/cgroup.procs" for d in self.dirs)
        return ["sh", "-c", f"{enter}; exec taskset -c 0 \"$@\"", "sh", *cmd]

    def cpu(self):
        return int((self.dirs[0] / "cpuacct.usage").read_text()) / 1e9

    def user_sys(self):
        """User and system CPU seconds."""
        return (int((self.dirs[0] / "cpuacct.usage_user").read_text()) / 1e9,
                int((self.dirs[0] / "cpuacct.usage_sys").read_text()) / 1e9)

    def memory(self):
        """Bytes charged less page cache."""
        usage = int((self.dirs[1] / "memory.usage_in_bytes").read_text())
        stat = dict(line.split() for line in (self.dirs[1] / "memory.stat").read_text().splitlines())
        return usage - int(stat["cache"])

    def pids(self):
        return [int(p) for p in (self.dirs[1] / "cgroup.procs").read_text().split()]

    def remove(self):
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)
