"""README's Python API example runs as written, and leaves no process behind."""

from __future__ import annotations

import re
import subprocess
import sys

from cli_runs import REPO


def test_the_engine_example_in_readme_runs_as_written(tmp_path):
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## The engine: processes that stay up"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    script = tmp_path / "example.py"
    check = "\nimport psutil\nprint('children left:', len(psutil.Process().children(recursive=True)))\n"
    script.write_text(code + check)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].endswith("ok") and lines[2].endswith("ok")
    assert "('verifier', 'ready')" in lines[3] and lines[-1] == "children left: 0"
