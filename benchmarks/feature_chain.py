"""What a drafted token of the shipped feature draft costs, its chain drawn over the draft's own vocabulary
(feature_chain.py) against TreeDrafter's loop over V-wide rows, and what the target's forward costs for the
rows a k = 4 chain asks it to verify.

Per context length and temperature: ms per drafted token of `ChainDrafter.propose(4)` then a verdict that
commits one token (the cache rolled back and one feature row taken, as in a run), one torch thread, the
two paths alternated `--rounds` times on the same draft in one process; medians. Then the fp32 target's
forward of 1, 3 and 5 new rows after 200 cached tokens (two threads, as a verifier on 2 cores runs): a
draft pays only where the verification of k + 1 rows costs little more than one row.

    python benchmarks/feature_chain.py [--rounds 7] [--json F]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from specsched.runtime.apps.drafts.feature_recipe import FEATURE_ASSET
from specsched.runtime.backends.feature import FeatureModel
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.engine.provenance import checkout, machine
from specsched.runtime.models.pull import pull
from specsched.workers.drafter import ChainDrafter

CONTEXTS, K, PROPOSALS = (50, 200, 600, 1200), 4, 60


def per_token_ms(model: FeatureModel, temperature: float, context: int, drawn: bool) -> float:
    """ms per drafted token over PROPOSALS chains of K after `context` tokens (random ids and features)."""
    rng = np.random.default_rng(context)
    model.draws_chains = drawn
    ids = [int(t) for t in model.support[rng.integers(0, len(model.support), context)]]
    drafter = ChainDrafter(model, SamplingParams(temperature), np.random.default_rng(1), ids, k=K)
    drafter.take_features(0, rng.standard_normal((context - 1, model.hidden)).astype(np.float32))
    drafter.propose(K)
    start = time.perf_counter()
    for _ in range(PROPOSALS):
        proposal = drafter.propose(K)
        drafter.observe([int(proposal.tokens[0])])
        drafter.take_features(len(drafter.context) - 2, rng.standard_normal((1, model.hidden)).astype(np.float32))
    return (time.perf_counter() - start) / PROPOSALS / K * 1e3


def target_ms(rows: int, rounds: int) -> float:
    target = HFModel(str(pull()), "fp32")
    target.set_threads(2)
    cache = target.new_cache()
    target.forward(cache, list(range(100, 300)))
    times = []
    for r in range(rounds + 2):
        start = time.perf_counter()
        target.forward(cache, list(range(400, 400 + rows)), first_row=0)
        if r >= 2:
            times.append(time.perf_counter() - start)
        target.crop(cache, 200)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    model = FeatureModel(FEATURE_ASSET, pull())
    rows = []
    for temperature in (0.0, 1.0):
        for context in CONTEXTS:
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for drawn in (False, True):
                    times[drawn].append(per_token_ms(model, temperature, context, drawn))
            loop, chain = (statistics.median(times[d]) for d in (False, True))
            rows.append({"temperature": temperature, "context": context, "loop_ms": round(loop, 3),
                         "chain_ms": round(chain, 3), "ratio": round(chain / loop, 3)})
            print(json.dumps(rows[-1]), flush=True)
    target = {str(n): round(target_ms(n, args.rounds * 3), 1) for n in (1, 3, 5)}
    print("target forward ms by new rows:", target, flush=True)
    if args.json:
        record = {"k": K, "proposals": PROPOSALS, "rounds": args.rounds, "draft_threads": 1, "rows": rows,
                  "target_forward_ms": target, "machine": machine(), **checkout(dirty=True)}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
