"""How close to a tie are the target's greedy choices, compared with the rounding between forward shapes?

Greedy speculative decoding emits the target-only tokens only if the target's argmax does not depend
on how its logits were computed. In floating point it can: a forward of k+1 tokens, or of a padded
batch, sums in another order than a forward of one token. Definitions used here:

  step      one greedy decoding step of the target alone (one token per forward, KV cache), step j
            choosing new token j; step 0 is the prompt's prefill, which every mode computes alike,
            so steps 1.. are the ones counted.
  margin    top-1 minus top-2 logit of the target at a step (the 1-token forward's logits).
  diff      at a position, max over the vocabulary of |logit_shape - logit_1token|, where
            logit_shape comes from the runtime's own HFModel (runtime/backends/hf_model.py) fed the same tokens by
              verify   forward of k+1 tokens (last token + the next k greedy tokens), all accepted,
              batched  the same k+1 tokens through forward_batch, left-padded beside another prompt's,
              cropped  k+1 tokens whose draft is wrong after a = 0..k-1 tokens (cycled): the a+1 rows
                       with correct inputs are compared, then the cache is cropped and re-fed.
  D         the largest diff observed (per kind and overall).
A tie can flip the argmax only at a step whose margin is below about 2 x diff; the report counts steps
with margin < D, 2D, 10D and 100D, and the positions where a shape's argmax actually differed.

    python benchmarks/fp_margins.py [--prompts 12] [--max-new 96] [--k 4] [--threads 1] [--json OUT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from specsched.runtime.apps.drafts.training.prompts import heldout_tagged
from specsched.runtime.backends.hf_model import DTYPES, HFModel
from specsched.runtime.models.registry import resolve_target

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("verify", "batched", "cropped")
MEASURED = ["runtime/backends/hf_model.py", "runtime/backends/backend.py", "runtime/models/growing_cache.py",
            "runtime/apps/drafts/training/prompts.py"]


def reference(model: HFModel, prompt: list[int], max_new: int, eos: int) -> tuple[list[int], np.ndarray]:
    """Target-only greedy decoding, one token per forward: the new tokens and each step's logits."""
    cache = model.new_cache()
    rows = [model.forward(cache, prompt)[-1].copy()]
    new = [int(rows[-1].argmax())]
    while len(new) < max_new and new[-1] != eos:
        rows.append(model.forward(cache, new[-1:])[0].copy())
        new.append(int(rows[-1].argmax()))
    return new, np.stack(rows)


def speculate(model: HFModel, prompts, news, refs, k: int, accept, batched: bool) -> list[tuple[np.ndarray, ...]]:
    """Verification forwards fed the reference tokens, like the runtime's target with a draft that is
    right for `accept(i)` tokens at verification i (wrong after): per sequence, each step's diff and
    whether the argmax agreed (NaN / True at step 0, never recomputed)."""
    caches = [model.new_cache() for _ in prompts]
    for c, p in zip(caches, prompts):
        model.forward(c, p)  # prefill: cache = context minus its last token
    js = [1] * len(prompts)  # next step to verify; the context ends with new[j - 1]
    diff = [np.full(len(n), np.nan) for n in news]
    agree = [np.ones(len(n), bool) for n in news]
    i = 0
    while any(j < len(n) for j, n in zip(js, news)):
        feeds, counts = [], []
        for j, new in zip(js, news):
            if j >= len(new):  # this row is done: filler keeps the batch's shape
                feeds.append([new[-1]] * (k + 1))
                counts.append(0)
                continue
            a = min(accept(i), len(new) - 1 - j)
            wrong = [(new[j + a] + 1 + w) % model.vocab_size for w in range(k - a)]
            feeds.append(new[j - 1 : j + a] + wrong)  # last token + a right + k - a wrong draft tokens
            counts.append(a + 1)
        outs = model.forward_batch(caches, feeds) if batched else [model.forward(caches[0], feeds[0])]
        for s, (out, n) in enumerate(zip(outs, counts)):
            j = js[s]
            rows, ref = out[:n], refs[s][j : j + n]
            diff[s][j : j + n] = np.abs(rows - ref).max(axis=1)
            agree[s][j : j + n] = rows.argmax(axis=1) == ref.argmax(axis=1)
            model.crop(caches[s], len(prompts[s]) + j + n - 1)  # keep the accepted tokens (runtime rollback)
            js[s] += n
        i += 1
    return list(zip(diff, agree))


def margins(ref: np.ndarray) -> np.ndarray:
    top2 = np.sort(np.partition(ref, -2, axis=1)[:, -2:], axis=1)
    return top2[:, 1] - top2[:, 0]


def environment(threads: int) -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    # the code measured is the commit's only if the files it runs match it (a shared working tree)
    clean = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", *MEASURED], cwd=ROOT).returncode == 0
    return {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY"), "cpu": cpu, "threads": threads,
            "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "commit": rev.stdout.strip() or None, "measured_files_match_commit": clean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--gsm8k", type=Path, default=ROOT / "../shared/data/gsm8k_test.jsonl")
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    ap.add_argument("--json", type=Path, default=None, help="default: benchmarks/results/fp_margins_<cpu>.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    env = environment(args.threads)
    target = resolve_target(None, progress=False)  # the default preset's target, as `specsched run` loads it
    tok, model = AutoTokenizer.from_pretrained(target), HFModel(str(target), args.dtype)
    prompts = [list(tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False))
               for _, text in heldout_tagged(args.prompts, gsm8k=args.gsm8k)]
    kinds = {kind: ([], []) for kind in KINDS}  # per-step diffs, argmax agreement
    all_margins: list[np.ndarray] = []
    smallest: list[dict] = []
    t0 = time.perf_counter()
    for first in range(0, len(prompts), 2):
        pair = [first, (first + 1) % len(prompts)]
        runs = [reference(model, prompts[p], args.max_new, model.eos_token_id) for p in pair]
        news, refs = [r[0] for r in runs], [r[1] for r in runs]
        per = {"batched": speculate(model, [prompts[p] for p in pair], news, refs, args.k, lambda i: args.k, True)}
        counted = 2 if first + 1 < len(prompts) else 1  # an odd last prompt is batched beside prompt 1
        for s in range(counted):
            ps, ns, rs = [prompts[pair[s]]], [news[s]], [refs[s]]
            per[f"verify{s}"] = speculate(model, ps, ns, rs, args.k, lambda i: args.k, False)[0]
            per[f"cropped{s}"] = speculate(model, ps, ns, rs, args.k, lambda i: i % args.k, False)[0]
            m = margins(refs[s])[1:]
            all_margins.append(m)
            got = {kind: per[kind][s] if kind == "batched" else per[f"{kind}{s}"] for kind in KINDS}
            for kind, (d, a) in got.items():
                kinds[kind][0].append(d[1:])
                kinds[kind][1].append(a[1:])
            for step in np.argsort(m)[:3]:
                smallest.append({"prompt": pair[s], "step": int(step) + 1, "margin": float(m[step]),
                                 **{f"diff_{kind}": float(got[kind][0][step + 1]) for kind in KINDS}})
            print(f"prompt {pair[s] + 1}/{len(prompts)}: {len(news[s])} tokens, min margin {m.min():.3g}, diff "
                  + " ".join(f"{kind} {got[kind][0][1:].max():.3g}" for kind in KINDS)
                  + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
    m = np.concatenate(all_margins)
    result = {**env, "dtype": args.dtype, "prompts": args.prompts, "max_new": args.max_new, "k": args.k,
              "steps": int(m.size), "kinds": {}}
    for kind, (d, a) in kinds.items():
        d = np.concatenate(d)
        result["kinds"][kind] = {"positions": int(d.size), "max": float(d.max()),
                                 "p99.9": float(np.percentile(d, 99.9)), "median": float(np.median(d)),
                                 "argmax_disagreements": int((~np.concatenate(a)).sum())}
    big = max(v["max"] for v in result["kinds"].values())
    result["D"] = big
    result["margin_min"] = float(m.min())
    result["margin_min_over_D"] = float(m.min() / big) if big else None
    result["margin_median"] = float(np.median(m))
    result["margins_below"] = {f"{f}D": {"count": int((m < f * big).sum()), "fraction": float((m < f * big).mean())}
                               for f in (1, 2, 10, 100)}
    result["smallest_margins"] = sorted(smallest, key=lambda r: r["margin"])[:8]
    print(f"\n{env['cpu']} | {env['cpu_capability']} | torch {env['torch']} | {args.threads} thread(s) | "
          f"{env['date']} | {env['commit']}" + ("" if env["measured_files_match_commit"] else " (modified)"))
    print(f"{'kind':<8} {'positions':>9} {'max diff':>10} {'p99.9':>10} {'median':>10} {'argmax !=':>9}")
    for kind, v in result["kinds"].items():
        print(f"{kind:<8} {v['positions']:>9} {v['max']:>10.3g} {v['p99.9']:>10.3g} {v['median']:>10.3g} "
              f"{v['argmax_disagreements']:>9}")
    print(f"\n{m.size} greedy steps, D = {big:.3g}, smallest margin {m.min():.3g} (= {m.min() / big:.0f} D), "
          f"median margin {np.median(m):.3g}")
    for key, v in result["margins_below"].items():
        print(f"  margin < {key:<4} {v['count']:>5} steps ({100 * v['fraction']:.2f}%)")
    out = args.json or ROOT / "benchmarks/results" / f"fp_margins_{env['cpu_capability'].lower()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
