"""The flags every run-like command shares (`run`, `compare`, `serve`), in `run --help`'s argument groups, one
function each; the flags `bench` shares with them. What they make is flag_config.py's."""

from __future__ import annotations

import argparse
from typing import Protocol

from ...core.config import BACKENDS, MODES, RunConfig
from ...models.registry import DEFAULT as DEFAULT_PAIR


class Flags(Protocol):
    """A parser or one of its argument groups: what the flags are added to."""

    def add_argument(self, *names: str, **options) -> argparse.Action: ...


def add_branch_flags(p: Flags) -> None:
    """Self-Draft's lanes and corpus cache: `run` and `bench` (its Self-Draft arms) take the same flags. Each
    defaults to None (not given), so that a run without Self-Draft can refuse one given even at its default."""
    d = RunConfig()
    p.add_argument("--branches", type=int, default=None, metavar="N",
                   help=f"Self-Draft: branch lanes per sequence, 0 = caches only (default {d.lanes.count})")
    p.add_argument("--branch-length", type=int, default=None, metavar="L",
                   help=f"Self-Draft: tokens per branch lane at most (default {d.lanes.length})")
    p.add_argument("--corpus-cache", default=None, metavar="FILE",
                   help="Self-Draft: the corpus cache: auto (on hf and llamacpp the one `specsched models "
                        "corpus-cache` built for the target's tokenizer, else the shipped one if made with that "
                        "tokenizer; none on sim), off, or a .npz from `specsched models corpus-cache` "
                        f"(default {d.lanes.corpus_cache})")


def add_device_flags(p: Flags) -> None:
    """Where the models run and in what precision: `run`, `compare` and `bench` take the same flags."""
    d = RunConfig()
    # the long story of these and every flag below: docs/cli.md
    p.add_argument("--device", default=d.device, metavar="WHERE", help="auto | cpu | cuda | cuda:N")
    p.add_argument("--dtype", default=d.dtype, help="auto | fp32 (exact) | bf16 | fp16")


def add_model_flags(p: Flags) -> None:
    """The model pair: `run`, `compare` and `bench` take the same flags."""
    p.add_argument("--target", default=None, metavar="NAME|DIR",
                   help=f"preset, directory or .gguf (default: the {DEFAULT_PAIR} preset's target)")
    p.add_argument("--draft", default=None, metavar="NAME|DIR",
                   help="the draft model: smollm2-feature, smollm2-distilled, a preset or a directory (default: "
                        "the target preset's draft; for smollm2 its feature draft, or its distilled draft under "
                        "--mode dsbd and on a GPU)")


def add_sampling_flags(p: Flags) -> None:
    """Top-k, top-p and the seed: `run`, `compare` and `bench` take the same flags (--temperature's default
    differs between them)."""
    d = RunConfig()
    p.add_argument("--top-k", type=int, default=None, metavar="K",
                   help=f"only the K likeliest tokens; 0 = off (default {d.sampling.top_k})")
    p.add_argument("--top-p", type=float, default=None, metavar="P",
                   help=f"only the likeliest mass P; 1 = off (default {d.sampling.top_p:g})")
    p.add_argument("--coupling", choices=["residual", "gumbel"], default=d.sampling.coupling,
                   help="how a sampled draft is accepted: residual (speculative sampling, the most accepted) or "
                        "gumbel (the text depends on the seed and the target alone, the same after any crash "
                        "and under any policy, and equal to --mode ar's; fewer tokens accepted)")
    p.add_argument("--seed", type=int, default=d.seed, metavar="S", help="the same seed, the same run")


def add_run_flags(p: argparse.ArgumentParser, *, policy: bool = True) -> dict[str, Flags]:
    """Every flag of a run, in argument groups (`run --help` lists them group by group); the groups by name,
    for a command's own flags to join."""
    groups = {name: p.add_argument_group(title) for name, title in (
        ("workload", "workload"), ("drafting", "drafting"), ("beams", "beams (--mode beam, dsbd)"),
        ("sampling", "sampling"), ("scheduling", "scheduling"), ("backend", "backend and device"),
        ("faults", "faults and transport"), ("output", "output"))}
    add_workload_flags(groups["workload"])
    add_drafting_flags(groups["drafting"])
    add_beam_flags(groups["beams"])
    add_sampling_group(groups["sampling"])
    add_scheduling_flags(groups["scheduling"], policy)
    add_backend_flags(groups["backend"])
    add_fault_flags(groups["faults"])
    add_output_flags(groups["output"])
    return groups


def add_workload_flags(p: Flags) -> None:
    """What is decoded: the prompts, how many sequences, how long, in which mode."""
    d = RunConfig()
    p.add_argument("--prompt", action="append", dest="prompts", default=[], metavar="TEXT",
                   help="decode TEXT; repeat it for one prompt per worker")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="draft workers = sequences (default: prompts, or 3)")
    p.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens, metavar="M",
                   help="tokens each sequence generates at most")
    p.add_argument("--mode", default=d.mode, help=" | ".join(MODES))


def add_drafting_flags(p: Flags) -> None:
    """The shape of each draft and where its tokens come from."""
    d = RunConfig()
    p.add_argument("--k", type=int, default=d.shape.k, help="draft tokens per round")
    p.add_argument("--k-config", type=int_list, default=[], metavar="W1,W2,...",
                   help="draft a token tree: candidates per depth, e.g. 2,2,1 (overrides --k)")
    p.add_argument("--no-replacement", action="store_true",
                   help="tree siblings drawn without replacement (default: i.i.d. from q)")
    p.add_argument("--lookup", type=int, default=None, metavar="N",
                   help="draft from repeated text first: the token after the latest earlier match of the last "
                        "N..2 tokens (q = 1 for it, lossless), else the draft model; 0 = off "
                        "(default: 4 on hf and llamacpp, off on sim)")
    p.add_argument("--drafter", default=d.drafter, metavar="KIND",
                   help="model: the draft model | branches: Self-Draft, the target drafts for itself through branch "
                        "lanes and n-gram caches (no draft model) | both: the draft model's tree plus the "
                        f"caches' candidates (default {d.drafter})")
    add_branch_flags(p)
    p.add_argument("--branch-processes", action="store_true",
                   help="Self-Draft: run each branch lane in its own OS process (default: in its sequence's worker)")
    p.add_argument("--min-confidence", type=float, default=d.shape.min_confidence, metavar="P",
                   help="adaptive draft length: below the first draft token, stop a branch where the draft's top "
                        "probability is below P (0 = always draft k)")
    p.add_argument("--tree", default=d.shape.tree, metavar="SHAPE",
                   help="fixed (--k / --k-config) | pct: a tree shaped by expected time gain from the measured "
                        "costs (top-k children per node, depth, leaf floor: --pct-top-k, --pct-depth, --pct-floor)")
    p.add_argument("--pct-top-k", type=int, default=None, metavar="K",
                   help=f"pct: children tried per node (default {d.shape.pct_top_k})")
    p.add_argument("--pct-depth", type=int, default=None, metavar="D",
                   help=f"pct: deepest draft (default {d.shape.pct_depth})")
    p.add_argument("--pct-floor", type=float, default=None, metavar="P",
                   help=f"pct: no node whose estimated acceptance is below P (default {d.shape.pct_floor:g})")
    p.add_argument("--step-aside", default=d.step_aside, metavar="on|off",
                   help="on: a sequence whose drafts do not pay (measured costs, its running yield) is decoded "
                        "by the target alone, one more row in the verifier's forwards, and probes again later "
                        f"(default {d.step_aside})")


def add_beam_flags(p: Flags) -> None:
    """Beam sampling and search, and dsbd's draft forests."""
    d = RunConfig()
    p.add_argument("--beams", type=int, default=d.beam.width, metavar="W",
                   help=f"--mode beam|dsbd: beam width, the beams kept per step (default {d.beam.width})")
    p.add_argument("--draft-beams", type=int, default=d.beam.draft_width, metavar="W_S",
                   help="dsbd: draft beams per layer, over all trees when sampling, per tree when greedy "
                        "(default: --beams)")
    p.add_argument("--gamma", type=int, default=d.beam.gamma, metavar="G",
                   help=f"dsbd: draft layers per iteration (default {d.beam.gamma})")
    p.add_argument("--beam-threshold", type=float, default=d.beam.threshold, metavar="T",
                   help="dsbd: dynamic width, as many beams per layer as are accepted with probability >= T "
                        "(DSBD Eq. 6-7; default 0 = fixed width; sampling only)")
    p.add_argument("--min-beams", type=int, default=d.beam.min_width, metavar="W_MIN",
                   help=f"dsbd: the dynamic width's floor (default {d.beam.min_width})")
    p.add_argument("--beam-input", default=d.beam.inputs, metavar="all|best",
                   help="beam modes: the next step grows from all beams (default) or only the most likely one "
                        "(DSBD §3.4: one cache, but no longer the law of beam sampling)")


def add_sampling_group(p: Flags) -> None:
    """The target's law: temperature, top-k, top-p, the acceptance coupling, the seed."""
    d = RunConfig()
    p.add_argument("--temperature", type=float, default=None, metavar="T",
                   help=f"0 = greedy (default {d.sampling.temperature:g}; a tree: 0.85, top-p 0.9)")
    add_sampling_flags(p)


def add_scheduling_flags(p: Flags, policy: bool = True) -> None:
    """The policy that drains the run queue, and what it may batch."""
    d = RunConfig()
    if policy:
        p.add_argument("--policy", default=d.policy, help="fcfs | priority | rr | batch | ... | file.py:Class")
    p.add_argument("--priorities", type=int_list, default=[], metavar="P,...",
                   help="per worker, for --policy priority; lower = sooner")
    p.add_argument("--tickets", type=int_list, default=[], metavar="T0,T1,...",
                   help="per-worker shares for --policy lottery / stride (default 100 each)")
    p.add_argument("--max-batch", type=int, default=None, metavar="N",
                   help="drafts a batching policy may verify in one forward; 0 = every ready draft (default: "
                        f"0 with --policy batch or goodput, else {d.max_batch})")
    p.add_argument("--lockstep", action="store_true",
                   help="verify only when every worker that still owes a draft has one queued (synchronous "
                        "steps; with --policy batch, one forward per step) instead of as soon as one is ready")


def add_backend_flags(p: Flags) -> None:
    """What runs the models, which models, where, with how many threads."""
    d = RunConfig()
    p.add_argument("--backend", default=d.backend, help=" | ".join(BACKENDS))
    add_model_flags(p)
    p.add_argument("--raw-prompt", action="store_true", help="do not wrap prompts in the chat template")
    add_device_flags(p)
    p.add_argument("--verifier-threads", type=int, default=0, metavar="N",
                   help="threads of the verifier (torch or llama.cpp); 0 = before every forward, the cores the "
                        "drafting workers leave free (scheduler/cores.py) on hf, every core on llamacpp")
    # default None: set only when given, so that a --sim-* flag on another backend is an error, not ignored
    p.add_argument("--sim-vocab", type=int, default=None, metavar="V",
                   help=f"sim: vocabulary size (default {d.sim.vocab})")
    p.add_argument("--sim-agreement", type=float, default=None, metavar="A",
                   help=f"sim: 0..1 draft/target agreement (default {d.sim.agreement:g})")
    p.add_argument("--sim-draft-ms", type=float, default=None, metavar="MS",
                   help=f"sim: simulated draft forward, in ms (default {d.sim.draft_ms:g})")
    p.add_argument("--sim-verify-ms", type=float, default=None, metavar="MS",
                   help=f"sim: simulated target forward, in ms (default {d.sim.verify_ms:g})")


def add_fault_flags(p: Flags) -> None:
    """How the processes talk, and what supervision restarts or gives up on."""
    d = RunConfig()
    p.add_argument("--transport", default=d.network.transport,
                   help="ipc (private temp dir) | tcp (CurveZMQ-authenticated; loopback unless --listen)")
    p.add_argument("--listen", default=None, metavar="HOST:PORT",
                   help="tcp: bind here too, so that workers on other hosts can join (`specsched worker --connect`); "
                        "implies --transport tcp and needs --keys")
    p.add_argument("--keys", default=None, metavar="DIR",
                   help="tcp: the CURVE keys `specsched keys DIR` wrote (default: new keys for this run alone)")
    p.add_argument("--max-restarts", type=int, default=d.supervision.max_restarts, metavar="R",
                   help=f"supervision: restarts of one child (a draft worker or the verifier) allowed within "
                        f"--restart-period; one more fails the jobs it serves "
                        f"(default {d.supervision.max_restarts}; 0 = never)")
    p.add_argument("--restart-period", type=float, default=d.supervision.restart_period_s, metavar="S",
                   help=f"supervision: the window of --max-restarts, in seconds "
                        f"(default {d.supervision.restart_period_s:g})")
    p.add_argument("--heartbeat-timeout", type=float, default=d.supervision.heartbeat_timeout_s, metavar="S",
                   help=f"supervision: a child silent this long (stopped, hung) is killed and restarted "
                        f"(default {d.supervision.heartbeat_timeout_s:g})")
    p.add_argument("--policy-timeout", type=float, default=d.supervision.policy_timeout_s, metavar="S",
                   help=f"supervision: a policy's pick (or served, or constructor) still running after S seconds "
                        f"is stopped, and the jobs it schedules fail with what they verified kept "
                        f"(default {d.supervision.policy_timeout_s:g})")
    p.add_argument("--verdict-timeout", type=float, default=d.supervision.verdict_timeout_s, metavar="S",
                   help=f"supervision: a draft worker that waits S seconds for a verdict asks the verifier where its "
                        f"sequence stands, and waits on (its draft is queued), sends the draft again (it was lost) or "
                        f"drafts on (the verdict was lost) (default {d.supervision.verdict_timeout_s:g})")


def add_output_flags(p: Flags) -> None:
    """What the run writes."""
    p.add_argument("--json", default=None, metavar="PATH", help="write a machine-readable record")
    p.add_argument("--quiet", action="store_true", help="print only the summary")


def name_list(text: str) -> list[str]:
    return [name.strip() for name in text.split(",")]  # an empty name is refused where it is used


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",")]  # an empty item is a typo, not a value to skip
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
