"""--device and the CUDA path, tested where there is no GPU: resolution, refusals, the CPU no-ops of a
placement, the flag reaching every process, out-of-memory as one line, the GPU table's script and the GPU
in provenance (what a run reports of the GPU: test_gpu_report.py). Tests that need a GPU are marked and
skipped with the reason."""

from __future__ import annotations

import subprocess
import sys
import types

import numpy as np
import pytest
import torch
from cli_runs import assert_one_error_line, specsched
from rendering import render_text

from specsched.runtime.apps.run.report import summary_table
from specsched.runtime.backends.placement import Placement
from specsched.runtime.core import device
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.device import default_dtype, resolve_device
from specsched.runtime.engine.child import error_line
from specsched.runtime.engine.engine import Engine
from tests.tiny_hf import make_pair

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")


@pytest.fixture
def gpus(monkeypatch):
    """Pretend torch sees `n` CUDA GPUs (0 = none), so that resolution is tested the same everywhere."""
    def see(n: int) -> None:
        monkeypatch.setattr(device, "gpu_device_files", lambda: ["/dev/nvidia0"])  # so torch is asked
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
    return see


# -- resolution -------------------------------------------------------------------------------------

def test_auto_is_the_cpu_without_a_gpu_and_the_first_gpu_with_one(gpus):
    gpus(0)
    assert resolve_device("auto") == "cpu"
    gpus(2)
    assert resolve_device("auto") == "cuda:0"
    assert resolve_device("cuda") == "cuda:0" and resolve_device("cuda:1") == "cuda:1"
    assert resolve_device("cpu") == "cpu"


def test_cuda_without_a_gpu_or_beyond_the_count_is_a_config_error(gpus):
    gpus(0)
    for spec in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=rf"--device {spec}: no CUDA GPU is visible to torch"):
            resolve_device(spec)
    gpus(2)
    with pytest.raises(ConfigError, match=r"--device cuda:2: torch sees 2 CUDA GPU\(s\), cuda:0..cuda:1"):
        resolve_device("cuda:2")


def test_without_a_gpu_device_file_torch_is_not_asked(monkeypatch):
    """No /dev/nvidiaN (nor ROCm's or WSL's file): no GPU can be seen, so the answer needs no torch."""
    monkeypatch.setattr(device, "gpu_device_files", list)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("torch was asked"))
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    for spec in ("cuda", "cuda:1"):
        with pytest.raises(ConfigError, match=rf"--device {spec}: no CUDA GPU on this machine"):
            resolve_device(spec)


CUDA_ASKED = """
import sys
from specsched.runtime.core.config import ConfigError
from specsched.runtime.engine.engine import Engine
try:
    Engine(backend="hf", target="tiny", device="cuda")
except ConfigError as exc:  # the CLI's one line
    print(exc)
print(sorted({"torch", "transformers"} & sys.modules.keys()))
"""


@pytest.mark.skipif(bool(device.gpu_device_files()), reason="this machine has a GPU device file")
def test_cuda_on_a_machine_without_a_gpu_is_refused_before_torch_is_imported():
    """--device cuda where no GPU can be costs a second, not the ~5 s of importing torch to ask it."""
    out = subprocess.run([sys.executable, "-c", CUDA_ASKED], capture_output=True, text=True, timeout=120)
    message, imported = out.stdout.strip().splitlines()
    assert message.startswith("--device cuda: no CUDA GPU on this machine")
    assert imported == "[]"


@pytest.mark.parametrize("spec", ["gpu", "cuda:", "cuda:x", "CUDA", "cuda:-1", ""])
def test_a_device_that_is_no_choice_names_the_choices(spec):
    with pytest.raises(ConfigError, match="choose auto, cpu, cuda or cuda:N"):
        RunConfig(device=spec)


def test_dtype_auto_is_fp32_on_the_cpu_and_bf16_on_cuda(gpus):
    gpus(0)
    assert RunConfig().model_device == "cpu" and RunConfig().model_dtype == "fp32"
    assert RunConfig(dtype="bf16").model_dtype == "bf16"
    gpus(1)
    assert RunConfig().model_device == "cuda:0" and RunConfig().model_dtype == "bf16"
    assert RunConfig(dtype="fp32").model_dtype == "fp32"  # exactness checks on a GPU
    assert RunConfig(backend="llamacpp").model_device == "cpu"  # llama.cpp runs on the CPU here
    assert default_dtype("cuda:3") == "bf16" and default_dtype("cpu") == "fp32"


def test_device_is_refused_where_it_means_nothing():
    with pytest.raises(ConfigError, match="--device applies to --backend hf"):
        RunConfig(backend="sim", device="cpu")
    with pytest.raises(ConfigError, match="llamacpp backend runs on the CPU"):
        RunConfig(backend="llamacpp", device="cuda")
    assert RunConfig(backend="llamacpp", device="cpu").device == "cpu"
    with pytest.raises(ConfigError, match="choose auto, fp32, bf16 or fp16"):
        RunConfig(dtype="fp64")


@no_cuda
@pytest.mark.parametrize("command", [  # one entry point by default; the others in the slow run
    ["run", "--prompt", "hi"],
    pytest.param(["compare", "--prompt", "hi"], marks=pytest.mark.slow),
    pytest.param(["run", "--task", "gsm8k"], marks=pytest.mark.slow),
    pytest.param(["bench", "--arms", "ar", "--repeats", "1"], marks=pytest.mark.slow)])
def test_the_cli_refuses_cuda_without_a_gpu_in_one_line_and_exit_2(command):
    result = specsched(*command, "--backend", "hf", "--target", "tiny", "--device", "cuda")
    assert_one_error_line(result, 2, "--device cuda: no CUDA GPU")  # on this machine, or visible to torch


@no_cuda
def test_the_python_api_refuses_cuda_without_a_gpu_before_any_process():
    with pytest.raises(ConfigError, match="--device cuda:1: no CUDA GPU"):
        Engine(backend="hf", target="tiny", device="cuda:1")


def test_the_cli_refuses_a_bad_device_and_a_device_on_sim_in_one_line():
    assert_one_error_line(specsched("run", "--prompt", "hi", "--device", "tpu"), 2, "unknown --device 'tpu'")
    assert_one_error_line(specsched("run", "--backend", "sim", "--prompt", "hi", "--device", "cpu"), 2,
                          "--device applies to --backend hf")
    assert_one_error_line(specsched("bench", "--smoke", "--device", "cuda"), 2, "--device applies to --backend hf")


# -- placement on the CPU: no stream, no copies, nothing counted -------------------------------------

def test_a_cpu_placement_is_a_no_op():
    p = Placement("cpu")
    assert p.stream is None and not p.cuda
    with p.running():  # a null context
        x = torch.arange(6).view(2, 3)
        assert p.up(x) is x
        logits = torch.randn(2, 5, dtype=torch.bfloat16)
        out = p.down(logits)
    assert out.dtype == np.float32 and np.array_equal(out, logits.float().numpy())
    assert (p.traffic.h2d, p.traffic.d2h) == (0, 0)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return make_pair(tmp_path_factory.mktemp("tiny"))


def test_the_flag_reaches_every_process_and_the_summary_says_where_models_ran(pair):
    from specsched.runtime.apps.run.app import run

    target, draft = pair
    record = run(RunConfig(backend="hf", target=str(target), draft=str(draft), device="cpu", workers=2,
                           prompts=["w1 w2"], max_new_tokens=4))
    assert record.status == "ok", record.error
    placed = {"device": "cpu", "asked": "cpu"}
    assert record.collected.devices == {"verifier": placed, "draft-0": placed, "draft-1": placed}
    assert record.to_json()["devices"] == record.collected.devices
    counters = record.collected.counters
    assert counters["verifications"] > 0 and counters["h2d_bytes"] == counters["d2h_bytes"] == 0  # nothing crosses
    text = render_text(summary_table(record))
    assert "cpu (fp32): verifier + 2 draft workers · --device cpu" in text
    assert "MPS" not in text and "host↔device" not in text  # CUDA-only rows


# -- errors --------------------------------------------------------------------------------------------

def test_a_worker_out_of_gpu_memory_is_one_line_naming_it():
    exc = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.\nGPU 0 has a total "
                                       "capacity of 79.1 GiB of which 1.2 GiB is free.")
    line = f"draft worker 2: {error_line(exc)}"
    assert line.startswith("draft worker 2: out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert "\n" not in line and line.endswith("1.2 GiB is free.)")
    assert error_line(ValueError("bad\nthing")) == "ValueError: bad thing"


# -- on a GPU ------------------------------------------------------------------------------------------

@needs_cuda
def test_a_cuda_placement_has_its_own_stream_and_counts_what_crosses():
    p = Placement("cuda:0")
    assert p.stream is not None and p.stream != torch.cuda.default_stream()
    with p.running():
        x = p.up(torch.arange(8))
        out = p.down(x.float() * 2)
    assert x.device.type == "cuda" and np.array_equal(out, np.arange(8, dtype=np.float32) * 2)
    assert (p.traffic.h2d, p.traffic.d2h) == (8 * 8, 8 * 4)


@needs_cuda
def test_fp32_on_cuda_gives_the_cpu_greedy_tokens_and_counts_the_verifier_traffic(pair):
    from specsched.runtime.apps.run.app import run

    target, draft = pair
    runs = {d: run(RunConfig(backend="hf", target=str(target), draft=str(draft), device=d, dtype="fp32",
                             workers=2, prompts=["w1 w2"], max_new_tokens=8)) for d in ("cpu", "cuda")}
    assert [s.tokens for s in runs["cpu"].sequences] == [s.tokens for s in runs["cuda"].sequences]
    assert {p["device"] for p in runs["cuda"].collected.devices.values()} == {"cuda:0"}
    assert runs["cuda"].collected.counters["h2d_bytes"] > 0 and runs["cuda"].collected.counters["d2h_bytes"] > 0


def test_provenance_names_the_gpu_only_where_the_models_ran_on_one(gpus, monkeypatch):
    from specsched.runtime.engine.provenance import gpu_of, summary

    gpus(0)
    assert gpu_of(RunConfig()) is None and gpu_of(RunConfig(backend="sim")) is None
    gpus(1)
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2**30, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: props)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    gpu = gpu_of(RunConfig())
    assert gpu == {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30,
                   "capability": "9.0", "cuda": "12.8", "driver_visible_gpus": 1}
    assert "gpu: NVIDIA H100 80GB HBM3 (cuda:0, 80 GiB, compute capability 9.0), CUDA 12.8" in summary({"gpu": gpu})
    assert gpu_of(RunConfig(device="cpu")) is None
