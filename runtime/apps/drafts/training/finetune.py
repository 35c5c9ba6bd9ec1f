"""Continue distilling a draft on teacher answers to varied-wording prompts (how the shipped draft was made).

1. teacher: the target answers `varied_prompts` (greedy and T = 0.7 shards alternating), written as
   `WORK/varied/gen_*.pt` (and, with --richer-shards, the richer list as `WORK/richer/gen_*.pt`),
   resumable shard by shard;
2. train: from the given draft, each batch mixes the new answers, the earlier teacher shards and the
   public corpus; the loss is `train.kd_loss` (forward KL on the teacher's top-8, plus --hard times the
   cross-entropy of its argmax), with a resumable checkpoint.
`python -m specsched.runtime.apps.drafts.training.finetune WORK --data OLD_TEACHER_DIR` (see docs/models.md).
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from ....models.draft_model import DraftLM, load_draft, save_draft
from ....models.pull import pull
from ....models.registry import distilled_draft_dir
from .distill_data import collate, load_records, to_example
from .teacher import answer_shards
from .train import kd_step, save_checkpoint, vocab_lut, warmup_cosine
from .varied_prompts import varied_prompts


@dataclass(frozen=True, slots=True)
class FinetuneConfig:
    steps: int = 250
    lr: float = 5e-4
    warmup: int = 10
    new: int = 6  # examples per batch from the varied-wording answers
    old: int = 4  # ... from the earlier teacher shards
    corpus: int = 2  # ... from the labelled public corpus
    max_len: int = 448
    seed: int = 77
    hard: float = 0.0  # weight of the teacher-argmax cross-entropy next to the KL (train.kd_loss)
    ckpt_every_s: float = 120.0


def teacher_varied(target: Path, out: Path, *, shards: int = 8, batch: int = 96, max_new: int = 192,
                   seed: int = 404, richer: bool = False, log=print) -> None:
    """Stage 1: `shards` x `batch` varied prompts answered by the target (odd shards sampled at T = 0.7)."""
    answer_shards(target, out, varied_prompts(shards * batch, seed=seed, richer=richer), batch=batch,
                  max_new=max_new, seed0=5000 if richer else 1000, log=log)


def finetune(draft: DraftLM, new: list[dict], old: list[dict], corpus: list[dict], cfg: FinetuneConfig,
             ckpt: Path | None = None, log=print) -> DraftLM:
    """Stage 2: `cfg.steps` AdamW steps on mixed batches. Each batch depends only on (seed, step), so with
    `ckpt` (weights + optimiser + step, written every `cfg.ckpt_every_s`) an interrupted run resumes and
    ends with the same weights as an uninterrupted one."""
    new_ex, old_ex, corpus_ex = ([to_example(r, cfg.max_len) for r in rs] for rs in (new, old, corpus))
    lut = vocab_lut(draft)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.01)
    start = 0
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        if state["recipe"] != _recipe(cfg):
            raise ValueError(f"{ckpt} belongs to another recipe ({state['recipe']}); delete it to start over")
        state["model"].pop("vocab_ids")
        draft.load_state_dict(state["model"], strict=False)
        opt.load_state_dict(state["opt"])
        start = state["step"]
        log(f"resumed at step {start}/{cfg.steps}")
    draft.train()
    t0 = t_ckpt = time.time()
    for step in range(start, cfg.steps):
        rng = random.Random(cfg.seed + step)
        n_new = min(cfg.new, len(new_ex))
        batch = (rng.sample(new_ex, n_new) + rng.sample(old_ex, min(cfg.new + cfg.old - n_new, len(old_ex)))
                 + rng.sample(corpus_ex, min(cfg.corpus, len(corpus_ex))))
        lr = warmup_cosine(step, lr=cfg.lr, warmup=cfg.warmup, steps=cfg.steps)
        loss = kd_step(draft, lut, opt, collate(batch, pad_id=0), lr, cfg.hard)
        if (step + 1) % 50 == 0 or step + 1 == cfg.steps:
            log(f"step {step + 1}/{cfg.steps} loss {loss.item():.3f} "
                f"{(time.time() - t0) / (step + 1 - start):.1f}s/step")
        if ckpt is not None and (time.time() - t_ckpt > cfg.ckpt_every_s or step + 1 == cfg.steps):
            save_checkpoint(ckpt, draft, opt, step + 1, recipe=_recipe(cfg))
            t_ckpt = time.time()
    return draft.eval()


def _first_shards(folder: Path, n: int) -> list[dict]:
    """The records of gen_00000 .. gen_<n-1> (more shards may lie there from a longer run)."""
    return [r for s in range(n) for r in torch.load(folder / f"gen_{s:05d}.pt", weights_only=True)["records"]]


def _recipe(cfg: FinetuneConfig) -> dict:
    """What a checkpoint must agree on to be resumed (everything but how often it is written)."""
    return {k: v for k, v in asdict(cfg).items() if k != "ckpt_every_s"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path, help="varied teacher shards go to WORK/varied, the draft to WORK/final")
    ap.add_argument("--data", type=Path, required=True, help="the earlier teacher shards (gen_*, corpus_*)")
    ap.add_argument("--from", dest="source", type=Path, default=None,
                    help="draft to start from (default: the shipped distilled draft)")
    ap.add_argument("--shards", type=int, default=8, help="varied-wording teacher shards (96 prompts each)")
    ap.add_argument("--richer-shards", type=int, default=0, metavar="N",
                    help="also N shards of the richer prompts (seed 405), into WORK/richer")
    ap.add_argument("--steps", type=int, default=FinetuneConfig.steps)
    ap.add_argument("--hard", type=float, default=FinetuneConfig.hard,
                    help="weight of the teacher-argmax cross-entropy added to the KL (the shipped draft: 0.5)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = pull()
    log = lambda m: print(m, flush=True)  # noqa: E731
    teacher_varied(target, args.work / "varied", shards=args.shards, log=log)
    new = _first_shards(args.work / "varied", args.shards)
    if args.richer_shards:
        teacher_varied(target, args.work / "richer", shards=args.richer_shards, seed=405, richer=True, log=log)
        new += _first_shards(args.work / "richer", args.richer_shards)
    draft = load_draft(args.source or distilled_draft_dir(), torch.float32, target_dir=target)
    old, corpus = load_records(args.data, "gen_*.pt"), load_records(args.data, "corpus_*.pt")
    cfg = FinetuneConfig(steps=args.steps, hard=args.hard)
    finetune(draft, new, old, corpus, cfg, ckpt=args.work / "finetune_ckpt.pt", log=log)
    save_draft(draft, args.work / "final", meta={"finetuned_from": str(args.source or "shipped draft"),
                                                 "steps": cfg.steps, "lr": cfg.lr, "seed": cfg.seed, "hard": cfg.hard,
                                                 "mix": f"{cfg.new} varied + {cfg.old} earlier + {cfg.corpus} corpus",
                                                 "new_records": len(new), "earlier_records": len(old)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
