"""SIGTERM ends every long command - compare, bench, a workload - with status 143, one line and no process left
(docs/cli.md: the exit status is the signal's whatever the command)."""

from __future__ import annotations

import signal
import time

import pytest
from cli_runs import stderr_lines
from process_watch import WatchedCommand
from test_lifecycle import LONG_RUN


@pytest.mark.parametrize("args", [
    ["compare", "--policies", "fcfs,rr", "--backend", "sim", *LONG_RUN],
    ["bench", "--backend", "sim", "--arms", "seed-fcfs", "--warmup", "0", "--max-new-tokens", "1000000"],
    ["run", "--arrivals", "poisson:2", "--jobs", "4", "--backend", "sim", *LONG_RUN],
], ids=["compare", "bench", "workload"])
def test_sigterm_ends_compare_bench_and_a_workload_with_143_and_leaves_no_process(args):
    # README: 143 for SIGTERM whatever the command; the first run of either never ends by itself
    with WatchedCommand(*args) as w:
        w.wait_for_children(1)
        if args[0] == "bench":  # its first child comes a second or more before its first run on a busy CPU
            w.wait_for_line("repeat 1/5")
        time.sleep(1.0)
        w.poll_children()
        w.signal(signal.SIGTERM)
        code, _, stderr = w.finish(timeout=60)
    assert code == 143, stderr
    lines = stderr_lines(stderr)
    assert len(lines) == 1 and lines[0].startswith("specsched: error: ") and "interrupted" in lines[0], stderr
    if args[0] == "bench":  # the first run never ends: nothing measured, yet the tables are printed
        assert lines[0].endswith("at repeat 1/5 · ar; the tables above hold the runs measured before"), stderr
    assert w.survivors() == []
