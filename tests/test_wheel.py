"""Run against an installed wheel (CI installs it into a fresh venv and runs this from /tmp)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import specsched

FROM_CHECKOUT = Path(specsched.__file__).parent.name == "_package"


@pytest.mark.skipif(FROM_CHECKOUT, reason="editable install maps folders; CI checks the built wheel")
def test_installed_layout_is_one_namespace():
    import specsched.policies
    import specsched.runtime
    import specsched.scheduler
    import specsched.workers

    root = Path(specsched.__file__).parent
    for part in (specsched.runtime, specsched.workers, specsched.scheduler, specsched.policies):
        assert Path(part.__file__).parent.parent == root
    # no generic top-level packages leak into site-packages
    for name in ("scheduler", "policies", "runtime", "workers"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "specsched" not in (spec.origin or ""), name


def test_console_script_and_module_run():
    out = subprocess.run([sys.executable, "-m", "specsched", "run", "--prompt", "hi", "--max-new-tokens", "6",
                          "--backend", "sim", "--quiet"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "status" in out.stdout and "ok" in out.stdout
