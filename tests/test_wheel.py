"""Run against an installed wheel (CI installs it into a fresh venv and runs this from /tmp)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import sysconfig
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
    # no generic top-level packages leak into site-packages (a checkout on sys.path may still show its own)
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for name in ("scheduler", "policies", "runtime", "workers"):
        spec = importlib.util.find_spec(name)
        assert spec is None or site not in Path(spec.origin or "/").resolve().parents, name


def summary_rows(stdout: str) -> dict[str, str]:
    """The printed summary table as {row name: value}; the box may be drawn in Unicode or ASCII."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line)]
        if len(cells) == 4 and cells[0] == cells[3] == "" and cells[1]:
            rows.setdefault(cells[1], cells[2])
    return rows


def test_console_script_and_module_run(tmp_path):
    record = tmp_path / "run.json"
    out = subprocess.run([sys.executable, "-m", "specsched", "run", "--prompt", "hi", "--max-new-tokens", "6",
                          "--backend", "sim", "--quiet", "--json", str(record)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert summary_rows(out.stdout).get("status") == "ok", out.stdout
    data = json.loads(record.read_text())
    assert data["status"] == "ok" and data["error"] is None
    assert data["metrics"]["tokens"] > 0 and all(s["tokens"] for s in data["sequences"])  # it really decoded
