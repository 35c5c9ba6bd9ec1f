"""A Tree-of-Thoughts run from `specsched run` (tot_cli.py: its flags): the problems, the search settings, the
trees built on one engine."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from pathlib import Path

from rich.console import Console

from ...core.config import BackendKind, ConfigError, RunConfig
from ...engine.engine import Engine
from ...engine.provenance import provenance
from ...models.registry import DEFAULT as DEFAULT_PAIR
from ...models.registry import PRESETS, default_draft_name
from ..run.app import run
from ..run.exits import EXIT_FAILED, EXIT_INTERRUPTED, fail, stopped_status
from ..run.trace import write_trace
from ..view.live import choose_view
from ..view.monitor import Monitor
from ..view.usage import UsageSampler
from .search import SearchConfig, search
from .task import Problem, Task
from .task_registry import get_task, load_problems
from .tot_cli import DEFAULT_TASK, PAPER_TEMPERATURE, tree_flag, tree_sampling
from .tree import Tree
from .tree_report import summary


def search_config(args: argparse.Namespace) -> SearchConfig:
    if args.thoughts is not None and args.workers and args.thoughts != args.workers:
        raise ConfigError(f"--thoughts {args.thoughts} and --workers {args.workers} disagree: a tree runs one "
                          "draft worker per thought; give one of them")
    thoughts = args.thoughts if args.thoughts is not None else args.workers or 3
    breadth, limit = tree_flag(args, "breadth"), tree_flag(args, "limit")
    for flag, value in (("--thoughts", thoughts), ("--breadth", breadth), ("--limit", limit)):
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps must be at least 1, got {args.steps}")
    if tree_flag(args, "problem") < 0:
        raise ConfigError(f"--problem must be >= 0, got {args.problem}")
    for what in ("thought", "eval", "answer"):
        value = getattr(args, f"{what}_tokens")
        if value is not None and value < 1:
            raise ConfigError(f"--{what}-tokens must be at least 1, got {value}")
    decoding = args.thought_decoding or "sample"
    if decoding not in ("sample", "beam", "dsbd"):
        raise ConfigError(f"--thought-decoding must be sample, beam or dsbd, got {decoding!r}")
    return SearchConfig(thoughts, args.steps, breadth, args.thought_tokens, args.eval_tokens, args.answer_tokens,
                        decoding)


def problems(task: Task, args: argparse.Namespace) -> list[Problem]:
    pool = load_problems(task, Path(args.data)) if args.data else task.samples()
    first = tree_flag(args, "problem")
    chosen = pool[first : first + tree_flag(args, "limit")]
    if not chosen:
        raise ConfigError(f"--problem {first} is out of range: {len(pool)} problem(s) available")
    return chosen


def cmd_tot(args: argparse.Namespace, console: Console, base: RunConfig) -> int:
    task = get_task(args.task or DEFAULT_TASK)
    cfg = search_config(args)
    todo = problems(task, args)
    base = base.replace(**tree_sampling(args))
    return build_trees(args, console, task, todo, base, cfg, note=about_the_model(base))[1]


def about_the_model(config: RunConfig) -> str:
    """What the tree is sampled at and, on a preset's target, what that model can do: read before the tree."""
    s = config.sampling
    cuts = ([f"top-k {s.top_k}"] if s.top_k else []) + ([f"top-p {s.top_p:g}"] if s.top_p < 1 else [])
    if config.sampling.temperature <= 0:
        first = "Thoughts decoded greedily"
    else:
        first = f"Thoughts sampled at T = {config.sampling.temperature:g}" + "".join(f", {c}" for c in cuts)
    paper = config.sampling.temperature == PAPER_TEMPERATURE and not cuts
    lines = [first + ("." if paper else " (the SEED paper's T = 1: --temperature 1).")]
    preset = PRESETS.get(config.target or DEFAULT_PAIR) if config.backend != BackendKind.SIM else None
    if preset and preset.limits:
        lines.append(preset.limits)
    return "\n".join(lines)


def build_trees(args: argparse.Namespace, console: Console, task: Task, todo: list[Problem], base: RunConfig,
                cfg: SearchConfig, *, note: str = "") -> tuple[list[Tree], int]:
    """A tree per problem on one engine, each printed as it ends, written to --json; with the status the
    command ends with. `args` gives --json, --trace and --no-live; `note` is printed once the input has passed
    the engine's checks (bad input prints its one line alone). `run` and `rerun` both end here."""
    if cfg.thought_decoding == "dsbd" and base.draft is None and base.backend != BackendKind.SIM:
        # one engine, one draft: beams carry no target features, so every phase drafts with the preset's
        # distilled draft (None: the preset's default draft is one already)
        base = dataclasses.replace(base, draft=default_draft_name(base.target, features=False))
    # policy, models, vocabularies, a phase's workers: checked before any process starts, then one engine
    # for every phase
    try:
        # a tree's prompts grow level by level: a phase past the target's positions runs as the model reads it
        # (a small target's blocksworld evaluations do), rather than stopping a tree half built
        engine = Engine(dataclasses.replace(base, prompts=["check"], workers=cfg.thoughts), refuse_overlong=False)
    except KeyboardInterrupt:
        fail("interrupted (Ctrl-C) before any process started")
        return [], EXIT_INTERRUPTED
    if note:
        console.print(note, style="dim", highlight=False, markup=False)
    trees: list[Tree] = []
    try:
        for problem in todo:
            tree = search(task, problem, base, cfg, _phase_runner(args, console, engine), engine.tokenizer.chat_text)
            trees.append(tree)
            console.print(summary(tree))
            if tree.status != "ok":
                break
    finally:
        engine.close()
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"config": base.to_dict(), "search": dataclasses.asdict(cfg), "provenance": provenance(base),
                 "engine": {"models_loaded": engine.models_loaded}, "trees": [t.to_json() for t in trees]},
                indent=1,
            )
        )
    checked = [t.correct for t in trees if t.correct is not None]
    if len(trees) > 1 and checked:
        console.print(f"[bold]accuracy {sum(checked)}/{len(checked)}[/]")
    failed = next((t for t in trees if t.status != "ok"), None)
    if failed is None:
        return trees, 0

    fail(f"{failed.error}; the tree built so far is shown above")
    if failed.status == "failed":
        return trees, EXIT_FAILED
    return trees, stopped_status(failed.stopped_by)


def _phase_runner(args: argparse.Namespace, console: Console, engine):
    """A phase = one job on the tree's engine, under its own live view (or progress lines), titled with
    where it is."""
    count = 0

    def run_phase(config: RunConfig, label: str):
        nonlocal count
        usage = UsageSampler(lanes=config.lanes.processes)
        view = choose_view(console, Monitor(config, usage, label=label), enabled=not args.no_live, transient=True)
        on_update = view.update if view else (lambda c: usage.sample(c.processes)) if args.trace else None
        with view or contextlib.nullcontext():
            record = run(config, on_update=on_update, engine=engine)
        m = record.metrics
        alpha = "" if m.acceptance_rate is None else f", α {m.acceptance_rate:.2f}"
        startup = f", start-up {m.startup_s:.1f} s" if m.startup_s >= 0.05 else ""  # models load once: a warm phase
        console.print(f"{label}: {m.tokens} tokens in {m.wall_s:.1f} s ({m.tokens_per_s:.1f} tok/s{alpha}{startup})",
                      highlight=False, markup=False)
        if args.trace:
            path = Path(args.trace)
            slug = label.split(" · ", 1)[-1].replace(" · ", "-").replace("/", "of").replace(" ", "")
            write_trace(record, path.with_name(f"{path.stem}.{count:02d}-{slug}{path.suffix or '.json'}"), usage.series)
        count += 1
        return record

    return run_phase
