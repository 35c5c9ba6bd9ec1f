"""How often does llama.cpp's batched forward flip a greedy choice of its own one-token decoding?

llama.cpp computes a batch of tokens with other kernels than a single token (a matrix-matrix product
over activations quantised per block, instead of a matrix-vector one), so the logits of one position
depend on how many tokens share its llama_decode. For the default target (the Q4_1 GGUF) this script
measures, over held-out prompts:

  reference  greedy decoding one token per llama_decode (the `ar` arm): the tokens, each step's logits;
  verify     the same tokens fed as a fully accepted draft, k + 1 per llama_decode (the speculative arms);
  batched    the same chunks of two prompts in one llama_decode (the batched arms).

Per shape: D = the largest |logit difference| from the reference at any position, and the positions
where the argmax differs (a *flip*), with the reference's top-1 minus top-2 gap there. Then end to end:
the runtime's greedy `seed` (FCFS) and `parallel` outputs against `ar` on the same engine, sequences
equal or not, and the first step where they part.

    python benchmarks/llamacpp_flips.py [--prompts 12] [--max-new 64] [--k 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
from pathlib import Path

import numpy as np

from specsched.runtime.apps.drafts.training.prompts import heldout_tagged
from specsched.runtime.backends.llamacpp import LlamaModel
from specsched.runtime.backends.llamacpp_backend import LlamaCppBackend
from specsched.runtime.core.config import RunConfig
from specsched.runtime.engine.engine import Engine


def reference(model, prompt, max_new):
    cache = model.new_cache()
    rows = [model.forward(cache, prompt)[-1].copy()]
    new = [int(rows[-1].argmax())]
    while len(new) < max_new and new[-1] != model.eos_token_id:
        rows.append(model.forward(cache, new[-1:])[0].copy())
        new.append(int(rows[-1].argmax()))
    return new, np.stack(rows)


def shaped(model, prompts, news, k, batched):
    """Rows for each step 1.. of every prompt, fed k + 1 reference tokens per llama_decode."""
    caches = [model.new_cache() for _ in prompts]
    out = [[model.forward(c, p)[-1]] for c, p in zip(caches, prompts)] if not batched else \
        [[r[-1]] for r in model.forward_batch(caches, prompts)]
    pos = [0] * len(prompts)
    groups = [[i] for i in range(len(prompts))] if not batched else \
        [list(range(i, min(i + 2, len(prompts)))) for i in range(0, len(prompts), 2)]
    for group in groups:
        while any(pos[i] < len(news[i]) - 1 for i in group):
            live = [i for i in group if pos[i] < len(news[i]) - 1]
            chunks = [news[i][pos[i]:pos[i] + k + 1] for i in live]
            rows = model.forward_batch([caches[i] for i in live], chunks)
            for i, chunk, r in zip(live, chunks, rows):
                out[i].extend(r[:len(chunk)])
                pos[i] += len(chunk)
    return [np.stack(o[:len(news[i])]) for i, o in enumerate(out)]


def compare(refs, news, rows):
    diff, flips = 0.0, []
    for ref, new, got in zip(refs, news, rows):
        n = min(len(ref), len(got))
        diff = max(diff, float(np.abs(got[:n] - ref[:n]).max()))
        for j in range(1, n):  # step 0 is the prefill: every mode computes it alike
            if int(got[j].argmax()) != new[j]:
                top = np.sort(ref[j])[-2:]
                flips.append(round(float(top[1] - top[0]), 5))
    return {"D": round(diff, 5), "flips": len(flips), "flip_gaps": flips}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=12)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default=None, help="as `run --target` (default: the Q4_1 GGUF of the default pair)")
    ap.add_argument("--draft", default=None, help="as `run --draft` (`smollm2` for a SmolLM2 --target directory)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    config = RunConfig(backend="llamacpp", target=args.target, draft=args.draft, max_new_tokens=args.max_new)
    backend = LlamaCppBackend(config)
    tok = backend.tokenizer()
    texts = [t for _, t in heldout_tagged(args.prompts)]
    prompts = [tok.encode(t, chat=True) for t in texts]
    model = LlamaModel(backend.gguf, threads=args.threads)
    refs, news = [], []
    for p in prompts:
        new, rows = reference(model, p, args.max_new)
        news.append(new)
        refs.append(rows)
    gaps = np.concatenate([np.diff(np.sort(r, axis=1)[:, -2:], axis=1)[1:, 0] for r in refs])
    result = {"date": datetime.date.today().isoformat(),
              "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                       text=True).stdout.strip(),
              "gguf": backend.gguf.name, "prompts": len(prompts), "k": args.k,
              "steps": int(sum(len(n) - 1 for n in news)),
              "median_gap": round(float(np.median(gaps)), 4), "gaps_below_0.05": int((gaps < 0.05).sum())}
    for kind, batched in (("verify", False), ("batched", True)):
        result[kind] = compare(refs, news, shaped(model, prompts, news, args.k, batched))
    del model
    end_to_end = {}
    with Engine(RunConfig(backend="llamacpp", target=args.target, draft=args.draft, prompts=texts[:3],
                          max_new_tokens=args.max_new, verifier_threads=args.threads)) as engine:
        for start in range(0, len(texts) - len(texts) % 3, 3):
            group = texts[start:start + 3]
            ar = [s.tokens for s in engine.generate(group, mode="ar").sequences]
            for mode in ("seed", "parallel"):
                got = [s.tokens for s in engine.generate(group, mode=mode).sequences]
                row = end_to_end.setdefault(mode, {"sequences": 0, "differ": 0, "first_step": []})
                for g, a in zip(got, ar):
                    row["sequences"] += 1
                    if g != a:
                        row["differ"] += 1
                        row["first_step"].append(next((j for j, (x, y) in enumerate(zip(g, a)) if x != y),
                                                      min(len(g), len(a))))
    result["end_to_end"] = end_to_end
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
