"""`specsched models distill`: the whole recipe for the shipped draft, resumable stage by stage.

1. teacher: the target answers ToT prompts (shards), then labels public-corpus passages (shards);
2. train: forward-KL distillation into a narrow draft (checkpointed every couple of minutes);
3. evaluate: the quality bar on held-out prompts (written to eval.json);
4. ship (optional): copy the trained draft into the package's assets.
Rerunning the same command skips finished shards and resumes training from its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from ...core.config import ConfigError
from ...models.draft_model import load_draft
from ...models.pull import pull
from ...models.registry import distilled_draft_dir
from .evaluation.evaluate import evaluate
from .models_cli import add_distill_arguments, check_distill_args
from .training.publish import ship
from .training.teacher import TeacherConfig, generate, label_corpus
from .training.train import TrainConfig, train


def distill(
    work: Path,
    *,
    gen_batches: int = 10,
    steps: int = 300,
    batch: int = 8,
    eval_prompts: int = 24,
    eval_max_new: int = 128,
    gsm8k: Path | None = None,
    ship_to: Path | None = None,
    log=print,
) -> dict:
    """Run (or resume) every stage under `work`; returns the evaluation result."""
    t0 = time.time()
    target = pull()
    tcfg = TeacherConfig(target=target, out=work / "teacher", gen_batches=gen_batches)
    generate(tcfg, log=log)
    label_corpus(tcfg, log=log)
    tr = TrainConfig(data=tcfg.out, out=work / "train", target=target, steps=steps, batch=batch)
    final = train(tr, log=log)
    eval_file = work / f"eval_{steps}.json"
    if eval_file.exists():
        result = json.loads(eval_file.read_text())
    else:
        draft = load_draft(final, torch.float32, target_dir=target)
        result = evaluate(target, draft, prompts=eval_prompts, max_new=eval_max_new, gsm8k=gsm8k, log=log)
        eval_file.write_text(json.dumps(result, indent=2) + "\n")
    log(json.dumps(result, indent=2))
    if ship_to is not None:
        ship(final, ship_to)
        log(f"shipped {final} -> {ship_to}")
    log(f"distill: {(time.time() - t0) / 60:.1f} min this run")
    return result


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m specsched.runtime.apps.drafts.distill WORK ...`), same flags as the CLI."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_distill_arguments(ap)
    args = ap.parse_args(argv)
    try:
        check_distill_args(args)
    except ConfigError as e:
        ap.error(str(e))  # exit 2 before the target is pulled
    return run(args)


def run(args) -> int:
    torch.set_num_threads(args.threads)

    def log(msg: str) -> None:
        print(msg, flush=True)

    result = distill(
        args.work,
        gen_batches=args.gen_batches,
        steps=args.steps,
        batch=args.batch,
        eval_prompts=args.eval_prompts,
        eval_max_new=args.eval_max_new,
        gsm8k=args.gsm8k,
        ship_to=distilled_draft_dir() if args.ship else None,
        log=log,
    )
    return 0 if all(result["passes"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
