"""Does the feature draft's restricted vocabulary cost acceptance? A trained draft measured with wider ones.

The draft's logits are f̂ · W_lm[V']ᵀ over the target's own LM-head rows on V' (4,096 ids), so V' can be
widened without training: the rows of more ids are the target's. Here V' is extended by the ids the target
emits most often in the committed teacher answers of the draft's training shards (`--train-shards`), up to
each size in `--sizes` (the last may be the whole vocabulary), and the same draft is measured teacher-forced
on held-out shards as benchmarks/feature_fusion.py measures (pass 1 and 2 top-1 agreement with the target's
argmax, Σ min(p, q) at T = 1). Also printed: the share of the target's argmax and of its probability mass
that lies outside V' on those positions (the ceiling a wider V' could lift).

    python benchmarks/feature_vocab.py WORK_DATA [--heldout 78:84] [--draft DIR] [--sizes 4096,6144,...]
        [--answers benchmarks/teacher/feature_answers.npz] [--train-shards 0:73] [--json F]

WORK_DATA holds `features_*.pt` of the held-out shards (feature_data.py's format).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from feature_fusion import Variant, features, measure, shards

from specsched.runtime.apps.drafts.training.feature_data import load_target
from specsched.runtime.models.feature_draft import load_feature_draft
from specsched.runtime.models.pull import pull
from specsched.runtime.models.registry import ASSETS


def emitted(answers: Path, lo: int, hi: int, vocab: int) -> np.ndarray:
    """How often each id is an answer token of shards lo..hi-1 of the committed teacher answers."""
    data = np.load(answers)
    ids, offsets, starts, shards = (data[k] for k in ("ids", "offsets", "starts", "shards"))  # each read decompresses
    count = np.zeros(vocab, dtype=np.int64)
    for row in np.nonzero((shards >= lo) & (shards < hi))[0]:
        np.add.at(count, ids[offsets[row] + starts[row]:offsets[row + 1]], 1)
    return count


def outside(held: list[dict], head: torch.Tensor, vocab_ids: torch.Tensor) -> dict:
    """Share of the target's argmax, and of its probability mass, outside `vocab_ids`, on answer positions."""
    inside = torch.zeros(head.shape[0], dtype=torch.bool)
    inside[vocab_ids] = True
    argmax = mass = n = 0.0
    for r in held:
        p = torch.softmax(r["top"][r["start"] - 1:-1].float() @ head.T, -1)
        argmax += float((~inside[p.argmax(-1)]).sum())
        mass += float(p[:, ~inside].sum())
        n += len(p)
    return {"argmax_outside": round(argmax / n, 4), "mass_outside": round(mass / n, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--heldout", default="78:84")
    ap.add_argument("--draft", type=Path, default=ASSETS / "smollm2-feature")
    ap.add_argument("--sizes", default="4096,6144,8192,12288,49152")
    ap.add_argument("--answers", type=Path, default=Path("benchmarks/teacher/feature_answers.npz"))
    ap.add_argument("--train-shards", default="0:73", help="the draft's training shards: their answers rank the ids")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    target = pull()
    model, _ = load_target(target)
    head = model.lm_head.weight.detach().float()
    held = features(model, shards(args.data, args.heldout), 64, parts=False)
    del model
    lo, hi = map(int, args.train_shards.split(":"))
    count = emitted(args.answers, lo, hi, head.shape[0])
    base = load_feature_draft(args.draft, target).vocab_ids
    taken = set(base.tolist())
    extra = torch.tensor([int(t) for t in np.argsort(-count, kind="stable") if int(t) not in taken])
    result = {"draft": str(args.draft), "heldout": args.heldout, "ranked_by": f"{args.answers} shards {lo}-{hi - 1}",
              "answer_tokens_outside_draft_vocab": round(float(count[~np.isin(np.arange(len(count)), base)].sum()
                                                                / count.sum()), 4),
              "sizes": {}}
    for size in map(int, args.sizes.split(",")):
        draft = load_feature_draft(args.draft, target)
        draft.use_vocab(torch.cat([base, extra[:max(0, size - len(base))]]), head)
        row = {**measure(Variant("top", draft, torch.ones(3)), held, head), **outside(held, head, draft.vocab_ids)}
        result["sizes"][len(draft.vocab_ids)] = row
        print(len(draft.vocab_ids), row, flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
