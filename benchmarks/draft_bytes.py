"""What a sampled draft costs on the wire and in acceptance when its looked-up tokens are point masses,
against the same draft with each point mass written out as a V-wide δ row (the dense form, which
verify_tree takes too; runtime/core/draft_q.py).

A serial loop of one sequence at a time, with the runtime's own code on both sides: the drafter a draft
worker builds (`make_drafter`, then `branch_drafter` for --drafter branches | both), the draft's frames
(`Draft.to_frames`, a ZeroMQ ipc PAIR, `unpack`, `Draft.from_message`), and the verifier's `lay_out`,
target forward, `verify_tree` and `settle`. Each draft is sent and accepted as it is and written out,
each time the least of three runs taken in turn, acceptance from the same uniforms (the outcomes are equal:
tests/test_point_mass.py); the decoding goes on from the draft as it is. Per draft: bytes, seconds from
packing to parsing, seconds of `verify_tree`; the forward's and `settle`'s seconds for scale. Means and
medians over every draft of every prompt.

    python benchmarks/draft_bytes.py [--target smollm2] [--max-new-tokens 48] [--prompts 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import tempfile
import time

import torch
import zmq

from specsched.runtime.apps.bench.workload import prompts as held_out
from specsched.runtime.backends.hf_pair import HFBackend
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import stream
from specsched.runtime.core.wire import unpack
from specsched.runtime.models import corpus_cache
from specsched.scheduler.acceptance import verify_tree
from specsched.scheduler.layout import lane_predictions, lay_out, settle
from specsched.workers.branch_drafter import branch_drafter
from specsched.workers.drafter_choice import make_drafter

ARMS = {  # bench's arms of the same names (runtime/apps/bench/arms.py)
    "seed": {"drafter": "model"},
    "prompt-lookup": {"drafter": "branches", "branches": 0, "corpus_cache": "off"},
    "branches": {"drafter": "branches"},
    "branches-draft": {"drafter": "both"},
}
COLUMNS = ("candidates", "points", "bytes", "bytes_written", "wire_s", "wire_written_s", "accept_s",
           "accept_written_s", "forward_s", "settle_s")


def written_out(draft: Draft, vocab: int) -> Draft:
    """The same draft with every point mass sent as its δ row (and every row `vocab` wide)."""
    if draft.q is None:
        return draft
    return dataclasses.replace(draft, q=DraftQ.rows(draft.q.written_out(draft.tokens[:draft.candidates], vocab)))


def through(pipe, draft: Draft) -> tuple[Draft, int, float]:
    """`draft` across the socket: as received, its bytes, the seconds from packing to parsing."""
    t0 = time.perf_counter()
    frames = draft.to_frames()
    pipe[0].send_multipart(frames, copy=False)
    got = Draft.from_message(unpack(pipe[1].recv_multipart(copy=False)))
    return got, sum(len(memoryview(f)) for f in frames), time.perf_counter() - t0


def best(measure, forms: tuple, repeats: int = 3) -> list[float]:
    """Seconds of `measure(form)` for each form: the least of `repeats`, the forms taken in turn (neither
    pays a first touch alone)."""
    out = [float("inf")] * len(forms)
    for _ in range(repeats):
        for i, form in enumerate(forms):
            t0 = time.perf_counter()
            measure(form)
            out[i] = min(out[i], time.perf_counter() - t0)
    return out


def accept(d: Draft, logits, params, rng_at) -> None:
    m = d.candidates
    verify_tree(logits[0], logits[1:1 + m], d.tokens[:m], d.parents[:m], d.q, params, rng_at())


def decode(config: RunConfig, target, draft_model, prompt: list[int], pipe) -> list[dict]:
    """One sequence, sampled: a row per draft."""
    params, rows = config.sampling, []
    def model_drafter():
        return make_drafter(draft_model, params, stream(config.seed, 0, "draft", 0), prompt,
                            k_config=config.shape.widths, lookup=config.draft_lookup)

    drafter = branch_drafter(config, model_drafter, prompt, target.vocab_size)
    cache, context = target.new_cache(), list(prompt)
    while (generated := len(context) - len(prompt)) < config.max_new_tokens:
        drafter.rng = stream(config.seed, 0, "draft", generated)
        p = drafter.propose(config.max_new_tokens - generated - 1)
        got, size, _ = through(pipe, Draft(0, 0, 0, p.tokens, p.parents, p.q, lanes=p.lanes))
        forms = (got, written_out(got, target.vocab_size))
        size_written = through(pipe, forms[1])[1]
        wire, wire_written = best(functools.partial(through, pipe), forms)
        t1 = time.perf_counter()
        layout = lay_out(target, cache, context, got.tokens, got.parents)
        logits = target.forward(cache, layout.tokens, layout.parents, first_row=layout.first_row)
        t2 = time.perf_counter()
        rng_at = functools.partial(stream, config.seed, 0, "verify", generated)  # the same uniforms each time
        row = dict(zip(("accept_s", "accept_written_s"),
                       best(functools.partial(accept, logits=logits, params=params, rng_at=rng_at), forms)))
        t3 = time.perf_counter()
        out = settle(target, cache, layout, logits, got.tokens, got.parents, got.q, params, rng_at(), got.lanes)
        t4 = time.perf_counter()
        predictions = lane_predictions(layout, logits, len(got.tokens), got.lanes)
        context += out.tokens
        drafter.observe(out.tokens, out.path, 0, None if predictions is None else predictions.tolist())
        rows.append({**row, "candidates": got.candidates, "points": int(got.q.point.sum()), "bytes": size,
                     "bytes_written": size_written, "wire_s": wire, "wire_written_s": wire_written,
                     "forward_s": t2 - t1, "settle_s": t4 - t3, "committed": len(out.tokens)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="smollm2")
    # this loop hands the drafter no verdicts, so no target features: a draft that reads none
    ap.add_argument("--draft", default="smollm2-distilled")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = RunConfig.of(backend="hf", target=args.target, draft=args.draft, mode="seed", lookup=4,
                        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=0)
    backend = HFBackend(base)
    target, draft_model, tokenizer = backend.target(), backend.draft(), backend.tokenizer()
    shipped = corpus_cache.resolve("auto", backend)
    encoded = [tokenizer.encode(text, chat=True) for text in held_out("hf", args.prompts)]
    ctx, folder = zmq.Context(), tempfile.mkdtemp()
    pipe = (ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR))
    pipe[1].bind(f"ipc://{folder}/draft")
    pipe[0].connect(f"ipc://{folder}/draft")
    results = {}
    for arm in args.arms.split(","):
        fields = dict(ARMS[arm])
        fields["corpus_cache"] = shipped if fields.get("corpus_cache", "auto") == "auto" else "off"
        config = base.replace(**fields)
        rows = [r for prompt in encoded for r in decode(config, target, draft_model, prompt, pipe)]
        results[arm] = {"drafts": len(rows), "median": {k: statistics.median(r[k] for r in rows) for k in COLUMNS},
                        "mean": {k: statistics.fmean(r[k] for r in rows) for k in COLUMNS}}
        r, mean = results[arm]["median"], results[arm]["mean"]
        print(f"{arm:15s} drafts {len(rows):4d}  candidates {mean['candidates']:5.1f} (points {mean['points']:4.1f})  "
              f"mean bytes {mean['bytes_written']:>10,.0f} -> {mean['bytes']:>8,.0f}  medians: "
              f"wire {1e3 * r['wire_written_s']:6.3f} -> {1e3 * r['wire_s']:6.3f} ms  "
              f"verify_tree {1e3 * r['accept_written_s']:6.3f} -> {1e3 * r['accept_s']:6.3f} ms  "
              f"(forward {1e3 * r['forward_s']:6.1f} ms, settle {1e3 * r['settle_s']:6.3f} ms)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vocab": target.vocab_size, "args": vars(args), "arms": results}, f, indent=1)


if __name__ == "__main__":
    main()
