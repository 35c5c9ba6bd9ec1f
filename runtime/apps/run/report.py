"""What `specsched run` prints: the generated texts, then one summary table."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ....scheduler.cores import describe as describe_threads
from ...core.calibration import ece
from ...core.config import BackendKind
from ...core.costs import CostCurve
from ...engine.osmetrics import OsMetrics
from ...engine.record import RunRecord


def summary_table(record: RunRecord) -> Table:
    m, c = record.metrics, record.config
    table = Table(title=Text(f"specsched · mode {c.mode} · policy {c.policy} · backend {c.backend}"),  # no markup
                  show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    alpha = "n/a" if m.acceptance_rate is None else f"{m.acceptance_rate:.3f}"
    rows = [
        ("status", record.status),
        ("sequences", str(c.n_sequences)),
        ("tokens", str(m.tokens)),
        ("wall time (decode)", f"{m.wall_s:.3f} s"),
        ("start-up (load models)", f"{m.startup_s:.2f} s"),
        ("tokens/s", f"{m.tokens_per_s:.1f}"),
        ("acceptance rate α", alpha),
        ("mean tokens / verification", f"{m.mean_tokens_per_verify:.2f}"),
        ("verifier busy", f"{100 * m.verifier_busy:.1f} %"),
    ]
    if 0 < len(m.waiting_s) <= 8:
        rows.append(("waiting per worker", " ".join(f"w{w}:{s:.3f}s" for w, s in m.waiting_s.items())))
    elif m.waiting_s:
        worst = max(m.waiting_s, key=m.waiting_s.__getitem__)
        mean = sum(m.waiting_s.values()) / len(m.waiting_s)
        rows.append(("waiting per worker", f"mean {mean:.3f}s, max {m.waiting_s[worst]:.3f}s (w{worst})"))
    curve = CostCurve.from_list(record.collected.cost_curve)
    if curve is not None:
        rows.append(("target forward (fitted)", curve.describe()))
    rows += device_rows(record)
    threads = describe_threads(record.collected.verifier_threads)
    if threads:
        rows.append(("verifier threads", threads))
    aside = int(record.collected.counters.get("aside_tokens", 0))
    if aside:
        rows.append(("stepped aside (target alone)", f"{aside} tokens ({100 * aside / max(m.tokens, 1):.0f} %)"))
    error = ece(record.collected.calibration)
    if error is not None:
        rows.append(("draft calibration (ECE)", f"{error:.3f}"))
    if m.rejected_messages or record.collected.rejected_telemetry:
        rows.append(("rejected messages", f"{m.rejected_messages} at the verifier, "
                                          f"{record.collected.rejected_telemetry} at the engine"))
    if record.collected.refused_handshakes:
        rows.append(("refused peers", f"{record.collected.refused_handshakes} handshakes without the run's key"))
    if hosts := record.collected.hosts:
        rows.append(("other hosts", ", ".join(f"{name} @ {host}" for name, host in sorted(hosts.items()))))
    if restarts := record.collected.restarts:  # engine/supervisor.py: who died, resumed from the verified prefix
        who = sorted({r["process"] for r in restarts})
        rows.append(("restarts", f"{len(restarts)} ({', '.join(who)}), "
                                 f"{sum(r['reprefilled_tokens'] for r in restarts)} tokens re-prefilled"))
    view = record.extra.get("view")
    if view and view.get("share") is not None:
        rows.append(("watching (view CPU / run CPU)",
                     f"{100 * view['share']:.2f} % ({view['cpu_s']:.3f} s / {view['run_cpu_s']:.2f} s)"))
    for k, v in rows:
        table.add_row(k, v)
    return table


def device_rows(record: RunRecord) -> list[tuple[str, str]]:
    """Where the models ran (as each process reported it), and on CUDA: MPS, and the verifier's host <-> device
    traffic."""
    devices = record.collected.devices
    if not devices:
        return []
    by_device: dict[str, list[str]] = {}
    for name, placed in devices.items():
        by_device.setdefault(placed.get("device", "?"), []).append(name)
    target = ((record.provenance or {}).get("models") or {}).get("target") or {}
    dtype = f" ({target['dtype']})" if target.get("dtype") else ""
    asked = sorted({placed.get("asked", "?") for placed in devices.values()})
    where = "; ".join(f"{device}{dtype}: {_processes(names)}" for device, names in sorted(by_device.items()))
    # sim and llamacpp have no such flag
    flag = f" · --device {', '.join(asked)}" if record.config.backend == BackendKind.HF else ""
    rows = [("device", where + flag)]
    if not any(device.startswith("cuda") for device in by_device):
        return rows
    mps = record.extra.get("mps_daemon")
    if mps is not None:
        rows.append(("MPS", "on: the processes' kernels run concurrently" if mps else
                            "off: the processes time-slice the GPU (start it: nvidia-cuda-mps-control -d)"))
    if gpu := record.extra.get("gpu_usage"):  # view/gpu_usage.py, where NVML reports per process
        rows.append(("GPU use (mean SM %, peak memory)",
                     " · ".join(f"{name} {_percent(u['mean_sm_percent'])} {_bytes(u['peak_memory_bytes'])}"
                                for name, u in gpu.items())))
    if busy := record.extra.get("gpu_busy"):  # the whole GPU, MPS too
        rows.append(("GPU busy (any kernel running)", f"{_percent(busy['mean_percent'])} of the time, over "
                                                      f"{busy['samples']} samples (every process on that GPU)"))
    c = record.collected.counters
    verifications = max(int(c.get("verifications", 0)), 1)
    h2d, d2h = int(c.get("h2d_bytes", 0)), int(c.get("d2h_bytes", 0))
    per = f"{_bytes(h2d // verifications)} / {_bytes(d2h // verifications)} per verification"
    rows.append(("verifier host↔device", f"{_bytes(h2d)} up, {_bytes(d2h)} down ({per})"))
    return rows


def _processes(names: list[str]) -> str:
    drafts = sum(name.startswith("draft-") for name in names)
    parts = (["verifier"] if "verifier" in names else []) + ([f"{drafts} draft worker{'s' * (drafts != 1)}"]
                                                             if drafts else [])
    return " + ".join(parts)


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def print_record(record: RunRecord, console: Console, *, texts: bool = True) -> None:
    if texts:
        for s in record.sequences:
            mark = "" if s.finished else " [yellow](unfinished)[/]"
            console.print(f"[bold cyan]sequence {s.id}[/] (worker {s.worker}){mark}")
            console.print(s.text, markup=False, highlight=False)
            console.print()
    console.print(summary_table(record))
    if record.os_metrics is not None and record.os_metrics.workers:
        console.print(os_table(record.os_metrics))
        console.print(os_verdict(record.os_metrics), highlight=False)


def os_table(o: OsMetrics, *, max_workers: int = 16) -> Table:
    """Per-worker scheduling metrics, OSTEP style, with the averages in the last row."""
    table = Table(title="scheduling, the OS way (each draft worker is a job, the verifier the CPU)",
                  title_justify="left")
    for name in ("worker", "turnaround", "waiting", "response", "verifier time", "tokens",
                 "verifications", "longest wait", "bypassed"):
        table.add_column(name, justify="left" if name == "worker" else "right")
    for w in o.workers[:max_workers]:
        table.add_row(f"w{w.worker}", _s(w.turnaround_s), _s(w.waiting_s), _s(w.response_s),
                      _s(w.service_s), str(w.tokens), str(w.verifications), _s(w.max_wait_s),
                      str(w.max_bypassed))
    if len(o.workers) > max_workers:
        table.add_row(f"… {len(o.workers) - max_workers} more", *[""] * 8)
    table.add_row("mean", _s(o.mean_turnaround_s), _s(o.mean_waiting_s), _s(o.mean_response_s),
                  *[""] * 5, style="bold", end_section=True)
    return table


def os_verdict(o: OsMetrics) -> str:
    """The overall numbers, and whether any wait starved (see runtime/engine/osmetrics.py)."""
    jain = "/".join("n/a" if j is None else f"{j:.3f}" for j in (o.jain_service, o.jain_tokens))
    longest = "none" if o.max_wait_worker is None else f"{1e3 * o.max_wait_s:.1f} ms (w{o.max_wait_worker})"
    if o.starved:
        starvation = (f"[bold red]STARVATION: a wait of w{o.max_bypassed_worker} was bypassed "
                      f"{o.max_bypassed} times (bound {o.starvation_bound})[/]")
    else:
        starvation = (f"no starvation (most bypasses in one wait {o.max_bypassed} "
                      f"≤ bound {o.starvation_bound})")
    return (f"verifier utilisation {100 * o.utilisation:.1f} % · throughput {o.throughput:.1f} tok/s · "
            f"Jain's index (verifier time / tokens) {jain} · longest wait {longest} · {starvation}")


def _s(seconds: float | None) -> str:
    return "" if seconds is None else f"{seconds:.3f} s"
