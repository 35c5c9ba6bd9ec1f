"""The arms of the benchmark: every way of decoding the same workload, by a stable name.

Runtime arms are RunConfig variations of one base configuration: they differ only in mode, policy,
batching, tree rule (fixed or pct), stepping aside and drafter (the draft model, Self-Draft's branch
lanes and caches, or both), never in prompts, seed, temperature, k, k_config, max_new_tokens, the
branch lanes' N and L or the model pair.
The outside peers (``hf-*``) run Hugging Face transformers' own generate() on the same tokenised
prompts with the same target (peers.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ...core.config import MODEL_BACKENDS, BackendKind, ConfigError, Mode, RunConfig
from ...engine.collected import Interrupted
from ...models.draft_files import is_feature_draft
from ...models.registry import resolve_draft
from ..run.app import RunRecord, run
from ..view.gpu_usage import mean_busy, mean_total_sm
from ..view.usage import UsageSampler
from .measure import BASELINE, Sample
from .overhead import verifier_overhead

# name -> (what it is, the RunConfig fields it sets)
RUNTIME_ARMS: dict[str, tuple[str, dict]] = {
    "ar": ("serial AR: target only, one sequence after another", {"mode": "ar"}),
    "sd": ("serial SD: one draft worker, one sequence after another", {"mode": "sd"}),
    "seed-fcfs": ("SEED: a draft worker per thought, FCFS verification", {"mode": "seed", "policy": "fcfs"}),
    "seed-priority": ("SEED, static priorities 0..n-1", {"mode": "seed", "policy": "priority"}),
    "seed-rr": ("SEED, round-robin verification", {"mode": "seed", "policy": "rr"}),
    "parallel": ("batched target-only AR, every sequence per forward (Fig. 1d)", {"mode": "parallel"}),
    "seed-batch": ("SEED + batched verification of every ready draft", {"mode": "seed", "policy": "batch",
                                                                        "max_batch": 0}),
    "seed-pct": ("SEED, PCT trees shaped by the measured costs", {"mode": "seed", "tree": "pct"}),
    "seed-aside": ("SEED, batched, sequences step aside where drafting does not pay",
                   {"mode": "seed", "policy": "batch", "max_batch": 0, "step_aside": "on"}),
    "seed-goodput": ("SEED + the batch of most expected tokens per second (goodput policy)",
                     {"mode": "seed", "policy": "goodput", "max_batch": 0}),
    "seed-cost": ("SEED, cost-aware: PCT trees, goodput batches, stepping aside",
                  {"mode": "seed", "policy": "goodput", "max_batch": 0, "tree": "pct", "step_aside": "on"}),
    "beam": ("beam sampling, target only (beam search at T = 0), --beams per sequence", {"mode": "beam"}),
    "dsbd": ("DSBD: a draft worker per beam, the forest verified in one forward", {"mode": "dsbd"}),
    "prompt-lookup": ("prompt lookup on our runtime: model-free, the committed text's 4..2-grams only (no lanes, "
                      "no corpus)", {"mode": "seed", "drafter": "branches", "branches": 0, "corpus_cache": "off",
                                     "lookup": 4}),
    "branches": ("Self-Draft: the target drafts for itself, branch lanes + n-gram caches, FCFS",
                 {"mode": "seed", "drafter": "branches"}),
    "branches-commit": ("Self-Draft, drafts with cache candidates verified first (commit-first policy)",
                        {"mode": "seed", "drafter": "branches", "policy": "commit-first"}),
    "branches-draft": ("Self-Draft + draft model: the draft's tree plus the caches' candidates, FCFS",
                       {"mode": "seed", "drafter": "both"}),
    "branches-procs": ("Self-Draft with one OS process per branch lane (--branch-processes), FCFS",
                       {"mode": "seed", "drafter": "branches", "branch_processes": True}),
    "ar-hf": ("serial AR on the transformers backend: what a --backend llamacpp run is measured against",
              {"mode": "ar", "backend": "hf"}),
}
# the arms whose drafts carry Self-Draft's lanes: the ones --branches N and --branch-length L change
BRANCH_ARMS: tuple[str, ...] = tuple(n for n, (_, f) in RUNTIME_ARMS.items()
                                     if f.get("drafter", "model") != "model" and f.get("branches") != 0)
PEER_ARMS: dict[str, str] = {
    "hf-assisted": "HF transformers assisted generation, same draft (as a LlamaForCausalLM)",
    "hf-lookup": "HF transformers prompt-lookup decoding (model-free)",
}
ARM_NAMES: tuple[str, ...] = (*RUNTIME_ARMS, *PEER_ARMS)
SEED_ARM = "seed-fcfs"  # the default `specsched run` (policy fcfs): the arm the targets are stated for


def other_numerics(base: RunConfig) -> frozenset[str]:
    """Arms that score with another implementation of the target than ``ar`` does: on llamacpp, transformers'
    fp32 forward (``ar-hf`` and the peers). Their speed is the comparison; their tokens are not ``ar``'s."""
    return frozenset({"ar-hf", *PEER_ARMS}) if base.backend == BackendKind.LLAMACPP else frozenset()


def parse_arms(text: str | None, backend: str = "hf") -> list[str]:
    """Arm names from ``a,b,c`` (default: all, ``ar-hf`` only on llamacpp, where it is the reference), in
    the canonical order, ``ar`` always included: every ratio is taken against it in the same run."""
    if not text:
        return [n for n in ARM_NAMES if n != "ar-hf" or backend == BackendKind.LLAMACPP]
    names = [n.strip() for n in text.split(",")]
    if not all(names):  # as compare's --policies: an empty name is a typo, not a value to skip
        raise ConfigError(f"--arms {text!r} has an empty name (give A,B,...)")
    unknown = [n for n in names if n not in ARM_NAMES]
    if unknown:
        raise ConfigError(f"unknown arm {unknown[0]!r}; choose from {', '.join(ARM_NAMES)}")
    return [n for n in ARM_NAMES if n in names or n == BASELINE]


def runtime_config(name: str, base: RunConfig) -> RunConfig:
    """The base configuration with the arm's mode, policy and drafter (the draft model unless the arm names
    another); ``priority`` gets 0, 1, ..., n-1 (worker 0 most urgent), as in `specsched compare`: equal
    priorities would only repeat FCFS."""
    _, fields = RUNTIME_ARMS[name]
    fields = {"policy": "fcfs", "priorities": [], "max_batch": 1, "drafter": "model", "branch_processes": False,
              **fields}
    if fields["mode"] in ("ar", "parallel", "beam", "dsbd"):
        fields["step_aside"] = "off"  # no drafts to step aside from
    if fields.get("tree", base.shape.tree) == "pct":
        fields["k_config"] = []       # PCT shapes its own trees
    if fields["policy"] == "priority":
        fields["priorities"] = list(range(base.n_sequences))
    return base.replace(**fields)


def shared(config: RunConfig) -> dict:
    """The configuration every arm shares, as JSON: mode, policy, batching and drafter vary per arm, so
    they are left out rather than shown with the base's meaningless values."""
    varying = ("mode", "policy", "priorities", "max_batch", "tree", "step_aside", "drafter", "branch_processes")
    return {k: v for k, v in config.to_dict().items() if k not in varying}


@dataclass(slots=True)
class RuntimeArm:
    """One of our modes, run as a job on the benchmark's engine (or end to end, processes and all, without
    one). Either way a sample's timings are its decode window: process start-up is never in them."""

    name: str
    description: str
    config: RunConfig
    skipped: str | None = None
    engine: object = None

    def run(self) -> Sample:
        usage = UsageSampler(interval=0.25)  # GPU use where NVML reports it; nothing is sampled without
        on_update = (lambda c: usage.sample(c.processes)) if usage.gpu.on else None
        sample = sample_of(run(dataclasses.replace(self.config), on_update=on_update, engine=self.engine))
        sample.gpu_sm_percent, sample.gpu_busy_percent = mean_total_sm(usage.series), mean_busy(usage.gpu_busy)
        return sample


@dataclass(slots=True)
class SkippedArm:
    name: str
    description: str
    skipped: str

    def run(self) -> Sample:
        raise RuntimeError(f"arm {self.name} is skipped: {self.skipped}")


def sample_of(record: RunRecord) -> Sample:
    """A run's record as one measurement: the metrics `specsched run` prints, plus the overhead."""
    if record.status == "interrupted":  # Ctrl-C / SIGTERM ends the whole benchmark, not one sample
        raise Interrupted(record.error) if record.stopped_by == "SIGTERM" else KeyboardInterrupt(record.error)
    m = record.metrics
    drafts = record.config.mode in (Mode.SD, Mode.SEED)
    counters = record.collected.counters
    return Sample(
        tokens_per_s=m.tokens_per_s,
        wall_s=m.wall_s,
        tokens=[list(s.tokens) for s in record.sequences],
        acceptance_rate=m.acceptance_rate if drafts else None,
        mean_tokens_per_verify=m.mean_tokens_per_verify if m.verifications else None,
        verifier_busy=m.verifier_busy,
        overhead=verifier_overhead(record.collected.events).share_of_busy,
        draft_size=counters.get("drafted", 0) / counters["batched_drafts"] if counters.get("batched_drafts") else None,
        aside_share=counters.get("aside_tokens", 0) / m.tokens if drafts and m.tokens else None,
        cost_curve=record.collected.cost_curve,
        error=None if record.status == "ok" else f"{record.status}: {record.error}",
    )


def build_arms(names: list[str], base: RunConfig,
               peers: Callable[[list[str], RunConfig], list] | None = None, engine=None) -> list:
    """The arms to measure, in order; runtime arms run on `engine` when given. Peers are built by ``peers``
    (default: peers.build_peers, which loads the models once); on the sim backend they are skipped, with
    the reason."""
    arms: list = []
    for n in (n for n in names if n in RUNTIME_ARMS):
        config = runtime_config(n, base)
        if config.backend != base.backend and base.backend != BackendKind.LLAMACPP:
            arms.append(SkippedArm(n, RUNTIME_ARMS[n][0], f"only a --backend llamacpp run measures it "
                                                          f"(on {base.backend} it would repeat ar)"))
        elif config.mode == "dsbd" and engine is not None and engine.draft_reads_features:
            # beams cannot use a feature draft: the distilled draft a dsbd run of the same --draft gets, on an
            # engine of the arm's own; a feature draft named by --draft cannot serve it
            if is_feature_draft(resolve_draft(config.draft, config.target, features=False)):
                arms.append(SkippedArm(n, RUNTIME_ARMS[n][0], "beam drafts carry no target features: the feature "
                                                              "draft cannot serve dsbd"))
            else:
                arms.append(RuntimeArm(n, RUNTIME_ARMS[n][0], config))
        else:  # an arm on another backend than the engine's runs end to end, in processes of its own
            arms.append(RuntimeArm(n, RUNTIME_ARMS[n][0], config,
                                   engine=engine if config.backend == base.backend else None))
    wanted = [n for n in names if n in PEER_ARMS]
    if wanted and base.backend not in MODEL_BACKENDS:
        reason = "needs transformers models: run with --backend hf or llamacpp"
        return arms + [SkippedArm(n, PEER_ARMS[n], reason) for n in wanted]
    if wanted and peers is None:
        # lazy: torch + transformers, ~13 s of start-up (measured 2026-11-27): only the peer arms load them
        from .peers import build_peers

        peers = build_peers
    return arms + (peers(wanted, base) if wanted else [])
