"""CPU % and resident memory of every process of the run, sampled with psutil, and its GPU SM % and memory
where NVML reports them (gpu_usage.py).

A live run samples the supervisor and its children once every ``interval`` seconds (1 s) and keeps
the series, so a recorded trace can show the same numbers when it is replayed. With ``lanes`` it also
samples each draft worker's lane processes (``--branch-processes``), found among the worker's children by
the name they give themselves, as "draft-W lane I".
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass

import psutil

from ....workers.lane_process import LANE_TITLE
from .gpu_usage import GpuSampler, GpuUse


@dataclass(frozen=True, slots=True)
class Usage:
    name: str
    pid: int
    cpu_percent: float     # of one core, like top: 200 = two cores busy
    rss_bytes: int
    gpu_percent: float | None = None   # SM share on the GPU (None: not on a GPU, or not reported)
    gpu_bytes: int | None = None       # GPU memory held

    @property
    def on_gpu(self) -> bool:
        return self.gpu_percent is not None or self.gpu_bytes is not None

    def to_row(self, t: float) -> list:
        gpu = [self.gpu_percent, self.gpu_bytes] if self.on_gpu else []  # CPU-only rows keep their 5 fields
        return [t, self.name, self.pid, self.cpu_percent, self.rss_bytes, *gpu]


class UsageSampler:
    """Samples the supervisor and the children named in ``Collected.processes``."""

    def __init__(self, interval: float = 1.0, gpu: GpuSampler | None = None, *, lanes: bool = False,
                 keep: bool = True) -> None:
        """`keep=False`: no series kept, the newest sample alone (a server's view runs for days)."""
        self.interval = interval
        self.lanes = lanes                    # look for lane processes under the draft workers
        self.keep = keep
        self.gpu = gpu if gpu is not None else GpuSampler()  # off without pynvml or a GPU
        self.series: list[list] = []          # [t, name, pid, cpu %, rss] rows, for the trace
        self.gpu_busy: list[list] = []        # [t, busy %] of the GPU the run is on (gpu_usage.py), where read
        self._procs: dict[int, psutil.Process] = {}
        self._last: tuple[Usage, ...] = ()
        self._at = -float("inf")

    def sample(self, processes: dict[str, int], now: float | None = None) -> tuple[Usage, ...]:
        now = time.monotonic() if now is None else now
        if now - self._at < self.interval:
            return self._last
        self._at = now
        out = []
        last = {u.pid: u for u in self._last}
        named = {"supervisor": os.getpid(), **processes, **(lane_processes(processes) if self.lanes else {})}
        gpu = self.gpu.sample(set(named.values()))
        if self.gpu.busy is not None:  # unkept, the newest sample alone (the view shows it)
            self.gpu_busy = self.gpu_busy if self.keep else []
            self.gpu_busy.append([now, self.gpu.busy])
        for name, pid in named.items():
            try:
                proc = self._procs.get(pid)
                if proc is None:
                    # cpu_percent measures from the previous call; the first one only starts the clock
                    proc = self._procs[pid] = psutil.Process(pid)
                    proc.cpu_percent(None)
                g = gpu.get(pid, GpuUse(None, None))
                out.append(Usage(name, pid, proc.cpu_percent(None), proc.memory_info().rss, g.sm_percent,
                                 g.memory_bytes))
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                if pid in last:   # it has exited: keep showing what it last used
                    out.append(last[pid])
        self._last = tuple(out)
        if self.keep:
            self.series += [u.to_row(now) for u in out]
        return self._last


def lane_processes(processes: dict[str, int]) -> dict[str, int]:
    """The lane processes of the draft workers among `processes` (name -> pid): "draft-W lane I" -> pid."""
    found = {}
    for name, pid in processes.items():
        if not name.startswith("draft-"):
            continue
        try:
            for child in psutil.Process(pid).children():
                title = child.cmdline()[:1]
                if title and title[0].startswith(LANE_TITLE):
                    found[f"{name} lane {title[0][len(LANE_TITLE):]}"] = child.pid
        except psutil.Error:  # it has just exited, or exits while we look
            continue
    return found


class RecordedUsage:
    """The usage series of a trace, read back at any moment of the replay."""

    def __init__(self, series: list[list]) -> None:
        self.series = sorted(series, key=lambda r: r[0])
        self._times = [r[0] for r in self.series]

    def sample(self, processes: dict[str, int], now: float | None = None) -> tuple[Usage, ...]:
        if not self.series:
            return ()
        now = self._times[-1] if now is None else now
        at = self._times[max(bisect.bisect_right(self._times, now) - 1, 0)]   # the last sample by then
        rows = self.series[bisect.bisect_left(self._times, at):bisect.bisect_right(self._times, at)]
        return tuple(Usage(name, int(pid), float(cpu), int(rss), *gpu) for _, name, pid, cpu, rss, *gpu in rows)
