"""Which target features should the feature draft read? An ablation on the teacher's answers, from scratch.

Two (or three) drafts of the shipped shape (runtime/models/feature_draft.py) are trained for the same steps on
the same answer shards, and measured on held-out shards, teacher-forced:

- `top`: today's recipe (feature_train.py): entry e reads g_e = f_{e-1}, the target's last hidden state;
  loss KL(p || q) + 0.5 · smooth-L1(f̂, f); the second pass reads the first pass's f̂.
- `top3`: the same input, EAGLE-3's training (Li et al. 2025, arXiv:2503.01840): KL only, and the second
  pass reads the layer's own output h (before its output norm), not a predicted feature.
- `fused`: EAGLE-3's input: g_e = W_fuse [l_{e-1} ; m_{e-1} ; f_{e-1}], a low, a middle and the top
  feature of the target (each scaled to unit RMS over the data), trained as `top3`.

Measured on every answer position of the held-out shards, with no noise: top-1 agreement with the target's
argmax, pass 1 (the entry reads the target's features: a chain's first drafted token) and pass 2 (the
previous entry's input was the draft's own: its second); and Σ min(p, q) at T = 1 with p the target's full
distribution (the expected acceptance of a sampled first token).

    python benchmarks/feature_fusion.py WORK_DATA [--train 0:20] [--heldout 78:84] [--steps 500]
        [--variants top,fused,top3] [--reference DRAFT_DIR] [--json F]

WORK_DATA holds `features_*.pt` (feature_data.py: the answers and their top features). `--train` takes
comma-separated shard ranges, `lo:hi` of WORK_DATA or `DIR:lo:hi` of another folder of the same format
(benchmarks/draft_text.py: the distilled draft's answers, the target's features). The low and middle
features are computed here (a forward up to the middle layer, only for `fused`), kept in memory only.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

from specsched.runtime.apps.drafts.training.feature_data import load_target, padded_batches
from specsched.runtime.apps.drafts.training.feature_train import crop
from specsched.runtime.apps.drafts.training.train import warmup_cosine
from specsched.runtime.models.draft_files import WEIGHTS_FILE
from specsched.runtime.models.feature_draft import load_feature_draft, new_feature_draft, shifted
from specsched.runtime.models.pull import pull
from specsched.runtime.models.registry import distilled_draft_dir

LAYERS = (2, 14)  # outputs of these decoder layers (of 30) are the low and middle features


class Enough(Exception):
    """Raised by the hook on the last layer wanted: the layers above it are not run."""


@torch.inference_mode()
def features(model, records: list[dict], keep: int, parts: bool = True) -> list[dict]:
    """Each record (with its top feature `feats`, the last hidden state, from feature_data.py's shards) cropped
    to `keep` prompt tokens before its answer, as `top` [n, d] and `parts` [n, 2, d] (the outputs of LAYERS),
    fp16. The forward stops after the last of LAYERS; without `parts` it is not run and `parts` are zeros."""
    if not parts:
        out = [crop(r, keep) for r in records]
        return [{"ids": c["ids"], "start": c["start"], "top": c["feats"],
                 "parts": torch.zeros((len(c["ids"]), len(LAYERS), c["feats"].shape[1]), dtype=torch.float16)}
                for c in out]
    got: dict[int, torch.Tensor] = {}

    def hook(module, args, output, i):
        got[i] = output
        if i == max(LAYERS):
            raise Enough
    hooks = [model.model.layers[i].register_forward_hook(lambda m, a, out, i=i: hook(m, a, out, i))
             for i in LAYERS]
    out: dict[int, dict] = {}
    try:
        for group, ids, mask in padded_batches(records, 8):
            try:
                model.model(input_ids=ids, attention_mask=mask)
            except Enough:
                pass
            parts = torch.stack([got[k] for k in LAYERS], 2)
            for j, i in enumerate(group):
                c = crop(records[i], keep)
                n, cut = len(records[i]["ids"]), len(records[i]["ids"]) - len(c["ids"])
                out[i] = {"ids": c["ids"], "start": c["start"], "top": c["feats"], "parts": parts[j, cut:n].half()}
    finally:
        for h in hooks:
            h.remove()
    return [out[i] for i in range(len(records))]


def collate(records: list[dict], max_len: int) -> dict[str, torch.Tensor]:
    n = min(max(len(r["ids"]) for r in records), max_len)
    b, d = len(records), records[0]["top"].shape[1]
    batch = {"ids": torch.zeros((b, n), dtype=torch.long), "top": torch.zeros((b, n, d)),
             "parts": torch.zeros((b, n, len(LAYERS), d)), "answer": torch.zeros((b, n)),
             "prompt": torch.zeros((b, n))}
    for i, r in enumerate(records):
        m = min(len(r["ids"]), n)
        batch["ids"][i, :m] = r["ids"][:m].long()
        batch["top"][i, :m] = r["top"][:m].float()
        batch["parts"][i, :m] = r["parts"][:m].float()
        batch["prompt"][i, :max(0, min(r["start"] - 1, m - 1))] = 1
        batch["answer"][i, max(0, r["start"] - 1):m - 1] = 1
    return batch


class Variant(nn.Module):
    """A draft of the shipped shape and the way it reads features."""

    def __init__(self, kind: str, draft, scales: torch.Tensor) -> None:
        super().__init__()
        self.kind, self.draft = kind, draft
        d = draft.cfg.hidden
        self.register_buffer("scales", scales)  # RMS of (low, middle, top) over the data
        if kind == "fused":
            self.fuse = nn.Linear(3 * d, d, bias=False)
            with torch.no_grad():  # starts as the top feature, at its own scale
                self.fuse.weight.normal_(std=0.02 / (3 * d) ** 0.5)
                self.fuse.weight[:, 2 * d:] += torch.eye(d) * scales[2]

    def entry_features(self, batch: dict, noise: float, gen: torch.Generator | None) -> torch.Tensor:
        if self.kind != "fused":
            g = batch["top"] / self.scales[2]
        else:
            g = torch.cat((batch["parts"], batch["top"][:, :, None]), 2) / self.scales[:, None]
        if noise:
            g = g + (torch.rand(g.shape, generator=gen) * 2 - 1) * noise
        if self.kind == "fused":
            return self.fuse(g.flatten(2))
        return g * self.scales[2]

    def passes(self, batch: dict, noise: float = 0.0, gen: torch.Generator | None = None):
        """(logits over V', predicted feature) of pass 1, then of pass 2."""
        dr, ids = self.draft, batch["ids"]
        pos = torch.arange(ids.shape[1]).expand_as(ids)
        g = shifted(self.entry_features(batch, noise, gen))
        out = []
        for _ in range(2):
            h, _ = dr.body(dr.fc(torch.cat((g, dr.embed[ids]), -1)), pos)
            f_hat = dr.out_norm(h)
            out.append((dr.logits(f_hat), f_hat))
            g = shifted(f_hat if self.kind == "top" else h)
        return out


def loss(v: Variant, batch: dict, scale: float, gen: torch.Generator) -> torch.Tensor:
    w = batch["answer"] + 0.2 * batch["prompt"]
    with torch.no_grad():
        logp = torch.log_softmax(v.draft.logits(batch["top"]), -1)
    total = 0.0
    for k, (logits, f_hat) in enumerate(v.passes(batch, 0.1, gen)):
        logq = torch.log_softmax(logits, -1)
        per = (logp.exp() * (logp - logq)).sum(-1)
        if v.kind == "top":
            per = per + 0.5 * F.smooth_l1_loss(f_hat / scale, batch["top"] / scale, reduction="none",
                                               beta=0.5).mean(-1)
        total = total + (1.0 if k == 0 else 0.5) * (per * w).sum() / w.sum()
    return total


@torch.no_grad()
def measure(v: Variant, records: list[dict], head: torch.Tensor) -> dict:
    """Teacher-forced on the answer positions: top-1 agreement of passes 1 and 2, Σ min(p, q) of pass 1."""
    v.eval()
    hits, overlap, n = [0.0, 0.0], 0.0, 0.0
    for b in range(0, len(records), 8):
        batch = collate(records[b:b + 8], 1 << 14)
        a = batch["answer"].bool()
        p = torch.softmax(batch["top"] @ head.T, -1)[a]  # the target's full distribution
        want = p.argmax(-1)
        for k, (logits, _) in enumerate(v.passes(batch)):
            hits[k] += float((v.draft.vocab_ids[logits[a].argmax(-1)] == want).sum())
            if k == 0:
                q = torch.softmax(logits[a], -1)
                overlap += float(torch.minimum(p[:, v.draft.vocab_ids], q).sum())
        n += float(a.sum())
    v.train()
    return {"top1_pass1": round(hits[0] / n, 4), "top1_pass2": round(hits[1] / n, 4),
            "accept_T1_pass1": round(overlap / n, 4), "positions": int(n)}


def shards(folder: Path, spans: str) -> list[dict]:
    """The records of `spans`: comma-separated `lo:hi` shard ranges of `folder`, or `DIR:lo:hi` of another."""
    out = []
    for span in spans.split(","):
        where, lo, hi = span.rsplit(":", 2) if span.count(":") >= 2 else (folder, *span.split(":"))
        out += [r for s in range(int(lo), int(hi))
                for r in torch.load(Path(where) / f"features_{s:05d}.pt", weights_only=True)["records"]]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--train", default="0:20")
    ap.add_argument("--heldout", default="78:84", help="shards 73-83 are held out from the shipped draft too")
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--keep", type=int, default=64, help="prompt tokens kept before each answer")
    ap.add_argument("--variants", default="top,top3,fused")
    ap.add_argument("--reference", type=Path, action="append", default=[],
                    help="a trained feature draft (of today's shape) measured the same way, without training")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    target = pull()
    model, _ = load_target(target)
    t0 = time.time()
    fused = "fused" in args.variants.split(",")
    train_recs = features(model, shards(args.data, args.train), args.keep, fused)
    held = features(model, shards(args.data, args.heldout), args.keep, fused)
    head = model.lm_head.weight.detach().float()
    print(f"features of {len(train_recs)} + {len(held)} answers in {time.time() - t0:.0f} s", flush=True)
    del model
    sample = (train_recs or held)[:64]
    scales = torch.stack([torch.cat([r["parts"][:, j].float() for r in sample]).pow(2).mean().sqrt()
                          for j in range(len(LAYERS))] +
                         [torch.cat([r["top"].float() for r in sample]).pow(2).mean().sqrt()])
    vocab = load_file(str(distilled_draft_dir() / WEIGHTS_FILE))["vocab_ids"].long()
    result = {"train": args.train, "heldout": args.heldout, "steps": args.steps, "batch": args.batch,
              "lr": args.lr, "layers": LAYERS, "train_answers": len(train_recs), "heldout_answers": len(held)}
    for path in args.reference:
        result[str(path)] = measure(Variant("top", load_feature_draft(path, target), scales), held, head)
        print(path, result[str(path)], flush=True)
    for kind in filter(None, args.variants.split(",")):
        v = Variant(kind, new_feature_draft(target, vocab), scales)
        params = [p for p in v.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
        t0 = time.time()
        for step in range(args.steps):
            rng = random.Random(step)  # the same batches for every variant
            batch = collate(rng.sample(train_recs, args.batch), 512)
            for group in opt.param_groups:
                group["lr"] = warmup_cosine(step, lr=args.lr, warmup=50, steps=args.steps)
            lo = loss(v, batch, float(scales[2]), torch.Generator().manual_seed(step))
            opt.zero_grad(set_to_none=True)
            lo.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            if step % 100 == 0:
                print(f"{kind} step {step}: loss {lo.item():.3f}", flush=True)
        result[kind] = {**measure(v, held, head), "train_s": round(time.time() - t0)}
        print(kind, result[kind], flush=True)
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
