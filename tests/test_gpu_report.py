"""What a run says of the GPU, tested without one: the summary's CUDA rows (MPS, host<->device traffic,
GPU use), MPS detection, per-process GPU use and the whole GPU's busy share from a fake NVML into the usage
rows, the replay and the live view, and the bench's GPU notes."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import tempfile
import types
from pathlib import Path

from rendering import render_text

from specsched.runtime.apps.bench.measure import ArmResult, Sample
from specsched.runtime.apps.run.report import summary_table
from specsched.runtime.apps.view.dashboard import Dashboard
from specsched.runtime.apps.view.gpu_usage import GpuSampler, GpuUse, GpuWatch, gpu_summary, mean_busy, mean_total_sm
from specsched.runtime.apps.view.usage import RecordedUsage, Usage, UsageSampler
from specsched.runtime.core import device as device_module
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.device import mps_daemon_running
from specsched.runtime.engine.collected import Collected
from specsched.runtime.engine.record import build_record


def test_on_cuda_the_summary_says_mps_traffic_and_gpu_use():
    config = RunConfig(backend="hf", prompts=["x"], workers=1)
    on_gpu = {"device": "cuda:0", "asked": "auto"}
    collected = Collected(devices={"verifier": on_gpu, "draft-0": on_gpu},
                          counters={"verifications": 4, "h2d_bytes": 4096, "d2h_bytes": 3 * 2**20})
    record = build_record(config, collected, "ok", None)
    record.extra["mps_daemon"] = False
    record.extra["gpu_usage"] = {"verifier": {"mean_sm_percent": 61.0, "peak_memory_bytes": 2**30, "samples": 3}}
    text = render_text(summary_table(record))
    assert "cuda:0: verifier + 1 draft worker · --device auto" in text
    assert "off: the processes time-slice the GPU (start it: nvidia-cuda-mps-control -d)" in text
    assert "4.0 KiB up, 3.0 MiB down (1.0 KiB / 768.0 KiB per verification)" in text
    assert "verifier 61 % 1.0 GiB" in text
    assert "GPU busy" not in text  # no whole-GPU reading: no row
    record.extra["gpu_busy"] = {"mean_percent": 43.0, "samples": 5}
    assert "43 % of the time, over 5 samples (every process on that GPU)" in render_text(summary_table(record))
    record.extra["mps_daemon"] = True
    assert "on: the processes' kernels run concurrently" in render_text(summary_table(record))


def test_on_sim_the_device_row_names_no_device_flag():  # --device is refused there
    on_cpu = {"device": "cpu", "asked": "auto"}
    record = build_record(RunConfig(backend="sim", prompts=["x"], workers=1),
                          Collected(devices={"verifier": on_cpu, "draft-0": on_cpu}), "ok", None)
    text = render_text(summary_table(record))
    assert "cpu: verifier + 1 draft worker" in text and "--device" not in text


# -- MPS -----------------------------------------------------------------------------------------------

def test_mps_is_seen_by_a_listener_on_its_control_pipe_or_by_its_process(monkeypatch):
    import psutil

    # a short directory: a UNIX socket's path must fit in 108 bytes, whatever TMPDIR is
    pipes = Path(tempfile.mkdtemp(prefix="mps", dir="/tmp"))
    try:
        monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipes))
        monkeypatch.setattr(psutil, "process_iter", lambda attrs: iter([]))
        control = pipes / "control"
        assert not mps_daemon_running()
        control.touch()  # a plain file is no daemon
        assert not mps_daemon_running()
        control.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
            daemon.bind(str(control))
            daemon.listen()
            assert mps_daemon_running()
        assert control.exists() and not mps_daemon_running()  # the file a quit daemon leaves behind
        control.unlink()
        os.mkfifo(control)
        assert not mps_daemon_running()  # a FIFO nobody reads
        reader = os.open(control, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert mps_daemon_running()
        finally:
            os.close(reader)
        assert not mps_daemon_running()
        daemon = types.SimpleNamespace(info={"name": "nvidia-cuda-mps-control"})
        monkeypatch.setattr(psutil, "process_iter", lambda attrs: iter([daemon]))
        assert mps_daemon_running()
    finally:
        shutil.rmtree(pipes)
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY")
    assert str(device_module.mps_control_pipe()) == "/tmp/nvidia-mps/control"


# -- GPU use from NVML (a fake one) ------------------------------------------------------------------

class FakeNvml:
    """Two GPUs: pid 10 on both, pid 11 on the second; the second reports no memory per process."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, fail_init: bool = False) -> None:
        self.fail_init, self.asked_since = fail_init, []

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        proc = types.SimpleNamespace
        return [proc(pid=10, usedGpuMemory=300), proc(pid=99, usedGpuMemory=7)] if h == 0 else \
            [proc(pid=10, usedGpuMemory=None), proc(pid=11, usedGpuMemory=None)]

    samples = {0: [(10, 5, 20), (10, 9, 40)]}  # GPU -> (pid, timestamp, SM %): from before a sampler starts

    def nvmlDeviceGetProcessUtilization(self, h, since):
        self.asked_since.append((h, since))
        sample = types.SimpleNamespace
        newer = [sample(pid=p, timeStamp=t, smUtil=u) for p, t, u in self.samples.get(h, []) if t > since]
        if not newer:
            raise self.NVMLError("Not Found")  # as NVML says when it has no sample newer than `since`
        return newer

    def later(self, h, *samples):
        """Samples taken after the sampler started."""
        self.samples = {**self.samples, h: self.samples.get(h, []) + list(samples)}

    def nvmlDeviceGetUtilizationRates(self, h):
        if h == 0:
            return types.SimpleNamespace(gpu=55, memory=12)
        raise self.NVMLError("Not Supported")


class FakeMpsNvml(FakeNvml):
    """One GPU under MPS: the clients hold memory, but SM use is reported for the MPS server (pid 500) alone."""

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetProcessUtilization(self, h, since):
        return [types.SimpleNamespace(pid=500, timeStamp=3, smUtil=70)]


def test_the_gpu_sampler_reads_sm_and_memory_per_process_from_nvml():
    nvml = FakeNvml()
    sampler = GpuSampler(nvml)
    assert sampler.on and nvml.asked_since == [(0, 0), (1, 0)]  # at its start: what NVML holds is older
    nvml.later(0, (10, 12, 30), (10, 15, 50))
    use = sampler.sample({10, 11, 12})
    assert nvml.asked_since[2] == (0, 9)  # so the 40 % at 9, a job before this one in the same process, is not read
    assert use[10].sm_percent == 50.0 and use[10].memory_bytes == 300  # of several samples the newest counts
    assert use.keys() == {10}  # 11: no memory nor sample reported; 12: not on a GPU; 99: not ours
    sampler.sample({10})
    assert nvml.asked_since[-2] == (0, 15)  # the next read asks for samples newer than the last seen


def test_the_gpu_sampler_reads_how_busy_the_gpu_the_run_is_on_is():
    sampler = GpuSampler(FakeNvml())
    sampler.sample({10, 11})
    assert sampler.busy == 55.0  # GPU 0 (pid 10's); GPU 1 does not say
    sampler.sample({11})
    assert sampler.busy is None  # pid 11 is only on GPU 1, which does not say
    nvml = FakeNvml()
    nvml.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=(55, 80)[h], memory=0)
    sampler = GpuSampler(nvml)
    sampler.sample({10})
    assert sampler.busy == 80.0  # pid 10 is on both GPUs: the busier one is where the run's work shows
    sampler.sample({12})
    assert sampler.busy is None  # no process of the run on any GPU: nobody's kernels are ours


def test_under_mps_a_run_has_the_whole_gpus_busy_share_where_per_process_sm_is_the_servers():
    gpu = GpuSampler(FakeMpsNvml())
    assert gpu.sample({10}) == {10: GpuUse(None, 300)}  # memory per client, but no SM %: it is the server's
    assert gpu.busy == 55.0
    usage = UsageSampler(interval=0.0, gpu=gpu)
    usage.sample({"verifier": os.getpid()}, now=1.0)
    assert usage.gpu_busy == []  # none of these pids is on the GPU
    usage.sample({"verifier": os.getpid(), "draft-0": 10}, now=2.0)
    usage.sample({"verifier": os.getpid(), "draft-0": 10}, now=3.0)
    assert usage.gpu_busy == [[2.0, 55.0], [3.0, 55.0]] and mean_busy(usage.gpu_busy) == 55.0
    assert mean_busy([]) is None


def test_a_gpu_watch_samples_on_a_thread_while_its_block_runs_and_is_free_when_off():
    import time

    nvml = FakeNvml()
    watch = GpuWatch({10}, interval=0.01, sampler=GpuSampler(nvml))  # as around HF's generate()
    nvml.later(0, (10, 12, 40))
    with watch:
        waited = time.monotonic() + 30
        while len(watch.busy) < 3 and time.monotonic() < waited:
            time.sleep(0.01)
    assert len(watch.busy) >= 3 and watch.sm_percent == 40.0 and watch.busy_percent == 55.0
    seen = len(watch.busy)
    time.sleep(0.05)
    assert len(watch.busy) == seen  # it stopped with the block
    off = GpuWatch({10}, on=False)  # a CPU run: NVML is not even imported
    with off:
        pass
    assert not off.sampler.on and off.sm_percent is None and off.busy_percent is None


def test_without_nvml_or_a_driver_the_sampler_is_off_and_says_nothing(monkeypatch):
    assert not GpuSampler(FakeNvml(fail_init=True)).on
    assert GpuSampler(FakeNvml(fail_init=True)).sample({1}) == {}
    import builtins

    real = builtins.__import__

    def without_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_pynvml)
    assert not GpuSampler().on and UsageSampler().sample({})[0].gpu_percent is None


def test_gpu_use_reaches_the_usage_rows_the_replay_and_the_live_view():
    sampler = UsageSampler(gpu=GpuSampler(FakeNvml()))
    me = os.getpid()
    rows = [u.to_row(1.0) for u in sampler.sample({"verifier": me})]
    assert all(len(r) == 5 for r in rows)  # our pid is no GPU process of the fake: CPU rows stay as they were
    gpu_rows = [[1.0, "verifier", 10, 50.0, 2**20, 40.0, 300], [1.0, "draft-0", 11, 90.0, 2**20, 20.0, None],
                [2.0, "verifier", 10, 50.0, 2**20, 60.0, 500], [1.0, "supervisor", 1, 5.0, 2**20]]
    replayed = RecordedUsage(gpu_rows).sample({}, 1.0)
    assert {u.name: (u.gpu_percent, u.gpu_bytes) for u in replayed} == {
        "verifier": (40.0, 300), "draft-0": (20.0, None), "supervisor": (None, None)}
    assert gpu_summary(gpu_rows) == {
        "verifier": {"mean_sm_percent": 50.0, "peak_memory_bytes": 500, "samples": 2},
        "draft-0": {"mean_sm_percent": 20.0, "peak_memory_bytes": 0, "samples": 1}}
    assert mean_total_sm(gpu_rows) == (60.0 + 60.0) / 2
    assert gpu_summary([r[:5] for r in gpu_rows]) == {} and mean_total_sm([r[:5] for r in gpu_rows]) is None


def test_the_live_view_has_gpu_columns_only_when_nvml_reports():
    from specsched.runtime.apps.view.monitor import Monitor

    config = RunConfig(backend="sim", prompts=["x"], workers=1)
    snap = Monitor(config).snapshot(Collected(), 0.0)
    cpu = dataclasses.replace(snap, usage=(Usage("verifier", 10, 50.0, 2**20),))
    assert "GPU SM %" not in render_text(Dashboard(cpu))
    gpu = dataclasses.replace(snap, usage=(Usage("verifier", 10, 50.0, 2**20, 40.0, 3 * 2**20),))
    line = next(x for x in render_text(Dashboard(gpu)).splitlines() if x.startswith("verifier") and "MiB" in x)
    assert "GPU SM %" in render_text(Dashboard(gpu)) and line.split()[-2:] == ["3", "MiB"] and "40" in line.split()
    assert "GPU busy" not in render_text(Dashboard(gpu))
    busy = render_text(Dashboard(dataclasses.replace(gpu, gpu_busy=63.4)))  # under MPS: the whole GPU's share
    assert "run queue mean 0.00 · GPU busy 63 %" in busy


def test_the_snapshot_carries_the_newest_gpu_busy_share_where_one_was_read():
    from specsched.runtime.apps.view.monitor import Monitor

    config = RunConfig(backend="sim", prompts=["x"], workers=1)
    sampler = UsageSampler(interval=0.0, gpu=GpuSampler(FakeMpsNvml()))
    monitor = Monitor(config, sampler)
    assert monitor.snapshot(Collected(), 0.0).gpu_busy is None  # none of the run's pids is on the GPU
    sampler.gpu_busy.append([0.5, 70.0])
    assert monitor.snapshot(Collected(), 1.0).gpu_busy == 70.0
    assert Monitor(config, RecordedUsage([])).snapshot(Collected(), 0.0).gpu_busy is None  # a replay: none


def test_bench_notes_each_arms_gpu_use_only_where_nvml_measured_it():
    from specsched.runtime.apps.bench.record import BenchRecord
    from specsched.runtime.apps.bench.sweep import SweepPoint
    from specsched.runtime.apps.bench.tables import markdown

    def arm(name: str, *sm: float | None) -> ArmResult:
        return ArmResult(name, name, samples=[Sample(10.0, 1.0, [[1]], gpu_sm_percent=x,
                                                     gpu_busy_percent=None if x is None else x / 2) for x in sm])

    config = RunConfig(backend="sim", prompts=["x"], workers=2)
    record = BenchRecord(config, 0, 3, sweep_axis="n", sweep=[
        SweepPoint(2, config, [arm("ar", 30.0, 50.0, 40.0), arm("seed-fcfs", 70.0, 90.0, 80.0)]),
        SweepPoint(4, config, [arm("ar", None, None, None)])])
    text = markdown(record)
    assert "GPU SM % (NVML) · n 2: ar 40 %, seed-fcfs 80 %" in text  # medians of the repeats
    assert "GPU busy % (NVML, whole GPU) · n 2: ar 20 %, seed-fcfs 40 %" in text
    assert "n 4" not in text.split("GPU SM %")[1].splitlines()[0]
    assert record.to_json()["sweep"]["points"][0]["arms"][1]["gpu_sm_percent"] == 80.0
    assert record.to_json()["sweep"]["points"][0]["arms"][1]["gpu_busy_percent"] == 40.0
    assert "MPS" not in text and record.to_json()["config"]["mps_daemon"] is None  # not on CUDA: not said
    record.mps_daemon = True  # the engine's reading on CUDA: which of a with- and a without-MPS table this is
    assert " · MPS on" in markdown(record).splitlines()[0] and record.to_json()["config"]["mps_daemon"] is True
    record.sweep = record.sweep[1:]
    assert "GPU SM %" not in markdown(record) and "GPU busy" not in markdown(record)  # CPU runs: no note
