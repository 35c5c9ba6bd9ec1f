"""What the fp32 target's forward costs on the CPU for the rows a verification reads, by transformers' stock
forward and by runtime/models/few_rows.py's path (packed matrices from 4 rows, shared key/value heads).

Per context length: the median ms of one forward of 1, 3, 5 and 8 new rows after `context` cached tokens
(rolled back after each), and of one batched forward of three sequences of 5 rows each (what `batch`
verification of three k = 4 chains runs), two torch threads as a verifier on 2 cores; the two models
alternated `--rounds` times in one process. The two paths' logits are compared as well: the largest
difference, and whether every row's argmax agrees.

    python benchmarks/verify_rows.py [--rounds 7] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.engine.provenance import checkout, machine
from specsched.runtime.models.pull import pull

CONTEXTS, ROWS, BATCH = (200, 1000), (1, 3, 5, 8), 3


def load(cheaper: bool) -> HFModel:
    os.environ["SPECSCHED_CPU_ROWS"] = "1" if cheaper else "0"
    model = HFModel(str(pull()), "fp32")
    model.set_threads(2)
    return model


def prefix(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(100, 20000, n)]


def one_ms(model: HFModel, context: int, rows: int | str) -> tuple[float, np.ndarray]:
    """ms of one forward of `rows` new rows after `context` cached tokens ("3x5": a batch of three), and its
    logits."""
    if rows == f"{BATCH}x5":
        caches = [model.new_cache() for _ in range(BATCH)]
        for i, c in enumerate(caches):
            model.forward(c, prefix(context - 10 * i, i))
        start = time.perf_counter()
        out = model.forward_batch(caches, [prefix(5, 100 + i) for i in range(BATCH)])
        return (time.perf_counter() - start) * 1e3, np.concatenate(out)
    cache = model.new_cache()
    model.forward(cache, prefix(context, 0))
    model.forward(cache, prefix(rows, 1), first_row=0)  # a first call of this shape, untimed
    model.crop(cache, context)
    start = time.perf_counter()
    out = model.forward(cache, prefix(rows, 1), first_row=0)
    return (time.perf_counter() - start) * 1e3, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    models = {"stock": load(False), "few_rows": load(True)}
    print("few_rows path:", models["few_rows"].speed_ups, flush=True)
    rows_out = []
    for context in CONTEXTS:
        for rows in (*ROWS, f"{BATCH}x5"):
            times: dict[str, list[float]] = {name: [] for name in models}
            logits = {}
            for _ in range(args.rounds):
                for name, model in models.items():
                    ms, logits[name] = one_ms(model, context, rows)
                    times[name].append(ms)
            stock, cheaper = (statistics.median(times[n]) for n in models)
            a, b = logits["stock"], logits["few_rows"]
            rows_out.append({"context": context, "rows": rows, "stock_ms": round(stock, 1),
                             "few_rows_ms": round(cheaper, 1), "ratio": round(cheaper / stock, 3),
                             "max_logit_diff": float(np.abs(a - b).max()),
                             "argmax_agree": bool((a.argmax(-1) == b.argmax(-1)).all())})
            print(json.dumps(rows_out[-1]), flush=True)
    if args.json:
        record = {"rounds": args.rounds, "threads": 2, "rows": rows_out, "machine": machine(),
                  **checkout(dirty=True)}
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
