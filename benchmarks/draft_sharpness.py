"""How sharp should a feature draft's sampled proposals be? Σ min(p, q_β) for q_β = softmax(β · z), teacher-forced.

A sampled drafted token is accepted with probability Σ_x min(p(x), q(x)) (Leviathan et al. 2023), for any q
the verifier is told: so the draft may propose from q_β = softmax(β z / T) instead of softmax(z / T), z its
logits over V', and output still follows the target's p exactly. β > 1 sharpens q, β < 1 flattens it. KL
training fits q to p on average; whether a β ≠ 1 raises the overlap on held-out text is measured here:

- Σ min(p, q_β) at T = 1, p the target's full distribution (its mass outside V' is never accepted), on every
  answer position of the `--fit` shards (to choose β: shards the draft never read) and of `--heldout`;
- pass 1 (the entry reads the target's feature: a chain's first drafted token) and pass 2 (the entry before
  read the draft's own predicted feature: its later ones), as benchmarks/feature_fusion.py measures.

    python benchmarks/draft_sharpness.py WORK [--draft DIR] [--fit 400:410] [--heldout 78:84]
        [--betas 0.8,0.9,1,1.1,1.2,1.3,1.5] [--answers benchmarks/teacher/feature_answers.npz] [--json F]

WORK receives the shards' answers (from the committed answers) and their features (feature_data.py's format),
made here where missing: ~30 s a shard on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from feature_fusion import Variant, collate, features

from specsched.runtime.apps.drafts.training.feature_answers import import_answers, save_atomically
from specsched.runtime.apps.drafts.training.feature_data import features as target_features
from specsched.runtime.apps.drafts.training.feature_data import load_target
from specsched.runtime.models.feature_draft import load_feature_draft
from specsched.runtime.models.pull import pull
from specsched.runtime.models.registry import ASSETS

ANSWERS = Path(__file__).parent / "teacher" / "feature_answers.npz"


def span(text: str) -> list[int]:
    lo, hi = (int(x) for x in text.split(":"))
    return list(range(lo, hi))


def records(work: Path, shards: list[int], model) -> list[dict]:
    """The shards' records with the target's features, each computed once into WORK."""
    out = []
    for s in shards:
        path = work / f"features_{s:05d}.pt"
        if not path.exists():
            t0 = time.time()
            recs = target_features(model, torch.load(work / f"answers_{s:05d}.pt", weights_only=True)["records"])
            save_atomically({"records": recs}, path)
            print(f"features of shard {s} in {time.time() - t0:.0f} s", flush=True)
        out += torch.load(path, weights_only=True)["records"]
    return out


@torch.no_grad()
def overlaps(v: Variant, recs: list[dict], head: torch.Tensor, betas: list[float]) -> dict:
    """Σ min(p, q_β) per answer position, passes 1 and 2, for each β."""
    total = {(k, b): 0.0 for k in range(2) for b in betas}
    n = 0.0
    for i in range(0, len(recs), 8):
        batch = collate(recs[i:i + 8], 1 << 14)
        a = batch["answer"].bool()
        p = torch.softmax(batch["top"][a] @ head.T, -1)[:, v.draft.vocab_ids]  # the target's p, on V' only
        for k, (logits, _) in enumerate(v.passes(batch)):
            z = logits[a]
            for b in betas:
                total[k, b] += float(torch.minimum(p, torch.softmax(b * z, -1)).sum())
        n += float(a.sum())
    return {"positions": int(n), **{f"pass{k + 1}": {str(b): round(total[k, b] / n, 4) for b in betas}
                                    for k in range(2)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path)
    ap.add_argument("--draft", type=Path, default=ASSETS / "smollm2-feature")
    ap.add_argument("--fit", default="400:410", help="shards the draft never read, to choose β on")
    ap.add_argument("--heldout", default="78:84", help="held out from every shipped feature draft")
    ap.add_argument("--betas", default="0.8,0.9,1,1.1,1.2,1.3,1.5")
    ap.add_argument("--answers", type=Path, default=ANSWERS)
    ap.add_argument("--keep", type=int, default=64, help="prompt tokens kept before each answer")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    betas = [float(b) for b in args.betas.split(",")]
    import_answers(args.answers, args.work)
    target = pull()
    model, _ = load_target(target)
    head = model.lm_head.weight.detach().float()
    sets = {"fit": span(args.fit), "heldout": span(args.heldout)}
    recs = {name: features(model, records(args.work, s, model), args.keep, parts=False) for name, s in sets.items()}
    del model
    sample = recs["fit"][:64]
    scale = torch.cat([r["top"].float() for r in sample]).pow(2).mean().sqrt()
    v = Variant("top", load_feature_draft(args.draft, target), torch.stack([scale, scale, scale]))
    result = {"draft": str(args.draft), "betas": betas, **{f"{k}_shards": args.__dict__[k] for k in sets}}
    for name in sets:
        result[name] = overlaps(v, recs[name], head, betas)
        print(name, json.dumps(result[name]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
