"""`specsched bench`: its settings from the flags, checked, and the run (bench_cli.py: the parser)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from ...backends.backend import get_backend
from ...core.config import ConfigError, DrafterKind, RunConfig
from ...core.config_checks import MAX_THREADS
from ...engine.stopping import REASONS
from ...models import corpus_cache
from ..run.exits import fail, stopped_status
from ..run.flag_config import CUTS, branch_settings, given
from ..view.console import print_wrote
from . import plot, runner, workload
from .arms import RUNTIME_ARMS, parse_arms, runtime_config
from .bench_cli import DEFAULTS, SMOKE
from .runner import BenchSettings
from .sweep import default_arms, parse_values
from .tables import markdown, print_report


def settings_from_args(args: argparse.Namespace):
    preset = SMOKE if args.smoke else DEFAULTS
    if args.smoke and args.backend not in (None, "sim"):
        raise ConfigError("--smoke runs on the sim backend; drop --backend or --smoke")

    def pick(name: str):
        value = getattr(args, name, None)
        return preset[name] if value is None else value

    workers = pick("workers")
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    if args.values is not None and not args.sweep:
        raise ConfigError("--values needs --sweep")
    if args.sweep == "coupling" and not args.temperature:
        raise ConfigError("--sweep coupling needs --temperature > 0: greedy decoding has no coupling")
    if not 0 <= args.threads <= MAX_THREADS:
        raise ConfigError(f"--threads must be in 0..{MAX_THREADS:,}, got {args.threads}")
    if args.prompts is not None and args.prompts < 1:
        raise ConfigError(f"--prompts must be at least 1, got {args.prompts}")
    if args.arms is not None and not args.arms.strip(","):
        raise ConfigError("--arms is empty: name at least one arm")
    backend = pick("backend")
    texts = workload.prompts(backend, args.prompts or workers, task=args.task if args.sweep != "task" else None)
    base = RunConfig.of(workers=workers, k=args.k, k_config=args.k_config, max_new_tokens=pick("max_new_tokens"),
                        temperature=args.temperature, **given(args, CUTS), coupling=args.coupling,
                        seed=args.seed,
                        backend=backend, target=args.target, draft=args.draft,
                        prompts=workload.per_thought(texts, workers), device=args.device, dtype=args.dtype,
                        verifier_threads=args.threads,
                        lookup=args.lookup, **branch_settings(args))
    arms = parse_arms(args.arms or (default_arms(args.sweep) if args.sweep else None), backend)
    _check_corpus_cache(base, arms)
    return BenchSettings(base, arms, warmup=pick("warmup"), repeats=pick("repeats"),
                         sweep=args.sweep, values=parse_values(args.sweep, args.values) if args.sweep else [],
                         n_prompts=args.prompts, task=args.task, smoke=args.smoke)


def _check_corpus_cache(base: RunConfig, arms: list[str]) -> None:
    """--corpus-cache FILE serves the Self-Draft arms: refused without one, and a file that is missing or not a
    corpus cache of the target's tokens is one line before any arm runs (not each Self-Draft run failing)."""
    if base.lanes.corpus_cache in ("auto", "off"):
        return
    if not any(c.drafter != DrafterKind.MODEL and c.lanes.corpus_cache != "off"
               for c in (runtime_config(a, base) for a in arms if a in RUNTIME_ARMS)):
        raise ConfigError(f"--corpus-cache applies to the Self-Draft arms, and none of {','.join(arms)} is one")
    corpus_cache.resolve(base.lanes.corpus_cache, get_backend(base))


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Exit status: 0; 1 when a greedy output differs from serial AR (on an exact target: not a quantised
    GGUF) or a run failed; 2 bad input."""
    settings = settings_from_args(args)
    record = runner.run_bench(settings, progress=lambda m: console.print(f"· {m}", style="dim", highlight=False))
    print_report(record, console)
    written = []
    if args.json:
        record.write_json(args.json)
        written.append(args.json)
    if args.markdown:
        Path(args.markdown).write_text(markdown(record))
        written.append(args.markdown)
    if args.plots:
        out = Path(args.plots)
        out.mkdir(parents=True, exist_ok=True)
        (out / "speedup_vs_alpha.svg").write_text(plot.speedup_vs_alpha(record.all_results))
        written.append(str(out / "speedup_vs_alpha.svg"))
        if record.sweep_axis in plot.AXIS_LABELS:
            path = out / f"speedup_vs_{record.sweep_axis}.svg"
            path.write_text(plot.speedup_vs_axis(record.sweep_axis, record.sweep))
            written.append(str(path))
        elif record.sweep_axis == "branches":
            path = out / "branches_sweep.svg"
            path.write_text(plot.branches_sweep(record.sweep))
            written.append(str(path))
    for path in written:
        print_wrote(console, f"wrote {path}", style="dim")
    if record.stopped_by:
        fail(f"{REASONS[record.stopped_by]} at {record.stopped_at}; the tables above hold the runs measured before")
        return stopped_status(record.stopped_by)
    return 1 if (record.mismatched and record.exact_target) or record.failed else 0
