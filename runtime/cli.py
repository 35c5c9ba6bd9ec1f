"""`specsched`: the command line. `specsched run` is the main job."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console

from specsched.policies.loader import PolicyError
from specsched.runtime.config import BACKENDS, MODES, ConfigError, RunConfig

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specsched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="decode prompts with scheduled speculative decoding",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_run_flags(run)
    run.set_defaults(func=cmd_run)
    try:
        from specsched.runtime.models.cli import add_models_parser
    except ImportError:
        pass
    else:
        add_models_parser(sub)
    return parser


def add_run_flags(p: argparse.ArgumentParser) -> None:
    d = RunConfig()
    p.add_argument("--prompt", action="append", dest="prompts", default=[], metavar="TEXT",
                   help="repeatable: one prompt shared by all workers, or one per worker")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="draft workers = sequences (default: number of prompts, or 3)")
    p.add_argument("--k", type=int, default=d.k, help="draft tokens per round")
    p.add_argument("--k-config", type=_int_list, default=[], metavar="W1,W2,...",
                   help="draft a token tree: candidates per depth, e.g. 2,2,1 (overrides --k)")
    p.add_argument("--no-replacement", action="store_true",
                   help="tree siblings drawn without replacement (default: i.i.d. from q)")
    p.add_argument("--max-batch", type=int, default=d.max_batch,
                   help="drafts a batching policy may verify in one forward; 0 = every ready draft")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, metavar="M")
    p.add_argument("--temperature", type=float, default=d.temperature, metavar="T", help="0 = greedy")
    p.add_argument("--top-k", type=int, default=d.top_k, help="0 = off")
    p.add_argument("--top-p", type=float, default=d.top_p, help="1 = off")
    p.add_argument("--seed", type=int, default=d.seed, metavar="S")
    p.add_argument("--mode", default=d.mode, help=f"one of {', '.join(MODES)}")
    p.add_argument("--policy", default=d.policy,
                   help="fcfs | priority | rr | path/file.py:Class | module:Class | entry-point name")
    p.add_argument("--priorities", type=_int_list, default=[], metavar="P0,P1,...",
                   help="static per-worker priorities for --policy priority (lower = more urgent)")
    p.add_argument("--backend", default=d.backend, help=f"one of {', '.join(BACKENDS)}")
    p.add_argument("--target", default=None, help="hf: target model directory or cached id")
    p.add_argument("--draft", default=None, help="hf: draft model directory or cached id")
    p.add_argument("--raw-prompt", action="store_true", help="do not wrap prompts in the chat template")
    p.add_argument("--dtype", default=d.dtype, help="fp32 (exact) | bf16 | fp16 (faster, not bit-exact)")
    p.add_argument("--transport", default=d.transport, help="ipc (private temp dir) | tcp (loopback)")
    p.add_argument("--verifier-threads", type=int, default=0, help="torch threads of the verifier, 0 = all")
    p.add_argument("--sim-vocab", type=int, default=d.sim_vocab)
    p.add_argument("--sim-agreement", type=float, default=d.sim_agreement, help="0..1 draft/target agreement")
    p.add_argument("--sim-draft-ms", type=float, default=d.sim_draft_ms, help="simulated draft forward")
    p.add_argument("--sim-verify-ms", type=float, default=d.sim_verify_ms, help="simulated target forward")
    p.add_argument("--json", default=None, metavar="PATH", help="write a machine-readable record")
    p.add_argument("--quiet", action="store_true", help="print only the summary")


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _max_batch(args: argparse.Namespace) -> int:
    # --policy batch verifies every ready draft at once unless --max-batch says otherwise
    if args.policy == "batch" and args.max_batch == RunConfig().max_batch:
        return 0
    return args.max_batch


def config_from_args(args: argparse.Namespace) -> RunConfig:
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    return RunConfig(
        workers=args.workers or 0, k=args.k, k_config=args.k_config, replacement=not args.no_replacement,
        max_batch=_max_batch(args), max_new_tokens=args.max_new_tokens,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
        mode=args.mode, policy=args.policy, priorities=args.priorities, backend=args.backend,
        target=args.target, draft=args.draft, prompts=args.prompts, raw_prompt=args.raw_prompt,
        transport=args.transport, dtype=args.dtype, verifier_threads=args.verifier_threads,
        sim_vocab=args.sim_vocab, sim_agreement=args.sim_agreement, sim_draft_ms=args.sim_draft_ms,
        sim_verify_ms=args.sim_verify_ms)


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    from specsched.runtime.app import run
    from specsched.runtime.report import print_record

    record = run(config_from_args(args))
    if args.json:
        record.write_json(args.json)
    print_record(record, console, texts=not args.quiet)
    if record.status == "failed":
        _fail(record.error or "run failed")
        return EXIT_FAILED
    if record.status == "interrupted":
        _fail("interrupted; the tokens verified so far are shown above")
        return EXIT_INTERRUPTED
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    try:
        return args.func(args, console)
    except (ConfigError, PolicyError) as exc:
        _fail(str(exc))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        _fail("interrupted")
        return EXIT_INTERRUPTED


def _fail(message: str) -> None:
    print(f"specsched: error: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
