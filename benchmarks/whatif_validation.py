"""Is `specsched whatif` right? Predictions from one FCFS trace against real runs of each policy.

Records one FCFS run of a contended workload with `--trace`, re-simulates it under every built-in policy
(batching ones included), then really runs each policy `--repeats` times on the same workload - the policies
in turn, rotated each repeat, so a machine that slows down for a while slows each - and compares the three
numbers whatif's table shows - makespan (the decode window), mean turnaround and mean response (OS metrics) -
with the median of the real runs. The real runs use the same seed, so their tokens equal the FCFS run's; only
their timing differs. One trace carries its run's noise into every prediction, so the median of the
predictions from the real FCFS runs' own traces is compared too ("from 3": the median of 3 against the median
of 3). Two more numbers tell the model's error from the machine's noise: each real run re-simulated from its
own trace under its own policy ("self", the median error), and the spread of the real runs themselves
(largest / smallest - 1). `--arrivals` plays a workload of jobs arriving over time
instead (`specsched run --arrivals poisson:8 --jobs 8 ... --trace`).

`--paired` holds the machine still: before each real run of a policy it records an FCFS run, predicts the
policy from that trace, and compares the prediction with the run right after it; the error is the median
over the repeats of prediction / run - 1. A machine whose speed drifts over minutes (a shared host) moves
the real medians of identical schedules apart by more than the model's error; pairs minutes apart see
the same machine.

`--batch-cost` first records one run under `batch` (another seed, the same prompts) and prices the rows of
every predicted batch beyond one by its live cost fit, as `whatif --batch-cost` does: an FCFS recording's
forwards each read one draft, which cannot show what another row costs.

`--slower F` multiplies the sim workload's draft and verification costs: a mean response of a few ms (the
repro's first waits) is as large as the OS's dispatch jitter, so its relative error is mostly the machine's.

    python benchmarks/whatif_validation.py [--backend sim|hf] [--arrivals] [--repeats 3] [--paired] [--slower F]
        [--batch-cost] [--json PATH]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specsched.policies.loader import BUILTIN
from specsched.runtime.apps.analysis.recorded_run import from_trace, read_batch_cost
from specsched.runtime.apps.analysis.whatif import simulate
from specsched.runtime.apps.run.trace import load_events, write_trace
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.costs import CostCurve
from specsched.runtime.engine.osmetrics import measure
from specsched.runtime.engine.provenance import provenance

# the repro (issue 47): six workers sharing a verifier slower than their drafts, so a queue forms
PROMPTS = ["lo mi na", "ka ri", "su te lo", "mi", "na ka", "te su ri"]
SIM = {"backend": "sim", "seed": 3, "temperature": 1.0, "max_new_tokens": 60, "sim_draft_ms": 3, "sim_verify_ms": 8}
ARRIVALS = ["--arrivals", "poisson:8", "--jobs", "8"]  # jobs of one sequence each, overlapping
METRICS = ("makespan", "turnaround", "response")


def sim_costs(slower: float) -> dict:
    """The sim workload with its draft and verification costs `slower` times the repro's: every wait, mean
    response included, grows by that factor, while the OS's dispatch jitter (a few ms a round) does not."""
    return SIM | {"sim_draft_ms": SIM["sim_draft_ms"] * slower, "sim_verify_ms": SIM["sim_verify_ms"] * slower}


def workload(backend: str, slower: float = 1.0) -> RunConfig:
    if backend == "sim":
        return RunConfig.of(mode="seed", prompts=PROMPTS, k=4, priorities=[5, 4, 3, 2, 1, 0],
                            tickets=[100, 100, 200, 200, 400, 400], **sim_costs(slower))
    return RunConfig.of(backend="hf", mode="seed", workers=3, max_new_tokens=32, temperature=0.0,
                        priorities=[2, 1, 0], tickets=[100, 200, 400])


def as_run(config: RunConfig, policy: str) -> RunConfig:
    """As `specsched run --policy P` sets it: the batching policies take every ready draft."""
    return dataclasses.replace(config, policy=policy, max_batch=0 if policy in ("batch", "goodput") else 1)


def record(config: RunConfig, trace: Path, arrivals: bool) -> None:
    """One real run, recorded as a trace: `run --trace` (or a workload: `run --arrivals ... --trace`)."""
    if not arrivals:
        from specsched.runtime.apps.run.app import run

        result = run(config)
        assert result.status == "ok", result.error
        write_trace(result, trace)
        return
    settings = config.to_dict()
    sim = {k: settings[k] for k in SIM}
    flags = [a for p in PROMPTS for a in ("--prompt", p)] + [
        a for k, v in sim.items() for a in (f"--{k.replace('_', '-')}", str(v))]
    if config.max_batch != 1:
        flags += ["--max-batch", str(config.max_batch)]
    subprocess.run([sys.executable, "-m", "specsched", "run", *ARRIVALS, *flags, "--policy", config.policy,
                    "--trace", str(trace)], check=True, capture_output=True, stdin=subprocess.DEVNULL)


def calibrate(config: RunConfig, folder: Path, arrivals: bool) -> CostCurve:
    """The live cost fit of one run under batch, with another seed: what an extra row costs on this machine."""
    trace = folder / "batch-calibration.trace"
    record(as_run(dataclasses.replace(config, seed=config.seed + 1), "batch"), trace, arrivals)
    cost = read_batch_cost(str(trace))
    print(f"batch cost (from a run under batch): {cost.describe()}", flush=True)
    return cost


def numbers(trace: Path) -> dict[str, float]:
    """The recorded row of whatif's table."""
    data, events = load_events(trace)
    o = measure(events, {s["id"]: len(s["tokens"]) for s in data["sequences"]})
    return {"makespan": o.window_s, "turnaround": o.mean_turnaround_s, "response": o.mean_response_s}


def predictions(trace: Path, policies: list[str], batch_cost: CostCurve | None = None) -> dict[str, dict[str, float]]:
    """Each policy's predicted row of whatif's table, from `trace` (a batch's rows priced by `batch_cost`)."""
    _, config, _, rec = from_trace(str(trace), batch_cost)
    out = {}
    for policy in policies:
        p = simulate(dataclasses.replace(config, policy=policy), rec, policy)
        out[policy] = {"makespan": p.makespan_s, "turnaround": p.os.mean_turnaround_s,
                       "response": p.os.mean_response_s}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="sim", choices=("sim", "hf"))
    ap.add_argument("--arrivals", action="store_true", help=f"jobs arriving over time ({' '.join(ARRIVALS)})")
    ap.add_argument("--repeats", type=int, default=3, help="real runs per policy (the median is compared)")
    ap.add_argument("--policies", default=",".join(BUILTIN), help="comma-separated (default: every built-in)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--keep", type=Path, default=None, metavar="DIR", help="keep every trace here")
    ap.add_argument("--paired", action="store_true",
                    help="an FCFS recording right before each real run, the prediction from it against that run")
    ap.add_argument("--batch-cost", action="store_true",
                    help="price batches by the live fit of one run under batch (another seed), recorded first")
    ap.add_argument("--slower", type=float, default=1.0, metavar="F",
                    help="sim only: draft and verification costs F times the repro's (longer waits, same jitter)")
    args = ap.parse_args()
    if args.slower <= 0 or (args.slower != 1.0 and args.backend != "sim"):
        ap.error("--slower takes a positive factor, and only with --backend sim")
    if args.paired:
        return paired(args)
    base, policies = workload(args.backend, args.slower), args.policies.split(",")
    started = time.time()
    real: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    own: dict[str, list[dict[str, float]]] = {p: [] for p in policies}
    from_fcfs: list[dict[str, dict[str, float]]] = []   # every policy predicted from each real FCFS run
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        cost = calibrate(base, Path(tmp), args.arrivals) if args.batch_cost else None
        trace = Path(tmp) / "fcfs.trace"
        record(as_run(base, "fcfs"), trace, args.arrivals)
        recorded_row, predicted = numbers(trace), predictions(trace, policies, cost)
        print("recorded (fcfs): " + " · ".join(f"{m} {recorded_row[m]:.3f} s" for m in METRICS), flush=True)
        for i in range(args.repeats):
            for policy in policies[i % len(policies):] + policies[:i % len(policies)]:
                path = Path(tmp) / f"{policy}.{i}.trace"
                record(as_run(base, policy), path, args.arrivals)
                real[policy].append(numbers(path))
                own[policy].append(predictions(path, [policy])[policy])
                if policy == "fcfs":
                    from_fcfs.append(predictions(path, policies, cost))
    rows = [row(policy, predicted[policy], [p[policy] for p in from_fcfs], real[policy], own[policy])
            for policy in policies]
    for r in rows:
        print(f"{r['policy']:12s} " + " · ".join(
            f"{m} {r[f'predicted_{m}_s']:.3f} / {r[f'real_{m}_s']:.3f} s ({100 * r[f'{m}_error']:+.1f} %, "
            f"from 3 {100 * r[f'{m}_error_from_3']:+.1f} %, self {100 * r[f'{m}_self_error']:+.1f} %, "
            f"spread {100 * r[f'{m}_spread']:.0f} %)" for m in METRICS), flush=True)
    worst = {m: max(abs(r[f"{m}_error"]) for r in rows) for m in METRICS}
    worst3 = {m: max(abs(r[f"{m}_error_from_3"]) for r in rows) for m in METRICS}
    print("largest error: " + " · ".join(f"{m} {100 * worst[m]:.1f} % (from 3: {100 * worst3[m]:.1f} %)"
                                         for m in METRICS))
    if args.json:
        result = {"config": base.to_dict(), "arrivals": ARRIVALS if args.arrivals else None,
                  "batch_cost": cost.to_list() if cost is not None else None,
                  "repeats": args.repeats, "recorded": recorded_row, "rows": rows, "largest_error": worst,
                  "largest_error_from_3": worst3, "load_average": os.getloadavg(),
                  "minutes": (time.time() - started) / 60, "provenance": provenance(base)}
        args.json.write_text(json.dumps(result, indent=1) + "\n")


def paired(args: argparse.Namespace) -> None:
    """Each real run of a policy against the prediction from an FCFS recording made just before it."""
    base, policies = workload(args.backend, args.slower), args.policies.split(",")
    started = time.time()
    pairs: dict[str, list[tuple[dict[str, float], dict[str, float]]]] = {p: [] for p in policies}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        cost = calibrate(base, Path(tmp), args.arrivals) if args.batch_cost else None
        for i in range(args.repeats):
            for policy in policies[i % len(policies):] + policies[:i % len(policies)]:
                before, path = Path(tmp) / f"fcfs-before-{policy}.{i}.trace", Path(tmp) / f"{policy}.{i}.trace"
                record(as_run(base, "fcfs"), before, args.arrivals)
                record(as_run(base, policy), path, args.arrivals)
                pairs[policy].append((predictions(before, [policy], cost)[policy], numbers(path)))
    rows = []
    for policy in policies:
        out = {"policy": policy}
        for m in METRICS:
            errors = [p[m] / r[m] - 1 for p, r in pairs[policy] if r[m]]
            out |= {f"{m}_errors": errors, f"{m}_error": statistics.median(errors) if errors else float("nan"),
                    f"predicted_{m}_runs_s": [p[m] for p, _ in pairs[policy]],
                    f"real_{m}_runs_s": [r[m] for _, r in pairs[policy]]}
        rows.append(out)
        print(f"{policy:12s} " + " · ".join(f"{m} {100 * out[f'{m}_error']:+.1f} % (pairs "
                                            + ", ".join(f"{100 * e:+.0f}" for e in out[f"{m}_errors"]) + ")"
                                            for m in METRICS), flush=True)
    worst = {m: max(abs(r[f"{m}_error"]) for r in rows) for m in METRICS}
    print("largest error (median of pairs): " + " · ".join(f"{m} {100 * worst[m]:.1f} %" for m in METRICS))
    if args.json:
        result = {"config": base.to_dict(), "arrivals": ARRIVALS if args.arrivals else None,
                  "batch_cost": cost.to_list() if cost is not None else None, "paired": True,
                  "repeats": args.repeats, "rows": rows, "largest_error": worst, "load_average": os.getloadavg(),
                  "minutes": (time.time() - started) / 60, "provenance": provenance(base)}
        args.json.write_text(json.dumps(result, indent=1) + "\n")


def row(policy: str, predicted: dict, from_3: list[dict], real: list[dict], own: list[dict]) -> dict:
    out = {"policy": policy}
    for m in METRICS:
        runs = [r[m] for r in real]
        median, median_3 = statistics.median(runs), statistics.median(p[m] for p in from_3)
        out |= {f"predicted_{m}_s": predicted[m], f"real_{m}_s": median, f"real_{m}_runs_s": runs,
                f"{m}_error": predicted[m] / median - 1, f"predicted_{m}_from_3_s": median_3,
                f"{m}_error_from_3": median_3 / median - 1,
                f"{m}_self_error": statistics.median(o[m] / r[m] - 1 for o, r in zip(own, real)),
                f"{m}_spread": max(runs) / min(runs) - 1}
    return out


if __name__ == "__main__":
    main()
