"""benchmarks/gpu.sh, the GPU table in one command, tested on any machine: what it refuses, and, with a fake
python that says a GPU is there and a fake bench, which sweeps it runs, how it spends GPU_SH_BUDGET_S, and
its exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from cli_runs import REPO

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
SWEEPS = "(choose from fp32,fp32_mps,bf16,fp32_host_chains)"


def gpu_sh(env: dict, cwd=REPO, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(cwd / "benchmarks" / "gpu.sh")], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, **env}, timeout=timeout)


@no_cuda
def test_the_gpu_table_script_refuses_to_run_without_a_gpu():
    before = set((REPO / "benchmarks" / "results").glob("gpu_*"))  # the tables measured on a GPU, committed
    result = gpu_sh({})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == ["gpu.sh: error: no CUDA GPU is visible to torch; the GPU table "
                                                  "needs one"]
    assert set((REPO / "benchmarks" / "results").glob("gpu_*")) == before  # nothing written


@pytest.mark.parametrize(("env", "line"), [
    ({"GPU_SH_SWEEPS": "fp32,nope"}, f"GPU_SH_SWEEPS: no sweep 'nope' {SWEEPS}"),
    ({"GPU_SH_SWEEPS": "*"}, f"GPU_SH_SWEEPS: no sweep '*' {SWEEPS}"),
    ({"GPU_SH_SWEEPS": ""}, f"GPU_SH_SWEEPS names no sweep {SWEEPS}"),
    ({"GPU_SH_SWEEPS": "fp32,bf16,fp32"}, "GPU_SH_SWEEPS names fp32 twice"),  # it would halve the budget's shares
    ({"GPU_SH_BUDGET_S": "10m"}, "GPU_SH_BUDGET_S must be a whole number of seconds, 1 to 99999999, not '10m'"),
    ({"GPU_SH_BUDGET_S": "0"}, "GPU_SH_BUDGET_S must be a whole number of seconds, 1 to 99999999, not '0'"),
])
def test_the_gpu_table_script_refuses_a_bad_setting_in_one_line_on_any_machine(env, line):
    before = set((REPO / "benchmarks" / "results").glob("gpu_*"))
    result = gpu_sh(env)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"gpu.sh: error: {line}\n")
    assert set((REPO / "benchmarks" / "results").glob("gpu_*")) == before


FAKE_PYTHON = textwrap.dedent("""\
    #!/usr/bin/env bash
    # `python -c ...` (is there a GPU?): yes. `python -m specsched bench ...`: log the flags, then sleep
    # FAKE_SLEEP seconds (SIGTERM: log it, exit 143 as bench does) and exit FAKE_RC, writing FAKE_MD as markdown.
    [ "$1" = -c ] && exit 0
    echo "bench $*" >> "$FAKE_LOG"
    while [ $# -gt 0 ]; do [ "$1" = --markdown ] && md=$2; shift; done
    printf '%s' "${FAKE_MD:-}" > "$md"
    trap 'kill $!; echo stopped >> "$FAKE_LOG"; exit 143' TERM   # bench, too, stops what it started
    sleep "${FAKE_SLEEP:-0}" & wait
    exit "${FAKE_RC:-0}"
""")


@pytest.fixture
def fake(tmp_path):
    """A copy of the script (it writes under its own benchmarks/results) and a fake python beside it."""
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "gpu.sh", tmp_path / "benchmarks" / "gpu.sh")
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log = tmp_path / "bench.log"

    def run(timeout: float = 60, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
        log.unlink(missing_ok=True)
        path = "/usr/bin:/bin"  # no nvidia-cuda-mps-control here: the MPS sweep is left out, and says so
        result = gpu_sh({"PYTHON": str(python), "FAKE_LOG": str(log), "PATH": path, **env}, tmp_path, timeout)
        return result, log.read_text().splitlines() if log.exists() else []

    return run


def test_the_sweeps_named_run_in_order_with_their_dtype_and_a_failed_run_is_exit_1(fake):
    result, benches = fake(GPU_SH_SWEEPS="bf16,fp32")
    assert result.returncode == 0, result.stderr
    assert [b.split("--dtype ")[1].split()[0] for b in benches] == ["fp32", "bf16"]  # the script's order
    assert all("--sweep n --values 2,3,4,6,8" in b and "--backend hf" in b for b in benches)
    result, benches = fake(GPU_SH_SWEEPS="fp32,fp32_mps", FAKE_RC="1")
    assert result.returncode == 1 and len(benches) == 1
    assert "gpu.sh: nvidia-cuda-mps-control not found: no MPS run" in result.stderr


def test_a_greedy_mismatch_on_fp32_fails_the_script_even_when_bench_was_stopped(fake):
    result, _ = fake(GPU_SH_SWEEPS="fp32", FAKE_MD="**✗ Greedy outputs differ from serial AR:** sd (sequences 1)")
    assert result.returncode == 1


@pytest.mark.slow  # the shortest share is 30 s
def test_the_budget_gives_the_first_sweep_30_s_stops_it_and_starts_none_with_under_30_s_left(fake):
    started = time.monotonic()
    result, benches = fake(timeout=120, GPU_SH_BUDGET_S="40", FAKE_SLEEP="600")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr  # a sweep cut by the budget is no failure
    assert [b.split()[0] for b in benches] == ["bench", "stopped"]  # fp32 ran, got SIGTERM at 30 s; no other
    assert "gpu.sh: the fp32 sweep was stopped at the end of its 30 s (GPU_SH_BUDGET_S)" in result.stderr
    assert "of GPU_SH_BUDGET_S left: no bf16 sweep" in result.stderr
    assert 30 <= took < 60
