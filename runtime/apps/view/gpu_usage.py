"""GPU use of each process of a run (SM % and memory), from NVIDIA's management library where the driver
reports it: the SEED paper's Fig. 7 measure. Beside it, how busy the GPU the run is on is as a whole:
the share of time it ran any kernel. Under MPS, NVML gives no SM use to the run's processes (the MPS server
runs their kernels) but still lists them with their memory, so the GPU they are on is known and its busy
share read (BENCHMARKS.md "GPU"). That share counts every process on the GPU, not only the run's.

Optional: ``pip install 'specsched[gpu]'`` (nvidia-ml-py, imported as ``pynvml``). Without the library,
without a GPU, or with a driver that keeps per-process numbers to itself, the sampler has nothing to say:
no columns in the live view, nothing in the record, no error.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuUse:
    sm_percent: float | None     # share of the GPU's SMs its kernels kept busy since the last sample
    memory_bytes: int | None     # GPU memory it holds


class GpuSampler:
    """Per-process GPU use on every GPU NVML sees. `nvml`: the pynvml module (a fake in tests); None =
    import it, and stay off when that fails."""

    def __init__(self, nvml=None) -> None:
        self.nvml, self.handles = None, []
        self._seen: dict[int, int] = {}  # GPU index -> timestamp of the newest utilisation sample read
        self.busy: float | None = None   # at the last sample: % of time the busiest GPU holding a pid ran kernels
        try:
            # lazy: optional dependency (the gpu extra, nvidia-ml-py)
            nvml = nvml if nvml is not None else __import__("pynvml")
            nvml.nvmlInit()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:  # no library, no driver, no GPU: off
            return
        self.nvml = nvml if self.handles else None
        for index, handle in enumerate(self.handles):  # only what comes after this sampler's start is its run's:
            self._newest(index, handle, 0)             # a process kept between jobs has samples of the last one

    def _newest(self, index: int, handle, since: int) -> list:
        """NVML's per-process utilisation samples newer than `since`; remembers the newest timestamp read."""
        samples = self._call(self.nvml.nvmlDeviceGetProcessUtilization, handle, since) or []
        if samples:
            self._seen[index] = max(self._seen.get(index, 0), max(s.timeStamp for s in samples))
        return samples

    @property
    def on(self) -> bool:
        return self.nvml is not None

    def sample(self, pids: set[int]) -> dict[int, GpuUse]:
        """What each of `pids` uses now, summed over the GPUs; a pid NVML does not report is left out."""
        if not self.on:
            return {}
        sm: dict[int, float] = {}
        memory: dict[int, int] = {}
        busy: list[float] = []
        for index, handle in enumerate(self.handles):
            running = self._call(self.nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
            for proc in running:
                used = getattr(proc, "usedGpuMemory", None)
                if proc.pid in pids and used is not None:
                    memory[proc.pid] = memory.get(proc.pid, 0) + int(used)
            if any(proc.pid in pids for proc in running):  # a GPU the run is on: how busy is it as a whole
                rates = self._call(self.nvml.nvmlDeviceGetUtilizationRates, handle)
                if rates is not None:
                    busy.append(float(rates.gpu))
            samples = self._newest(index, handle, self._seen.get(index, 0))
            newest: dict[int, object] = {}
            for s in samples:  # several samples of one pid: the newest says what it does now
                if s.pid in pids and (s.pid not in newest or s.timeStamp > newest[s.pid].timeStamp):
                    newest[s.pid] = s
            for pid, s in newest.items():
                sm[pid] = sm.get(pid, 0.0) + float(s.smUtil)
        self.busy = max(busy) if busy else None
        return {pid: GpuUse(sm.get(pid), memory.get(pid)) for pid in pids if pid in sm or pid in memory}

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except Exception:  # NVML_ERROR_NOT_FOUND (no sample yet), NOT_SUPPORTED (this driver): nothing
            return None


def gpu_summary(series: list[list]) -> dict[str, dict]:
    """Per process, over a run's usage rows [t, name, pid, cpu %, rss, gpu %, gpu bytes]: mean SM % and
    peak GPU memory, for the record; empty when no row has GPU numbers."""
    out: dict[str, dict] = {}
    for row in series:
        if len(row) < 7 or (row[5] is None and row[6] is None):
            continue
        entry = out.setdefault(row[1], {"sm_samples": [], "peak_memory_bytes": 0})
        if row[5] is not None:
            entry["sm_samples"].append(float(row[5]))
        if row[6] is not None:
            entry["peak_memory_bytes"] = max(entry["peak_memory_bytes"], int(row[6]))
    return {name: {"mean_sm_percent": sum(e["sm_samples"]) / len(e["sm_samples"]) if e["sm_samples"] else None,
                   "peak_memory_bytes": e["peak_memory_bytes"], "samples": len(e["sm_samples"])}
            for name, e in out.items()}


def mean_total_sm(series: list[list]) -> float | None:
    """The SM % of all of a run's processes together, averaged over the sampling times (None: no GPU numbers):
    one number per run, the paper's Fig. 7 utilisation."""
    totals: dict[float, float] = {}
    for row in series:
        if len(row) >= 7 and row[5] is not None:
            totals[row[0]] = totals.get(row[0], 0.0) + float(row[5])
    return sum(totals.values()) / len(totals) if totals else None


def mean_busy(series: list[list]) -> float | None:
    """The mean over a run's [t, busy %] rows of how busy its GPU was (None: NVML said nothing)."""
    return sum(row[1] for row in series) / len(series) if series else None


class _Off:
    """An NVML that is not there: a sampler made with it is off (no import, no driver call)."""

    def nvmlInit(self):
        raise RuntimeError("off")


class GpuWatch:
    """GPU use of some processes sampled on a thread while a block runs: for work with no run loop to sample
    from (Hugging Face's generate() in the bench's own process). Off, and free, where the sampler is off."""

    def __init__(self, pids: set[int], *, on: bool = True, interval: float = 0.25,
                 sampler: GpuSampler | None = None) -> None:
        self.pids, self.interval = pids, interval
        self.sampler = sampler if sampler is not None else GpuSampler() if on else GpuSampler(_Off())
        self.sm: list[float] = []       # per sample: the SM % of the pids together
        self.busy: list[list] = []      # [t, busy %] rows, as UsageSampler.gpu_busy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-watch", daemon=True)

    def __enter__(self) -> GpuWatch:
        if self.sampler.on:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            use = self.sampler.sample(self.pids)
            sm = [u.sm_percent for u in use.values() if u.sm_percent is not None]
            if sm:
                self.sm.append(sum(sm))
            if self.sampler.busy is not None:
                self.busy.append([time.monotonic(), self.sampler.busy])

    @property
    def sm_percent(self) -> float | None:
        return sum(self.sm) / len(self.sm) if self.sm else None

    @property
    def busy_percent(self) -> float | None:
        return mean_busy(self.busy)
