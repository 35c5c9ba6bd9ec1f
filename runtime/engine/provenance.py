"""What produced a record: the models by content, the software, the machine and its threads.

Every record (`run --json`, traces, Tree-of-Thoughts, `compare`, `bench`) carries this block as
``provenance``, so two result files can be told apart: same weights (sha256 of every weight file), same
code (version, git commit and whether the checkout had uncommitted changes), same kernels (torch's CPU
capability: AVX2 and AVX-512 kernels round differently), same machine and thread counts.

Hashing SmolLM2's 538 MB takes about a second; the digest is remembered in the cache directory under
the file's path, size and modification time, so later runs pay nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import psutil

from ..backends.backend import get_backend
from ..core.config import MODEL_BACKENDS, BackendKind, RunConfig
from ..models.cache import known_sha256, model_dir
from ..models.registry import PRESETS

PACKAGES = ("specsched", "torch", "transformers", "pyzmq", "msgpack", "numpy", "rich", "psutil")
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")


def provenance(config: RunConfig, threads: dict[str, int] | None = None, *, dirty: bool = False,
               engine: RunConfig | None = None) -> dict:
    """The block for one record; `threads` is what each child process was given (name -> threads). The models are
    those of `engine` (the engine's settings, whose mode chose its draft) where the job ran on one."""
    block = {"models": models(engine or config), "software": software(dirty=dirty), "machine": machine(),
             "threads": {"children": dict(threads or {}), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                         "verifier_threads_flag": config.verifier_threads}}
    if gpu := gpu_of(config):
        block["gpu"] = gpu
    return block


def gpu_of(config: RunConfig) -> dict | None:
    """The GPU the models ran on (name, memory, compute capability, CUDA version), None on the CPU."""
    try:
        device = config.model_device
    except Exception:  # a run refused for its --device still gets a record
        return None
    if not device.startswith("cuda"):
        return None
    # lazy: torch, ~4 s of start-up (measured 2026-11-27): a CPU run's record does without
    import torch

    props = torch.cuda.get_device_properties(device)
    return {"device": device, "name": props.name, "memory_bytes": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}", "cuda": torch.version.cuda,
            "driver_visible_gpus": torch.cuda.device_count()}


def models(config: RunConfig) -> dict:
    if config.backend not in MODEL_BACKENDS:
        return {"backend": config.backend, "target": None, "draft": None}
    try:
        backend = get_backend(config)
        target, draft = backend.paths()
        dtype = config.model_dtype
        if config.backend == BackendKind.LLAMACPP:  # the GGUF llama.cpp runs, by its weight type (F32, Q4_1, ...)
            target, dtype = backend.gguf, backend.info.file_type
    except Exception as exc:  # a run refused before its models existed still gets a record
        return {"backend": config.backend, "error": f"{type(exc).__name__}: {exc}", "target": None, "draft": None}
    described = describe(Path(target), dtype)
    return {"backend": config.backend, "target": described, "draft": describe(Path(draft), config.model_dtype)}


def preset_of(path: Path) -> str | None:
    """The preset that names this directory as its target or draft, if any."""
    for p in PRESETS.values():
        target = p.shipped_target or model_dir(p.target.model_id)
        if path.resolve() in (target.resolve(), *(d.resolve() for d in p.draft_dirs)):
            return p.name
    return None


def describe(path: Path, dtype: str) -> dict:
    """One model directory (or a GGUF file): its preset, its weight files by sha256, the parameters they hold."""
    if path.is_file():
        digest = known_sha256(path)
        return {"preset": preset_of(path.parent), "path": str(path.resolve()), "name": path.name,
                "architecture": "GGUF", "dtype": dtype, "sha256": digest,
                "files": [{"name": path.name, "sha256": digest, "bytes": path.stat().st_size}], "parameters": None}
    files = sorted(p for p in path.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    digests = {p.name: known_sha256(p) for p in files}
    combined = (next(iter(digests.values())) if len(digests) == 1 else
                hashlib.sha256("".join(f"{n}:{d}\n" for n, d in digests.items()).encode()).hexdigest())
    config = path / "config.json"
    cfg = json.loads(config.read_text()) if config.is_file() else {}
    return {"preset": preset_of(path), "path": str(path.resolve()), "name": cfg.get("_name_or_path") or path.name,
            "architecture": (cfg.get("architectures") or [None])[0], "dtype": dtype,
            "sha256": combined,
            "files": [{"name": n, "sha256": d, "bytes": (path / n).stat().st_size} for n, d in digests.items()],
            "parameters": sum(safetensors_parameters(p) for p in files if p.suffix == ".safetensors") or None}


def safetensors_parameters(path: Path) -> int:
    """Element count of every tensor, read from the safetensors header (8-byte length, then JSON); 0 for a
    file that is not one (a record is written whatever the files hold)."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if size > path.stat().st_size - 8:
            return 0
        try:
            header = json.loads(f.read(size))
            return sum(math.prod(info["shape"]) for key, info in header.items() if key != "__metadata__")
        except (ValueError, TypeError, KeyError, AttributeError):
            return 0


@functools.lru_cache(maxsize=2)
def software(*, dirty: bool = False) -> dict:
    """Versions and commit: read once per process (eight package metadata files cost ~3 ms a record)."""
    return _software(dirty)


def _software(dirty: bool) -> dict:
    versions = {}
    for pkg in PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    return {"python": platform.python_version(), "versions": versions, **checkout(dirty=dirty)}


def checkout(*, dirty: bool = False) -> dict:
    """The git commit when specsched runs from a checkout (an editable install or bin/specsched), read from
    .git's files: a run starts no process of its own beyond its children. `dirty` asks git whether the
    checkout has uncommitted changes (one `git status`; benchmarks ask, since their figures get quoted)."""
    root = Path(__file__).resolve().parents[2]  # runtime/engine/provenance.py -> the checkout
    commit = head_commit(root / ".git")
    if commit is None or not dirty:
        return {"git_commit": commit, "git_dirty": None}
    try:
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": commit, "git_dirty": None}
    return {"git_commit": commit, "git_dirty": bool(status.stdout.strip()) if status.returncode == 0 else None}


def head_commit(git: Path) -> str | None:
    try:
        if git.is_file():  # a worktree or submodule: "gitdir: PATH"
            git = (git.parent / git.read_text().split(":", 1)[1].strip()).resolve()
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head or None  # a detached HEAD holds the commit itself
        ref = head[5:]
        common = Path(git / "commondir").read_text().strip() if (git / "commondir").is_file() else "."
        for base in (git, (git / common).resolve()):
            if (base / ref).is_file():
                return (base / ref).read_text().strip()
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    except (OSError, IndexError):
        return None
    return None


def machine() -> dict:
    return {**_machine(), "torch_cpu_capability": _torch_capability()}


@functools.lru_cache(maxsize=1)
def _machine() -> dict:
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    return {"cpu_model": info.get("model name") or None, "cores": os.cpu_count(),
            "usable_cores": usable, "cpu_flags": [f for f in CPU_FLAGS if f in flags], "platform": _platform(),
            "memory_bytes": _memory()}


def _platform() -> str:
    # os.uname, not platform.platform()/processor(): those may run `uname -p`, a process of this run's own
    u = os.uname()
    return f"{u.sysname} {u.release} {u.machine}"


def _cpuinfo() -> dict:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    first = text.split("\n\n", 1)[0]
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}


def _torch_capability() -> str | None:
    """The kernel family torch dispatches to (AVX2, AVX512, ...). Only asked where torch is already loaded:
    a sim run needs no torch and should not pay its import for one string (its forwards use no kernels)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:
        return None


def _memory() -> int | None:
    try:
        return int(psutil.virtual_memory().total)
    except Exception:
        return None


def summary(block: dict | None) -> str:
    """One line per part, for `replay` and `export`: enough to tell two records' origins apart."""
    if not block:
        return "provenance: not recorded (a record written before records carried it)"
    lines = []
    m = block.get("models") or {}
    for role in ("target", "draft"):
        d = m.get(role)
        if d:
            params = f", {d['parameters'] / 1e6:.2f}M parameters" if d.get("parameters") else ""
            name = d.get("preset") or d.get("name")
            lines.append(f"{role}: {name} ({d['dtype']}{params}) sha256 {d['sha256'][:16]}… at {d['path']}")
    if not m.get("target"):
        lines.append(f"models: {m.get('backend', '?')} backend" + (f" ({m['error']})" if m.get("error") else ""))
    s, mach = block.get("software") or {}, block.get("machine") or {}
    v = s.get("versions") or {}
    commit = s.get("git_commit")
    code = f" at {commit[:10]}{' (uncommitted changes)' if s.get('git_dirty') else ''}" if commit else ""
    lines.append(f"software: specsched {v.get('specsched')}{code}, python {s.get('python')}, "
                 f"torch {v.get('torch')}, transformers {v.get('transformers')}, pyzmq {v.get('pyzmq')}")
    if gpu := block.get("gpu"):
        lines.append(f"gpu: {gpu['name']} ({gpu['device']}, {gpu['memory_bytes'] / 2**30:.0f} GiB, compute "
                     f"capability {gpu['capability']}), CUDA {gpu['cuda']}")
    threads = (block.get("threads") or {}).get("children") or {}
    lines.append(f"machine: {mach.get('cpu_model')}, {mach.get('cores')} cores, torch kernels "
                 f"{mach.get('torch_cpu_capability') or 'n/a'}, threads "
                 + (" ".join(f"{k}:{n}" for k, n in threads.items()) or "n/a"))
    return "\n".join(lines)
