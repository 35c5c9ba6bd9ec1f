"""Where the models of a run live: ``--device auto|cpu|cuda|cuda:N`` resolved on this machine, the dtype
that goes with it, and whether NVIDIA's MPS control daemon is running.

Resolution imports torch lazily (a sim run never pays for it), and only on a machine with a GPU device file
(without one, no GPU can be seen: `auto` is the CPU and `cuda` is refused at once); it asks only
``torch.cuda.is_available()`` and ``device_count()``. The engine resolves once to refuse a missing GPU before
any model loads, and each child resolves again after its fork, creating its own CUDA context (the zygote
never touches CUDA).
"""

from __future__ import annotations

import glob
import os
import re
import socket
import stat
from pathlib import Path

import psutil

from .kinds import ConfigError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
DTYPES = ("auto", "fp32", "bf16", "fp16")
_CUDA_N = re.compile(r"cuda:(\d+)")


def check_device(spec: str) -> None:
    """The flag's syntax alone (no torch): auto, cpu, cuda or cuda:N."""
    if spec not in ("auto", "cpu", "cuda") and not _CUDA_N.fullmatch(spec):
        raise ConfigError(f"unknown --device {spec!r}; choose {DEVICE_CHOICES}")


# The device files a GPU torch can drive appears as: NVIDIA's, Jetson's (integrated, no /dev/nvidiaN), ROCm's
# (torch.cuda on AMD) and WSL's
GPU_DEVICE_FILES = ("/dev/nvidia[0-9]*", "/dev/nvmap", "/dev/nvhost-gpu", "/dev/kfd", "/dev/dxg")


def gpu_device_files() -> list[str]:
    """This machine's GPU device files. Without one, torch cannot see a GPU: asking it costs its import (~5 s)."""
    return [path for pattern in GPU_DEVICE_FILES for path in glob.glob(pattern)]


def refuse_absent_gpu(spec: str) -> None:
    """--device cuda or cuda:N on a machine with no GPU device file: bad input, answered without torch."""
    check_device(spec)
    if spec not in ("auto", "cpu") and not gpu_device_files():
        raise ConfigError(f"--device {spec}: no CUDA GPU on this machine (no GPU device file: /dev/nvidiaN, "
                          "Jetson's /dev/nvmap, /dev/kfd, /dev/dxg); use --device cpu or auto")


def resolve_device(spec: str) -> str:
    """"cpu" or "cuda:N" for this machine. auto = the first CUDA GPU torch sees, else the CPU; cuda or
    cuda:N without such a GPU is bad input (ConfigError: one line, exit 2)."""
    check_device(spec)
    if spec == "cpu":
        return "cpu"
    if not gpu_device_files():  # no GPU can be seen: auto is the CPU, cuda is refused, and torch is not asked
        refuse_absent_gpu(spec)
        return "cpu"
    # lazy: torch, ~4 s of start-up (measured 2026-11-27), asked only on a machine with a GPU device file
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if spec == "auto":
        return "cuda:0" if count else "cpu"
    index = 0 if spec == "cuda" else int(spec.split(":")[1])
    if count == 0:
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise ConfigError(f"--device {spec}: no CUDA GPU is visible to torch (torch {torch.__version__}, {build}); "
                          "use --device cpu or auto")
    if index >= count:
        raise ConfigError(f"--device {spec}: torch sees {count} CUDA GPU(s), cuda:0..cuda:{count - 1}")
    return f"cuda:{index}"


DEVICE_CHAINS = "SPECSCHED_DEVICE_CHAINS"


def device_chains() -> str:
    """$SPECSCHED_DEVICE_CHAINS: "" (unset: draft chains drawn on the device on CUDA, and by a feature draft over
    its own vocabulary), "0" (through the host: TreeDrafter's loop over V-wide rows) or "1" (on the device, the
    CPU too). Checked by the engine before any process starts, read by each draft model
    (backends/device_chain.py, backends/feature.py); anything else is bad input."""
    setting = os.environ.get(DEVICE_CHAINS, "")
    if setting not in ("", "0", "1"):
        raise ConfigError(f"{DEVICE_CHAINS}={setting}: choose 0 (chains through the host) or 1 "
                          "(drawn where the draft model runs)")
    return setting


CPU_ROWS = "SPECSCHED_CPU_ROWS"


def cpu_rows() -> bool:
    """$SPECSCHED_CPU_ROWS: unset or "1", a CPU fp32 target's forward takes models/few_rows.py's cheaper path
    for a verification's rows; "0" keeps transformers' stock forward. Checked by the engine before any process
    starts, read by each target model (backends/hf_model.py); anything else is bad input."""
    setting = os.environ.get(CPU_ROWS, "")
    if setting not in ("", "0", "1"):
        raise ConfigError(f"{CPU_ROWS}={setting}: choose 1 (the cheaper path for a verification's rows on the "
                          "CPU, the default) or 0 (transformers' stock forward)")
    return setting != "0"


def is_cuda(device: str) -> bool:
    return device.startswith("cuda")


def default_dtype(device: str) -> str:
    """--dtype auto: bf16 on a GPU (half the memory traffic, tensor cores), fp32 on the CPU (exact, and
    CPUs without native bf16 run it ~4x slower)."""
    return "bf16" if is_cuda(device) else "fp32"


def mps_control_pipe() -> Path:
    """Where the MPS control daemon listens: $CUDA_MPS_PIPE_DIRECTORY/control (default /tmp/nvidia-mps)."""
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps") / "control"


def mps_daemon_running() -> bool:
    """True when NVIDIA's MPS control daemon runs: a process of its name is visible, or something listens on
    its control pipe. Without it, kernels of different processes on one GPU time-slice; with it they run
    concurrently.

    The pipe alone is not enough: `echo quit | nvidia-cuda-mps-control` stops the daemon and leaves the file
    behind (seen on the H100, 2026-11-27: runs after a quit were labelled "MPS on" while NVML still showed
    each process's own SM use, which under MPS belongs to the server). A daemon outside this PID namespace
    (a container sharing the host's pipe directory) is found by its pipe having a listener."""
    for proc in psutil.process_iter(["name"]):
        if proc.info.get("name") == "nvidia-cuda-mps-control":
            return True
    return has_listener(mps_control_pipe())


def has_listener(path: Path) -> bool:
    """Whether a live process listens on `path`: a UNIX socket accepts a connection (a stale one refuses),
    a FIFO has a reader (opening it to write without blocking fails with ENXIO when none has it open).
    Anything else, or nothing, is no listener. Nothing is written either way."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    if stat.S_ISSOCK(mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            try:
                sock.connect(str(path))
            except TimeoutError:
                return True  # a listener whose backlog is full is still a listener
            except OSError:
                return False
            return True
    if stat.S_ISFIFO(mode):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return False
        os.close(fd)
        return True
    return False
