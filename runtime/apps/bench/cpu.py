"""CPU time of a benchmark run: the paper's energy proxy (DSBD reports energy; on a CPU we count seconds).

Every arm runs in this process or in processes it started (the engine's zygote and the children it
forks), so the CPU seconds a run spent are the growth, over the run, of this process tree's user +
system time. A process that exits during the run still counts: its time moves into its parent's
``children_*`` times when the parent reaps it, and the parent is in the tree.
"""

from __future__ import annotations

import psutil


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process and every descendant, reaped children included."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:  # exited between the listing and the read: its parent counts it
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total
