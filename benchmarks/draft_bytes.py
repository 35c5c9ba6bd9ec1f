"""What a sampled draft costs on the wire and in acceptance, for drafters whose tokens are looked up.

A serial loop of one sequence at a time, with the runtime's own code on both sides: the drafter a draft
worker builds (`make_drafter`, then `branch_drafter` for --drafter branches | both), the draft's frames
(`Draft.to_frames`, a ZeroMQ ipc PAIR, `unpack`, `Draft.from_message`), and the verifier's `lay_out`, target forward and
`settle` (verify_tree's acceptance plus keeping the accepted path in the cache). Per draft it reports the
bytes of its frames, the seconds from packing to parsing (through the socket), of the forward and of
`settle`; medians over every draft of every prompt. The frames cross a real ZeroMQ ipc socket pair, as
between a draft worker and the verifier.

    python benchmarks/draft_bytes.py [--target smollm2] [--max-new-tokens 48] [--prompts 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time

import numpy as np
import torch
import zmq

from specsched.runtime.backends.hf_backend import HFBackend
from specsched.runtime.bench.workload import prompts as held_out
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import stream
from specsched.runtime.core.wire import unpack
from specsched.runtime.models import corpus_cache
from specsched.scheduler.layout import lane_predictions, lay_out, settle
from specsched.workers.branch_drafter import branch_drafter
from specsched.workers.drafter import make_drafter

ARMS = {  # bench's arms of the same names (runtime/bench/arms.py)
    "seed": {"drafter": "model"},
    "prompt-lookup": {"drafter": "branches", "branches": 0, "corpus_cache": "off"},
    "branches": {"drafter": "branches"},
    "branches-draft": {"drafter": "both"},
}


def decode(config: RunConfig, target, draft_model, prompt: list[int], pipe) -> list[dict]:
    """One sequence, sampled: a row per draft."""
    params, rows = config.sampling, []
    drafter = branch_drafter(config, make_drafter(draft_model, params, stream(config.seed, 0, "draft", 0), prompt,
                                                  k_config=config.tree_shape, lookup=config.draft_lookup), prompt)
    cache, context = target.new_cache(), list(prompt)
    for rnd in range(config.max_new_tokens):
        generated = len(context) - len(prompt)
        if generated >= config.max_new_tokens:
            break
        drafter.rng = stream(config.seed, 0, "draft", generated)
        p = drafter.propose(config.max_new_tokens - generated - 1)
        t0 = time.perf_counter()
        frames = Draft(0, 0, rnd, p.tokens, p.parents, p.q, lanes=p.lanes).to_frames()
        pipe[0].send_multipart(frames, copy=False)
        got = Draft.from_message(unpack(pipe[1].recv_multipart(copy=False)))
        t1 = time.perf_counter()
        layout = lay_out(target, cache, context, got.tokens, got.parents)
        logits = target.forward(cache, layout.tokens, layout.parents, first_row=layout.first_row)
        t2 = time.perf_counter()
        out = settle(target, cache, layout, logits, got.tokens, got.parents, got.q, params,
                     stream(config.seed, 0, "verify", generated), got.lanes)
        t3 = time.perf_counter()
        predictions = lane_predictions(layout, logits, len(got.tokens), got.lanes)
        context += out.tokens
        drafter.observe(out.tokens, out.path, 0, None if predictions is None else predictions.tolist())
        rows.append({"bytes": sum(len(memoryview(f)) for f in frames), "candidates": got.candidates, "wire_s": t1 - t0,
                     "forward_s": t2 - t1, "settle_s": t3 - t2, "committed": len(out.tokens)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = RunConfig(backend="hf", target=args.target, draft=args.target, mode="seed", lookup=4,
                     temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    backend = HFBackend(base)
    target, draft_model, tokenizer = backend.target(), backend.draft(), backend.tokenizer()
    shipped = corpus_cache.resolve("auto", backend)
    texts = held_out("hf", args.prompts)
    ctx, folder = zmq.Context(), tempfile.mkdtemp()
    pipe = (ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR))
    pipe[1].bind(f"ipc://{folder}/draft")
    pipe[0].connect(f"ipc://{folder}/draft")
    results = {}
    for arm in args.arms.split(","):
        fields = dict(ARMS[arm])
        fields["corpus_cache"] = shipped if fields.get("corpus_cache", "auto") == "auto" else "off"
        config = dataclasses.replace(base, **fields)
        encoded = [tokenizer.encode(text, chat=True) for text in texts]
        rows = [r for prompt in encoded for r in decode(config, target, draft_model, prompt, pipe)]
        med = {k: statistics.median(r[k] for r in rows) for k in ("bytes", "candidates", "wire_s", "forward_s",
                                                                 "settle_s")}
        results[arm] = {"drafts": len(rows), "mean_bytes": float(np.mean([r["bytes"] for r in rows])),
                        "max_bytes": max(r["bytes"] for r in rows),
                        "tokens_per_draft": sum(r["committed"] for r in rows) / len(rows), **med}
        print(f"{arm:15s} drafts {len(rows):4d}  candidates {med['candidates']:5.1f}  bytes median "
              f"{med['bytes']:>10,.0f} mean {results[arm]['mean_bytes']:>10,.0f}  wire {1e3 * med['wire_s']:7.3f} ms"
              f"  forward {1e3 * med['forward_s']:7.2f} ms  settle {1e3 * med['settle_s']:7.3f} ms", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vocab": target.vocab_size, "args": vars(args), "arms": results}, f, indent=1)


if __name__ == "__main__":
    main()
