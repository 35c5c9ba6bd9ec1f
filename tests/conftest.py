"""Shared set-up for the test suite.

* ``tests/helpers.py`` is importable as ``helpers`` under any pytest import mode.
* A hang guard for the core suite: those tests start real process trees, and a runtime that hangs
  must fail the run with a traceback rather than stall CI. No speed is asserted; the limit is
  far above what any of these tests needs even on a busy two-core machine.
"""

from __future__ import annotations

import faulthandler
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

HANG_LIMIT_S = 600
GUARDED = ("test_core_", "test_policies", "test_wire", "test_sampling", "test_lifecycle", "test_cli")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    guarded = item.path.name.startswith(GUARDED)
    if guarded:  # covers set-up (module fixtures included), the test and tear-down
        faulthandler.dump_traceback_later(HANG_LIMIT_S, exit=True)
    try:
        yield
    finally:
        if guarded:
            faulthandler.cancel_dump_traceback_later()
