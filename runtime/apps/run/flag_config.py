"""From the flags of a run-like command (`run`, `compare`, `serve`) to the RunConfig they ask for: the run's
own settings, then one function per part (config_parts.py), each returning its settings by their flat names.

A flag that cannot apply to the run asked for is refused here, in one line, rather than dropped: the flags
that default to None (not given) are the ones a run may refuse even at their default value.
"""

from __future__ import annotations

import argparse

from ...core.config import BACKENDS, BackendKind, ConfigError, DrafterKind, RunConfig, TreeKind

BRANCH_FLAGS = ("branches", "branch_length", "corpus_cache")
SIM_FLAGS = ("sim_vocab", "sim_agreement", "sim_draft_ms", "sim_verify_ms")
PCT_FLAGS = ("pct_top_k", "pct_depth", "pct_floor")  # None unless given: without --tree pct, each is refused
CUTS = ("top_k", "top_p")  # None unless given: a tree samples with cut-offs of its own (tot_cli.TREE_SAMPLING)
BATCHING = ("batch", "goodput")  # the built-in policies that batch: every ready draft is theirs to choose from


def given(args: argparse.Namespace, names: tuple[str, ...]) -> dict:
    """Those of `names` (flags that default to None) given on the command line, as settings; the ones not
    given keep RunConfig's defaults."""
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def branch_settings(args: argparse.Namespace) -> dict:
    """The Self-Draft flags given."""
    return given(args, BRANCH_FLAGS)


def max_batch(args: argparse.Namespace) -> int:
    """--max-batch as given; unset, --policy batch verifies every ready draft at once (0), others one."""
    if args.max_batch is not None:
        return args.max_batch
    return 0 if args.policy in BATCHING else RunConfig().max_batch


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig a run's flags ask for, checked (ConfigError: one line, exit status 2)."""
    _refuse_misplaced(args)
    return RunConfig.of(**own_settings(args), **shape_settings(args), **lane_settings(args),
                        **given(args, SIM_FLAGS), **supervision_settings(args), **network_settings(args),
                        **sampling_settings(args), **beam_settings(args))


def own_settings(args: argparse.Namespace) -> dict:
    """The run's own: what is decoded, by which models, where, and how it is scheduled."""
    return dict(workers=args.workers or 0, max_batch=max_batch(args), step_aside=args.step_aside,
                drafter=args.drafter, lockstep=args.lockstep, max_new_tokens=args.max_new_tokens, seed=args.seed,
                mode=args.mode, policy=args.policy, priorities=args.priorities, tickets=args.tickets,
                backend=args.backend, target=args.target, draft=args.draft, prompts=args.prompts,
                raw_prompt=args.raw_prompt, device=args.device, dtype=args.dtype,
                verifier_threads=args.verifier_threads)


def shape_settings(args: argparse.Namespace) -> dict:
    """DraftShape: k or the tree, lookup, where a branch stops, PCT's knobs (given ones only)."""
    return dict(k=args.k, k_config=args.k_config, replacement=not args.no_replacement, lookup=args.lookup,
                min_confidence=args.min_confidence, tree=args.tree, **given(args, PCT_FLAGS))


def lane_settings(args: argparse.Namespace) -> dict:
    """BranchLanes: Self-Draft's lanes (given ones only) and whether each is a process of its own."""
    return dict(branch_processes=args.branch_processes, **branch_settings(args))


def supervision_settings(args: argparse.Namespace) -> dict:
    return dict(max_restarts=args.max_restarts, restart_period_s=args.restart_period,
                heartbeat_timeout_s=args.heartbeat_timeout, policy_timeout_s=args.policy_timeout,
                verdict_timeout_s=args.verdict_timeout)


def network_settings(args: argparse.Namespace) -> dict:
    """--listen implies tcp."""
    return dict(transport="tcp" if args.listen else args.transport, listen=args.listen, keys=args.keys)


def sampling_settings(args: argparse.Namespace) -> dict:
    """--temperature defaults to None: a tree's commands give their own default (tot_cli.TREE_SAMPLING)."""
    temperature = RunConfig().sampling.temperature if args.temperature is None else args.temperature
    return dict(temperature=temperature, coupling=args.coupling, **given(args, CUTS))


def beam_settings(args: argparse.Namespace) -> dict:
    return dict(beams=args.beams, draft_beams=args.draft_beams, gamma=args.gamma, beam_threshold=args.beam_threshold,
                min_beams=args.min_beams, beam_input=args.beam_input)


def _refuse_misplaced(args: argparse.Namespace) -> None:
    """Flags given where they cannot apply: the sim's on another backend, PCT's without --tree pct, Self-Draft's
    with the draft model alone, --priorities beside a workload."""
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {args.workers}")
    if args.backend != BackendKind.SIM and args.backend in BACKENDS:  # an unknown backend: RunConfig says so
        _refuse(given(args, SIM_FLAGS), "--backend sim only", f"--backend {args.backend}")
    if args.tree == TreeKind.FIXED:  # an unknown --tree: RunConfig says so
        _refuse(given(args, PCT_FLAGS), "--tree pct", "--tree fixed")
    if args.drafter == DrafterKind.MODEL:  # lanes and caches are Self-Draft's
        _refuse(branch_settings(args), "--drafter branches or both", "--drafter model")
    if args.priorities and (getattr(args, "workload", None) or getattr(args, "arrivals", None)):
        # a workload's jobs share a pool of workers: a job's priority is its own ("priority" in the workload)
        raise ConfigError("--priorities applies to a --prompt run; a workload's jobs carry their own priority")


def _refuse(settings: dict, applies_to: str, this_run: str) -> None:
    """A flag given where it cannot apply is refused, not ignored: the first of `settings` names it."""
    if settings:
        flag = "--" + next(iter(settings)).replace("_", "-")
        raise ConfigError(f"{flag} applies to {applies_to} (this run uses {this_run})")
