"""Shared set-up for the test suite.

* The helper modules in ``tests/`` (``helpers.py``, ``cli_runs.py``, ``process_watch.py`` and the
  rest) are importable by name (``import helpers``) under any pytest import mode.
* A hang guard on every test: many tests start real process trees (the CLI, the runtime's children,
  a pytest in a subprocess), and a runtime that hangs must fail the run with a traceback of where it
  hung rather than stall CI. It covers every test, not a list of files, so no test escapes it by
  being renamed or written in a new file; it is one timer per test (faulthandler), so it costs
  nothing. If a test (set-up with its module fixtures, call and tear-down) runs past the limit, the
  traceback of every thread goes to the terminal's stderr and the run exits with status 1.

  No speed is asserted: the limit is far above what any test needs even on a busy two-core machine.
  Tests marked ``slow`` load the real models (several minutes there) and the first may fetch and
  convert the target, so they get ``SLOW_FACTOR`` times as long.
  ``SPECSCHED_TEST_HANG_LIMIT_S`` sets another limit (seconds), e.g. to see the guard work.
* The terminal settings of whoever runs the suite do not reach the tests (``plain_terminal``).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from pathlib import Path

import pytest

from specsched.scheduler.cores import usable_cores

# the feature-draft fixtures (`pair`, `pair2`: a tiny target and drafts trained on it), shared by its test files
pytest_plugins = ["tests.feature_drafts"]

sys.path.insert(0, str(Path(__file__).resolve().parent))

HANG_LIMIT_S = float(os.environ.get("SPECSCHED_TEST_HANG_LIMIT_S") or 600)
SLOW_FACTOR = 3

_stderr_fd: int | None = None  # a copy of the real stderr, which pytest's output capture does not replace


def hang_limit_s(item: pytest.Item) -> float:
    return HANG_LIMIT_S * (SLOW_FACTOR if item.get_closest_marker("slow") else 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _stderr_fd
    # Between tests pytest's capture is suspended, so this is the terminal's stderr. The dump must not
    # go to sys.stderr while a test runs: that is a capture file, lost when the guard ends the process.
    if _stderr_fd is None:
        _stderr_fd = os.dup(sys.stderr.fileno())
    # covers set-up (module fixtures included), the test and tear-down
    faulthandler.dump_traceback_later(hang_limit_s(item), exit=True, file=_stderr_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


# Rich reads these in every Console, the tests' own and the CLI's in the runs they start: FORCE_COLOR or
# TTY_COMPATIBLE=1 turn a pipe into a terminal (escape codes in output that tests parse), TERM=dumb or
# TTY_INTERACTIVE=0 a forced terminal into one that cannot redraw, COLUMNS/LINES set the size of a console
# given none. A test that wants one of them sets it itself.
TERMINAL_SETTINGS = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "TERM", "COLORTERM",
                     "COLUMNS", "LINES")


@pytest.fixture(autouse=True, scope="session")
def plain_terminal():
    """Each test sees the same terminal settings whatever the shell or CI running the suite exports (CI
    systems set TERM=dumb or FORCE_COLOR=1): none of TERMINAL_SETTINGS."""
    with pytest.MonkeyPatch.context() as mp:
        for name in TERMINAL_SETTINGS:
            mp.delenv(name, raising=False)
        yield


@pytest.hookimpl(optionalhook=True)  # optional: the wheel's check (.ci/run) runs pytest without xdist
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one test process per CPU this process may run on. xdist counts the host's physical cores,
    so in a container pinned to 2 cores of a 64-core host it would start 32 test processes, each starting
    process trees, on 2 cores. PYTEST_XDIST_AUTO_NUM_WORKERS, where set, is xdist's to read (None: its hook)."""
    return None if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") else usable_cores()


def pytest_configure(config):
    """Under pytest-xdist (`-n auto`, pyproject.toml) each test process gets its share of the CPUs for torch
    work in the process itself (a test that trains, or runs a model in-process) and in the processes it
    starts without the runtime (OMP_NUM_THREADS, unless set): two test processes each running torch on
    every core spin against each other in OpenMP (a fine-tuning test took 27 s beside another, 5 s alone).
    The runtime's own children are unaffected: the engine sets each child's threads itself."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if workers > 1:
        share = max(1, usable_cores() // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        try:
            import torch
        except ImportError:
            return
        torch.set_num_threads(share)


def pytest_unconfigure(config):
    global _stderr_fd
    if _stderr_fd is not None:
        os.close(_stderr_fd)
        _stderr_fd = None
