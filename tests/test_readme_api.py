"""The Python API example (docs/engine.md) runs as written and leaves no process behind; README shows the same."""

from __future__ import annotations

import re
import subprocess
import sys

from cli_runs import REPO


def _example(path, heading):
    text = (REPO / path).read_text()
    return re.search(r"```python\n(.*?)```", text[text.index(heading):], re.S).group(1)


def test_the_engine_example_in_the_docs_runs_as_written(tmp_path):
    code = _example("docs/engine.md", "# The engine: processes that stay up")
    script = tmp_path / "example.py"
    check = "\nimport psutil\nprint('children left:', len(psutil.Process().children(recursive=True)))\n"
    script.write_text(code + check)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].endswith("ok") and lines[2].endswith("ok")
    assert "('verifier', 'ready')" in lines[3] and lines[-1] == "children left: 0"


def test_readme_tours_the_same_engine_example():
    assert _example("README.md", "**5. The Python API.**") == _example("docs/engine.md", "# The engine: processes")
