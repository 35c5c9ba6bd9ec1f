"""Is `specsched whatif` right? Predictions from one FCFS trace against real runs of each policy.

Records one FCFS run of a contended workload with `--trace`, re-simulates it under every built-in policy
(batching ones included), then really runs each policy `--repeats` times on the same workload and compares
the three numbers a user reads in whatif's table - makespan (the decode window), mean turnaround and mean
response (OS metrics) - with the median of the real runs. The real runs use the same seed, so their
tokens equal the FCFS run's; only their timing differs. `--arrivals poisson:RATE` plays a workload of jobs
arriving over time instead (its trace from `run --arrivals ... --trace`).

    python benchmarks/whatif_validation.py [--backend sim|hf] [--arrivals poisson:RATE] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path

from specsched.policies.loader import BUILTIN
from specsched.runtime.apps.analysis.recorded_run import recorded
from specsched.runtime.apps.analysis.whatif import simulate
from specsched.runtime.apps.run.trace import load_events, write_trace
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.costs import CostCurve
from specsched.runtime.engine.osmetrics import measure
from specsched.runtime.engine.provenance import provenance

# the repro (issue 47): six workers sharing a verifier slower than their drafts, so a queue forms
PROMPTS = ["lo mi na", "ka ri", "su te lo", "mi", "na ka", "te su ri"]
METRICS = ("makespan", "turnaround", "response")


def workload(backend: str) -> RunConfig:
    if backend == "sim":
        return RunConfig(backend="sim", mode="seed", prompts=PROMPTS, max_new_tokens=60, k=4, seed=3,
                         temperature=1.0, sim_draft_ms=3, sim_verify_ms=8, priorities=[5, 4, 3, 2, 1, 0],
                         tickets=[100, 100, 200, 200, 400, 400])
    return RunConfig(backend="hf", mode="seed", workers=3, max_new_tokens=32, temperature=0.0,
                     priorities=[2, 1, 0], tickets=[100, 200, 400])


def batched(config: RunConfig, policy: str) -> RunConfig:
    """As `specsched run --policy P` sets it: the batching policies take every ready draft."""
    return dataclasses.replace(config, policy=policy, max_batch=0 if policy in ("batch", "goodput") else 1)


def numbers(events, tokens: dict[int, int]) -> dict[str, float]:
    o = measure(events, tokens)
    return {"makespan": o.window_s, "turnaround": o.mean_turnaround_s, "response": o.mean_response_s}


def real_run(config: RunConfig, trace: Path | None = None) -> dict[str, float]:
    """One real run's three numbers, read back from its trace as whatif reads the recorded row."""
    from specsched.runtime.apps.run.app import run

    record = run(config)
    assert record.status == "ok", record.error
    with tempfile.TemporaryDirectory() as tmp:
        path = trace or Path(tmp) / "run.trace"
        write_trace(record, path)
        data, events = load_events(path)
    return numbers(events, {s["id"]: len(s["tokens"]) for s in data["sequences"]})


def predictions(trace: Path, policies: list[str]) -> dict[str, dict[str, float]]:
    data, events = load_events(trace)
    config = RunConfig.from_dict(data["config"])
    rec = recorded(config, events, [tuple(c) for c in data["trace"]["commits"]], workload=data.get("workload"),
                   cost=CostCurve.from_list(data.get("cost_curve")))
    out = {}
    for policy in policies:
        p = simulate(dataclasses.replace(config, policy=policy), rec, policy)
        out[policy] = {"makespan": p.makespan_s, "turnaround": p.os.mean_turnaround_s,
                       "response": p.os.mean_response_s}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="sim", choices=("sim", "hf"))
    ap.add_argument("--repeats", type=int, default=3, help="real runs per policy (the median is compared)")
    ap.add_argument("--policies", default=",".join(BUILTIN), help="comma-separated (default: every built-in)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base, policies = workload(args.backend), args.policies.split(",")
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "fcfs.trace"
        recorded_row = real_run(batched(base, "fcfs"), trace)
        predicted = predictions(trace, policies)
    print("recorded (fcfs): " + " · ".join(f"{m} {recorded_row[m]:.3f} s" for m in METRICS), flush=True)
    # the policies in turn, rotated each repeat: a machine that slows down for a while slows each of them
    reals: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    for i in range(args.repeats):
        for policy in policies[i % len(policies):] + policies[:i % len(policies)]:
            reals[policy].append(real_run(batched(base, policy)))
    rows = []
    for policy in policies:
        real = reals[policy]
        row = {"policy": policy}
        for m in METRICS:
            median = statistics.median(r[m] for r in real)
            row |= {f"predicted_{m}_s": predicted[policy][m], f"real_{m}_s": median,
                    f"real_{m}_runs_s": [r[m] for r in real], f"{m}_error": predicted[policy][m] / median - 1}
        rows.append(row)
        print(f"{policy:12s} " + " · ".join(
            f"{m} {row[f'predicted_{m}_s']:.3f} / {row[f'real_{m}_s']:.3f} s ({100 * row[f'{m}_error']:+.1f} %)"
            for m in METRICS), flush=True)
    worst = {m: max(abs(r[f"{m}_error"]) for r in rows) for m in METRICS}
    print("largest error: " + " · ".join(f"{m} {100 * worst[m]:.1f} %" for m in METRICS))
    if args.json:
        result = {"config": base.to_dict(), "repeats": args.repeats, "recorded": recorded_row, "rows": rows,
                  "largest_error": worst, "minutes": (time.time() - started) / 60, "provenance": provenance(base)}
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
