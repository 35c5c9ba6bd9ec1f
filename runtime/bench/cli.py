"""`specsched bench`: argparse wiring. The runtime CLI adds it with `add_bench_parser(subparsers)`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from specsched.runtime.core.config import BACKENDS, ConfigError, DrafterKind, RunConfig
from specsched.runtime.core.config_checks import MAX_THREADS
from specsched.runtime.view.console import print_wrote

# --smoke: the harness end to end on the sim backend in seconds (CI), not a speed measurement.
SMOKE = {"backend": "sim", "workers": 3, "max_new_tokens": 16, "warmup": 1, "repeats": 1}
DEFAULTS = {"backend": RunConfig().backend, "workers": 3, "max_new_tokens": RunConfig().max_new_tokens,
            "warmup": 1, "repeats": 5}


def add_bench_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `bench`; it sets ``func(args, console) -> int`` (the exit status)."""
    from specsched.runtime.bench.arms import ARM_NAMES
    from specsched.runtime.bench.sweep import AXES, AXIS_ARMS, DEFAULT_VALUES, SWEEP_ARMS
    from specsched.runtime.bench.workload import TASKS

    p = subparsers.add_parser(
        "bench", help="every arm on the same workload: tokens/s, speedups, α, overhead",
        description="Serial AR, serial SD, SEED under each policy, batched target-only AR, SEED with batched "
                    "verification, Self-Draft (the target drafting for itself through branch lanes and n-gram "
                    "caches) and Hugging Face's assisted / prompt-lookup generation, on the same prompts, "
                    "seeds and sampling settings: warm-up, interleaved repeats, medians and spreads, speedups "
                    "over serial AR from the same run, greedy outputs checked against serial AR.")
    p.add_argument("--smoke", action="store_true",
                   help="check the harness end to end: sim backend, tiny workload, 1 warm-up, 1 repeat")
    p.add_argument("--arms", default=None, metavar="A,B,...",
                   help=f"arms to measure (default: all, or {SWEEP_ARMS} in a sweep, "
                        + ", ".join(f"{v} in --sweep {a}" for a, v in AXIS_ARMS.items())
                        + f"; ar is always added): {', '.join(ARM_NAMES)}")
    p.add_argument("--repeats", type=int, default=None, metavar="R",
                   help=f"measured runs per arm (default {DEFAULTS['repeats']})")
    p.add_argument("--warmup", type=int, default=None, metavar="W",
                   help="discarded runs per arm first (default 1)")
    p.add_argument("--workers", "--thoughts", dest="workers", type=int, default=None, metavar="N",
                   help="thoughts n = draft workers = sequences (default 3)")
    p.add_argument("--k", type=int, default=RunConfig().k, help="draft tokens per round")
    p.add_argument("--lookup", type=int, default=None, metavar="N",
                   help="n-gram lookup before the draft model in the speculative arms (default: 4 on hf, off on "
                        "sim; 0 = off, e.g. to compare the draft model alone with hf-assisted)")
    from specsched.runtime.flags import (  # the same parsers as `run`
        add_branch_flags,
        add_device_flags,
        add_model_flags,
        add_sampling_flags,
        int_list,
    )

    p.add_argument("--k-config", type=int_list, default=[], metavar="W1,W2,...", help="draft tree shape")
    add_branch_flags(p)  # the Self-Draft arms' lanes and corpus cache, as `run` takes them
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 = greedy (outputs checked)")
    add_sampling_flags(p)
    p.add_argument("--max-new-tokens", type=int, default=None, metavar="M",
                   help=f"tokens per sequence (default {DEFAULTS['max_new_tokens']})")
    p.add_argument("--prompts", type=int, default=None, metavar="N",
                   help="held-out prompts: 1 (shared by every thought) or n (default: one per thought)")
    p.add_argument("--task", default=None, choices=list(TASKS), help="hf: prompts of one ToT task only")
    p.add_argument("--sweep", default=None, choices=list(AXES),
                   help="vary one axis, baselines at every point; branches: Self-Draft's lanes N and their length "
                        "L (--plots draws tokens per target forward and speedup vs L, a line per N)")
    p.add_argument("--values", default=None, metavar="V1,V2,...",
                   help="the sweep's values; tree shapes and N:L pairs separated by ';', N1,N2:L1,L2 = every pair "
                        "(defaults: "
                        + "; ".join(f"{a}: {v}" for a, v in DEFAULT_VALUES.items()) + ")")
    p.add_argument("--backend", default=None, help=f"one of {', '.join(BACKENDS)} (default {DEFAULTS['backend']})")
    add_model_flags(p)
    add_device_flags(p)
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="torch threads of every arm's target (verifier, HF peers); 0 = all cores for the "
                        "target-only arms and the peers, the cores the draft workers leave for SEED")
    p.add_argument("--json", default=None, metavar="PATH", help="write the results machine-readably")
    p.add_argument("--plots", default=None, metavar="DIR",
                   help="write SVG plots (speedup vs α, vs the sweep axis; branches_sweep.svg for --sweep branches)")
    p.add_argument("--markdown", default=None, metavar="PATH", help="write the tables as markdown")
    p.set_defaults(func=cmd_bench)
    from specsched.runtime.apps.serve.load_cli import add_load_parser  # `bench serve`: the HTTP server under load

    add_load_parser(p.add_subparsers(dest="bench_command", metavar="{serve}", required=False))
    return p



def settings_from_args(args: argparse.Namespace):
    from specsched.runtime.bench import workload
    from specsched.runtime.bench.arms import parse_arms
    from specsched.runtime.bench.runner import BenchSettings
    from specsched.runtime.bench.sweep import default_arms, parse_values
    from specsched.runtime.flags import branch_settings

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
    base = RunConfig(workers=workers, k=args.k, k_config=args.k_config, max_new_tokens=pick("max_new_tokens"),
                     temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, coupling=args.coupling,
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
    from specsched.runtime.backends.backend import get_backend
    from specsched.runtime.bench.arms import RUNTIME_ARMS, runtime_config
    from specsched.runtime.models import corpus_cache

    if base.corpus_cache in ("auto", "off"):
        return
    if not any(c.drafter != DrafterKind.MODEL and c.corpus_cache != "off"
               for c in (runtime_config(a, base) for a in arms if a in RUNTIME_ARMS)):
        raise ConfigError(f"--corpus-cache applies to the Self-Draft arms, and none of {','.join(arms)} is one")
    corpus_cache.resolve(base.corpus_cache, get_backend(base))


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Exit status: 0; 1 when a greedy output differs from serial AR (on an exact target: not a quantised
    GGUF) or a run failed; 2 bad input."""
    from specsched.runtime.bench import plot
    from specsched.runtime.bench.report import markdown, print_report
    from specsched.runtime.bench.runner import run_bench

    settings = settings_from_args(args)
    record = run_bench(settings, progress=lambda m: console.print(f"· {m}", style="dim", highlight=False))
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
        from specsched.runtime.engine.stopping import REASONS
        from specsched.runtime.exits import fail, stopped_status

        fail(f"{REASONS[record.stopped_by]} at {record.stopped_at}; the tables above hold the runs measured before")
        return stopped_status(record.stopped_by)
    return 1 if (record.mismatched and record.exact_target) or record.failed else 0
