"""The hang guard in conftest.py covers every test, whatever its file is called.

A pytest in a subprocess, with the guard's limit lowered to one second, runs a test file whose name
matches nothing in particular and whose second test hangs: the guard must end that run with a
traceback that names the hanging test, instead of letting it wait. The check takes a few seconds when
the guard works; without it the hanging test passes after 20 s, and this one fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HANGS = textwrap.dedent("""
    import time


    def test_finishes():
        pass


    def test_waits_for_something_that_never_comes():
        time.sleep(20)
""")


def test_a_hanging_test_in_any_file_is_stopped_with_a_traceback(tmp_path):
    test_file = tmp_path / "test_renamed_module.py"
    test_file.write_text(HANGS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not this project's options
    env = {**os.environ, "SPECSCHED_TEST_HANG_LIMIT_S": "1"}
    # the real tests/conftest.py, loaded as a plugin since the file lies outside tests/
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "-c", str(tmp_path / "pytest.ini"), "--rootdir", str(tmp_path), str(test_file)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "Timeout (0:00:01)!" in out.stderr, out.stderr
    # faulthandler names the innermost frame first: the sleep, inside the hanging test
    hung = [line for line in out.stderr.splitlines() if str(test_file) in line]
    assert hung and "in test_waits_for_something_that_never_comes" in hung[0], out.stderr
    assert "test_finishes" not in out.stderr  # the test that ended in time is not the one stopped
