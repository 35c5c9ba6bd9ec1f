"""What does a long-lived ``specsched.Engine`` cost per job, and does it stay flat over many jobs?

Runs N small jobs one after another on ONE engine with the sim backend (sleeps stand in for forwards,
so the figures are the runtime's own costs, not a model's). Before the loop the draft workers are
started and one unmeasured job is run, so no measured job includes a model load. For every job it takes:

- ``record.extra["engine"]["overhead_s"]``: the engine's own figure - submission to record ready, minus
  time queued for workers, minus the decode window ``metrics.wall_s``;
- a caller's view, independent of the engine's bookkeeping: ``time.perf_counter()`` around the
  ``generate`` call minus ``metrics.wall_s`` (it also covers tokenising, submission and the wake-up);
- the verifier process's resident memory (psutil) after the job.

It reports median / p90 / max overhead in ms, the verifier's mean RSS over the first and the last
``--window`` jobs (difference in MiB and %), and models loaded at the start and the end (equal: no
process was respawned). Results and provenance go to a JSON file; a short table is printed.

    python benchmarks/engine_jobs.py [--jobs 200] [--workers 2] [--max-new-tokens 8]
                                     [--sim-draft-ms 1] [--sim-verify-ms 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import psutil

from specsched import Engine
from specsched.runtime.core.config import RunConfig

MIB = 1024 * 1024


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=30).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), None)
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "git_commit": commit, "cpu_model": cpu, "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch_version}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--sim-draft-ms", type=float, default=1.0)
    ap.add_argument("--sim-verify-ms", type=float, default=2.0)
    ap.add_argument("--window", type=int, default=20, help="jobs averaged at each end for the RSS comparison")
    ap.add_argument("--json", default="benchmarks/results/engine_jobs_sim.json")
    args = ap.parse_args()

    cfg = RunConfig.of(backend="sim", sim_draft_ms=args.sim_draft_ms, sim_verify_ms=args.sim_verify_ms)
    engine_ms, caller_ms, rss, queued_ms = [], [], [], []
    with Engine(cfg) as e:
        e.start_workers(args.workers)
        e.generate(["a b c"], workers=args.workers, max_new_tokens=args.max_new_tokens, seed=args.jobs)  # warm-up
        verifier = psutil.Process(next(p["pid"] for p in e.processes if p["role"] == "verifier"))
        loaded_start = e.models_loaded
        for i in range(args.jobs):
            t0 = time.perf_counter()
            rec = e.generate(["a b c"], workers=args.workers, max_new_tokens=args.max_new_tokens, seed=i)
            elapsed = time.perf_counter() - t0
            if rec.status != "ok":
                raise SystemExit(f"job {i} ended {rec.status}: {rec.error}")
            engine_ms.append(1000 * rec.extra["engine"]["overhead_s"])
            queued_ms.append(1000 * rec.extra["engine"]["queued_s"])
            caller_ms.append(1000 * (elapsed - rec.metrics.wall_s))
            rss.append(verifier.memory_info().rss)
        loaded_end = e.models_loaded

    w = min(args.window, len(rss))
    first, last = statistics.mean(rss[:w]) / MIB, statistics.mean(rss[-w:]) / MIB
    result = {
        "settings": vars(args),
        "overhead_ms": {"median": statistics.median(engine_ms), "p90": percentile(engine_ms, 90),
                        "max": max(engine_ms)},
        "caller_overhead_ms": {"median": statistics.median(caller_ms), "p90": percentile(caller_ms, 90),
                               "max": max(caller_ms)},
        "queued_ms_median": statistics.median(queued_ms),
        "verifier_rss_mib": {"first": first, "last": last, "diff": last - first,
                             "diff_pct": 100 * (last - first) / first, "window": w},
        "models_loaded": {"start": loaded_start, "end": loaded_end},
        "per_job": {"overhead_ms": engine_ms, "caller_overhead_ms": caller_ms, "verifier_rss_bytes": rss},
        "provenance": provenance(),
    }
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))

    o, c, m = result["overhead_ms"], result["caller_overhead_ms"], result["verifier_rss_mib"]
    print(f"{args.jobs} jobs x {args.workers} workers, {args.max_new_tokens} tokens, sim "
          f"{args.sim_draft_ms}/{args.sim_verify_ms} ms")
    print(f"{'':34}{'median':>9}{'p90':>9}{'max':>9}")
    print(f"{'engine overhead_s (ms)':34}{o['median']:9.2f}{o['p90']:9.2f}{o['max']:9.2f}")
    print(f"{'caller: generate - wall_s (ms)':34}{c['median']:9.2f}{c['p90']:9.2f}{c['max']:9.2f}")
    print(f"verifier RSS first {w} / last {w} jobs: {first:.1f} / {last:.1f} MiB "
          f"({m['diff']:+.2f} MiB, {m['diff_pct']:+.2f} %)")
    print(f"models loaded: start {loaded_start}, end {loaded_end}"
          + ("" if loaded_start == loaded_end else "  <-- RESPAWNED"))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
