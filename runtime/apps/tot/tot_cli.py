"""`specsched run --task gsm8k|creative|blocksworld`: a ToT tree built on the runtime, phase by phase.

Each phase is a normal run (its own live view, titled with the task, level and phase); the search
above them is `search.py`. Without `--prompt`, `specsched run` builds a gsm8k tree.
"""

from __future__ import annotations

import argparse

from ...core.config import ConfigError

DEFAULT_TASK = "gsm8k"
PAPER_TEMPERATURE = 1.0  # SEED App. C: thoughts sampled at T = 1 ("identical thoughts are useless")
# A tree's sampling when no --temperature, --top-k or --top-p is given. On the default 135M pair (with gsm8k's
# sub-question prompts, before its step prompts), T = 1 with no cut-off drew word salad from the tail, and T <= 0.7
# echoed the prompt ("The previous sub-question is: What is the next sub-question?"); T = 0.85 within the likeliest
# 90 % of the mass reads as (often wrong) arithmetic about the question (docs/trees.md#sampling). The verifier
# samples the target's law under these settings exactly, so either choice is lossless.
TREE_SAMPLING = {"temperature": 0.85, "top_p": 0.9, "top_k": 0}


TREE_DEFAULTS = {"problem": 0, "limit": 1, "breadth": 1}


def add_tot_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Tree-of-Thoughts (the default workload when no --prompt is given)")
    g.add_argument("--task", default=None, help=f"gsm8k | creative | blocksworld (default {DEFAULT_TASK})")
    g.add_argument("--data", default=None, metavar="FILE.jsonl", help="problems in the set's usual format")
    g.add_argument("--problem", type=int, default=None, metavar="I",
                   help=f"index of the first problem (default {TREE_DEFAULTS['problem']})")
    g.add_argument("--limit", type=int, default=None, metavar="N",
                   help=f"how many problems, from --problem on (default {TREE_DEFAULTS['limit']})")
    g.add_argument("--thoughts", type=int, default=None, metavar="n",
                   help="thoughts per state = draft workers (default 3)")
    g.add_argument("--steps", type=int, default=None, metavar="T", help="thought steps (default: the task's)")
    g.add_argument("--breadth", type=int, default=None, metavar="b",
                   help=f"states kept per level (default {TREE_DEFAULTS['breadth']})")
    g.add_argument("--thought-decoding", default=None, metavar="sample|beam|dsbd",
                   help="sample (default): n sampled thoughts per state; beam / dsbd: the n beams of one beam "
                        "sampling of the state's prompt, target only or with a draft worker per beam")
    for what in ("thought", "eval", "answer"):
        g.add_argument(
            f"--{what}-tokens",
            type=int,
            default=None,
            metavar="M",
            help=f"max new tokens of one {what} (default: the task's)",
        )


TREE_FLAGS = ("data", "problem", "limit", "thoughts", "steps", "breadth", "thought_tokens", "eval_tokens",
              "answer_tokens", "thought_decoding")  # None unless given: with --prompt, each is refused


def tree_sampling(args: argparse.Namespace) -> dict:
    """A tree's sampling, as RunConfig fields: TREE_SAMPLING unless a sampling flag is given; else the flags
    given, at the paper's T = 1 unless --temperature is one of them, so `--temperature 1` is the paper's
    setting (no cut-off) and `--top-p 0.9` alone samples at T = 1 within 0.9."""
    if args.temperature is None and args.top_k is None and args.top_p is None:
        return dict(TREE_SAMPLING)
    return {} if args.temperature is not None else {"temperature": PAPER_TEMPERATURE}


def tree_flag(args: argparse.Namespace, name: str) -> int:
    """A tree flag of TREE_DEFAULTS: as given, else its default."""
    value = getattr(args, name)
    return TREE_DEFAULTS[name] if value is None else value


def tree_flags_given(args: argparse.Namespace) -> list[str]:
    """The tree's flags given on the command line (--task first), as typed."""
    return [f"--{f.replace('_', '-')}" for f in ("task", *TREE_FLAGS) if getattr(args, f, None) is not None]


def wants_tot(args: argparse.Namespace) -> bool:
    """A tree without --prompt (or with --task); --prompt with a tree's flags is refused, not ignored."""
    if args.prompts:
        if args.task:
            raise ConfigError("--prompt and --task are two workloads: give one (a --task builds its own prompts)")
        if extra := tree_flags_given(args):
            raise ConfigError(f"{extra[0]} applies to a Tree-of-Thoughts run (no --prompt, or --task)")
    return bool(args.task) or not args.prompts
