"""The kernel's TCP congestion control, which decides the long-body rows on loopback.

With `bbr` and no `fq` qdisc, TCP paces every socket itself with a timer per early burst,
and how a server sizes its writes then sets its throughput more than anything else it does
(bench/results/2026-11-27-congestion/). The benchmark scripts print which one a run used,
and `--congestion NAME` sets it for one run (root; restored after).
"""
import contextlib
from pathlib import Path

SYSCTL = Path("/proc/sys/net/ipv4/tcp_congestion_control")


def current():
    try:
        return SYSCTL.read_text().strip()
    except OSError:
        return "unknown"


@contextlib.contextmanager
def use(name):
    """Run the block with `name` as the congestion control of new connections (no change
    for an empty name)."""
    if not name:
        yield
        return
    before = current()
    SYSCTL.write_text(name)
    try:
        yield
    finally:
        SYSCTL.write_text(before)
