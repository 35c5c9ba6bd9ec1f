"""What a SIGKILLed run leaves behind (its folder of sockets and logs in the temp directory) is removed by the
next run, and never the folder of a run still going (runtime/core/leftovers.py)."""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

from cli_runs import specsched
from process_watch import Watched
from test_lifecycle import ENDLESS, LONG_RUN


def test_a_killed_runs_socket_folder_is_removed_by_the_next_run_and_a_running_ones_is_kept(monkeypatch):
    """SIGKILL leaves the CLI no chance to remove its folder of sockets and logs in the temp directory: they
    piled up there, one a killed run. The next run removes it, and never the folder of a run still going."""
    temp = Path(tempfile.mkdtemp(dir="/tmp"))  # short: a socket path under it fits, so the runs use it
    monkeypatch.setenv("TMPDIR", str(temp))
    try:
        with Watched(*LONG_RUN) as killed:
            killed.wait_for_children(1 + len(ENDLESS))
            killed.signal(signal.SIGKILL)
            killed.finish()
        assert killed.survivors(grace=15) == []
        [dead] = temp.iterdir()  # the killed run's
        with Watched(*LONG_RUN) as running:
            running.wait_for_children(1 + len(ENDLESS))
            [alive] = set(temp.iterdir()) - {dead}
            assert specsched("run", "--backend", "sim", "--prompt", "a b", "--max-new-tokens", "4", "--no-live",
                             "--quiet").returncode == 0
            assert list(temp.iterdir()) == [alive]
            running.signal(signal.SIGTERM)
            running.finish()
        assert list(temp.iterdir()) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)
