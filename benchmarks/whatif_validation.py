"""Is `specsched whatif` right? Predictions from one FCFS trace against real runs of each policy.

On the sim backend (sleeps stand in for forwards, so costs are known) this records one FCFS run of a
contended workload with `--trace`, re-simulates it under each policy, then really runs each policy on
the same workload, and compares makespan (the decode window) and mean turnaround (OS metrics). The
real runs use the same seed, so their tokens equal the FCFS run's; only their timing differs.

    python benchmarks/whatif_validation.py [--backend sim|hf] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

from specsched.runtime.apps.analysis.whatif import recorded, simulate
from specsched.runtime.apps.run.app import run
from specsched.runtime.apps.run.trace import load_events, write_trace
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.provenance import provenance

POLICIES = ("fcfs", "priority", "rr", "srtf", "mlfq", "stride", "sjf", "cfs", "edf")
PROMPTS = ["ka ri su", "te lo", "mi na po ke", "su", "ra ne mo", "lu vi"]


def workload(backend: str) -> RunConfig:
    if backend == "sim":  # six workers sharing a verifier slower than their drafts: a queue forms
        return RunConfig(backend="sim", mode="seed", prompts=PROMPTS, max_new_tokens=48, k=4, seed=5,
                         sim_draft_ms=2, sim_verify_ms=8, sim_agreement=0.7, priorities=[5, 4, 3, 2, 1, 0],
                         tickets=[100, 100, 200, 200, 400, 400])
    return RunConfig(backend="hf", mode="seed", workers=3, max_new_tokens=32, temperature=0.0,
                     priorities=[2, 1, 0], tickets=[100, 200, 400])


def makespan_and_turnaround(record) -> tuple[float, float]:
    return record.metrics.wall_s, record.os_metrics.mean_turnaround_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="sim", choices=("sim", "hf"))
    ap.add_argument("--repeats", type=int, default=3, help="real runs per policy (the median is compared)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    base = workload(args.backend)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "fcfs.trace"
        fcfs = run(dataclasses.replace(base, policy="fcfs"))
        write_trace(fcfs, trace)
        data, events = load_events(trace)
    rec = recorded(base, events, [tuple(c) for c in data["trace"]["commits"]])
    rows = []
    for policy in POLICIES:
        predicted = simulate(dataclasses.replace(base, policy=policy), rec, policy)
        real = [makespan_and_turnaround(run(dataclasses.replace(base, policy=policy))) for _ in range(args.repeats)]
        span, turn = statistics.median(r[0] for r in real), statistics.median(r[1] for r in real)
        rows.append({"policy": policy, "predicted_makespan_s": predicted.makespan_s, "real_makespan_s": span,
                     "makespan_error": predicted.makespan_s / span - 1,
                     "predicted_turnaround_s": predicted.os.mean_turnaround_s, "real_turnaround_s": turn,
                     "turnaround_error": predicted.os.mean_turnaround_s / turn - 1})
        print(f"{policy:9s} makespan {predicted.makespan_s:.3f} s predicted, {span:.3f} s real "
              f"({100 * rows[-1]['makespan_error']:+.1f} %); mean turnaround {predicted.os.mean_turnaround_s:.3f} s "
              f"predicted, {turn:.3f} s real ({100 * rows[-1]['turnaround_error']:+.1f} %)", flush=True)
    result = {"config": base.to_dict(), "repeats": args.repeats, "rows": rows, "provenance": provenance(base)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
