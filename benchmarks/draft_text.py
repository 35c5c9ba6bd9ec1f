"""Cheaper teacher text: another model answers the feature prompts, the fp32 target only labels them.

The feature draft learns from the target's features and next-token distributions over *text*. Today that
text is the target's own answers, and generating them is ~7x the cost of their features on a CPU
(docs/models.md). Here a cheaper writer answers instead, greedy on even shards and at T = 1 on odd ones, as
feature_data.py does: `draft`, the shipped distilled draft (2 layers, width 360), or `int8`, the target with
its linear layers in dynamic int8 (torch's quantize_dynamic: a 48-row decode step 1.5x faster on 2 cores,
its text close to the target's own). The prompts are feature_data.py's (feature_prompts.py,
seed 2026: shard s here has the prompts of shard s there); one fp32 forward of the target then gives its
features, and so its distribution, at every position. Same record format as feature_data.py, so
benchmarks/feature_fusion.py trains on it (`--train DIR:lo:hi`) and measures on the target's own answers.

    python benchmarks/draft_text.py OUT [--writer draft|int8] [--shards 0:20] [--max-new 192]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from specsched.runtime.apps.drafts.training.feature_answers import save_atomically
from specsched.runtime.apps.drafts.training.feature_data import features, load_target, machine
from specsched.runtime.apps.drafts.training.feature_prompts import feature_prompts
from specsched.runtime.apps.drafts.training.teacher_decode import answer, chat_ids
from specsched.runtime.models.draft_model import load_draft
from specsched.runtime.models.pull import pull
from specsched.runtime.models.registry import distilled_draft_dir

BATCH, SEED = 48, 2026


@torch.inference_mode()
def draft_answers(draft, tok, prompts: list[str], *, sampled: bool, seed: int, max_new: int) -> list[dict]:
    """One left-padded batch decoded by the draft with a KV cache -> {ids, start} per prompt, cut after EOS."""
    eos, gen = tok.eos_token_id, torch.Generator().manual_seed(seed)
    rows = [chat_ids(tok, p) for p in prompts]
    width = max(map(len, rows))
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache()
    logits = draft(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache).logits[:, -1]
    new: list[list[int]] = [[] for _ in rows]
    nxt_pos = pos[:, -1:] + 1
    for _ in range(max_new):
        nxt = (torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen) if sampled
               else logits.argmax(-1, keepdim=True))
        for i, t in enumerate(nxt[:, 0].tolist()):
            if not new[i] or new[i][-1] != eos:
                new[i].append(t)
        if all(n[-1] == eos for n in new):
            break
        mask = torch.cat((mask, torch.ones((len(rows), 1), dtype=mask.dtype)), 1)
        logits = draft(input_ids=nxt, attention_mask=mask, position_ids=nxt_pos, past_key_values=cache).logits[:, -1]
        nxt_pos = nxt_pos + 1
    return [{"ids": torch.tensor(r + n, dtype=torch.int32), "start": len(r)} for r, n in zip(rows, new)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shards", default="0:20")
    ap.add_argument("--max-new", type=int, default=192)
    ap.add_argument("--writer", choices=("draft", "int8"), default="draft")
    args = ap.parse_args(argv)
    lo, hi = map(int, args.shards.split(":"))
    args.out.mkdir(parents=True, exist_ok=True)
    target = pull()
    model, tok = load_target(target)
    if args.writer == "draft":
        writer = load_draft(distilled_draft_dir(), target_dir=target)
    else:
        writer = torch.ao.quantization.quantize_dynamic(load_target(target)[0], {torch.nn.Linear}, dtype=torch.qint8)
    prompts = feature_prompts(hi * BATCH, seed=SEED)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"shards": {}}
    for s in range(lo, hi):
        path = args.out / f"features_{s:05d}.pt"
        if path.exists():
            continue
        t0 = time.time()
        ask = dict(sampled=s % 2 == 1, seed=SEED * 1000 + s, max_new=args.max_new)
        mine = prompts[s * BATCH:(s + 1) * BATCH]
        recs = (draft_answers if args.writer == "draft" else answer)(writer, tok, mine, **ask)
        t1 = time.time()
        save_atomically({"records": features(model, recs)}, path)
        manifest["shards"][str(s)] = {"answer_s": round(t1 - t0, 1), "feature_s": round(time.time() - t1, 1),
                                      "sampled": s % 2 == 1, "rows": len(recs), "machine": machine(),
                                      "writer": args.writer,
                                      "answer_tokens": sum(len(r["ids"]) - r["start"] for r in recs),
                                      "tokens": sum(len(r["ids"]) for r in recs)}
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        print(f"shard {s}: {manifest['shards'][str(s)]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
