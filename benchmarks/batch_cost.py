"""What does verifying several queued drafts in one target forward cost, per draft, on this machine?

For batch sizes B and draft shapes, times (a) B separate verification forwards and (b) one batched
forward through the same backend code the verifier uses (per-sequence caches, padding, 4D masks),
each sequence with its own prompt-length context. Reports medians over repetitions and the ratio
batched / sequential: below 1 the batch is cheaper, and the B where the per-draft cost stops
falling is the crossover.

    python benchmarks/batch_cost.py [--target DIR] [--dtype fp32|bf16] [--reps 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from specsched.runtime.backends.hf_model import HFModel

SHAPES = {"chain k=4": [-1, 0, 1, 2], "tree 2,2,1": [-1, -1, 0, 0, 1, 1, 2, 3, 4, 5]}


def _prepared(model: HFModel, batch: int, context: int):
    caches = []
    for b in range(batch):
        c = model.new_cache()
        model.forward(c, [(17 * b + 31 * i) % (model.vocab_size - 2) + 2 for i in range(context + b)])
        caches.append(c)
    return caches


def _draft(parents: list[int], base: int, vocab: int) -> tuple[list[int], list[int]]:
    tokens = [(base * 7 + i * 13) % (vocab - 2) + 2 for i in range(len(parents))]
    return tokens, [base + p if p >= 0 else base - 1 for p in parents]


def measure(model: HFModel, batch: int, parents: list[int], context: int, reps: int) -> dict:
    seq_times, bat_times = [], []
    for _ in range(reps):
        caches = _prepared(model, batch, context)
        lengths = [len(c) for c in caches]
        t0 = time.perf_counter()
        for c, n in zip(caches, lengths):
            model.forward(c, *_draft(parents, n, model.vocab_size))
        seq_times.append(time.perf_counter() - t0)
        for c, n in zip(caches, lengths):
            model.crop(c, n)
        t0 = time.perf_counter()
        drafts = [_draft(parents, n, model.vocab_size) for n in lengths]
        model.forward_batch(caches, [d[0] for d in drafts], [d[1] for d in drafts])
        bat_times.append(time.perf_counter() - t0)
    seq, bat = statistics.median(seq_times), statistics.median(bat_times)
    return {"batch": batch, "sequential_ms": 1000 * seq, "batched_ms": 1000 * bat,
            "batched_per_draft_ms": 1000 * bat / batch, "ratio": bat / seq}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=None, help="model directory (default: the cached SmolLM2 target)")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--context", type=int, default=96)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--batches", default="1,2,3,4,6,8")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.target is None:
        from specsched.runtime.models.registry import resolve_pair
        args.target = resolve_pair(None, None)[0]
    torch.manual_seed(0)
    model = HFModel(args.target, args.dtype)
    print(f"target {args.target} · {args.dtype} · context {args.context} · {torch.get_num_threads()} threads")
    rows = []
    for shape, parents in SHAPES.items():
        model.forward(model.new_cache(), list(range(2, 32)))  # warm-up
        print(f"\n{shape}: {len(parents)} draft tokens per sequence")
        print(f"{'B':>3} {'sequential ms':>14} {'batched ms':>11} {'per draft ms':>13} {'batched/seq':>12}")
        for b in (int(x) for x in args.batches.split(",")):
            r = {"shape": shape, **measure(model, b, parents, args.context, args.reps)}
            rows.append(r)
            print(f"{b:>3} {r['sequential_ms']:>14.1f} {r['batched_ms']:>11.1f} "
                  f"{r['batched_per_draft_ms']:>13.1f} {r['ratio']:>12.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "dtype": args.dtype, "context": args.context, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
