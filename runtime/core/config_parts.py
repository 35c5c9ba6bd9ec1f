"""The parts of a run's configuration, one per concern, each checking its own values when it is made.

A part's fields keep short names (``config.sim.verify_ms``); the flags, records, workloads and
`Engine.submit` keep the flat names (``sim_verify_ms``). `FLAGS` on each part maps one onto the other,
and `RunConfig` builds its table of every flat name from them: the one place where the two meet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from .config_checks import MAX_K, MAX_TREE_NODES, check_types, tree_nodes
from .kinds import ConfigError, TransportKind, TreeKind


@dataclass(frozen=True, slots=True)
class DraftShape:
    """What one draft is: a chain of k tokens or a tree, n-gram lookup first, and where a branch stops."""

    FLAGS: ClassVar[dict[str, str]] = {
        "k": "k", "k_config": "k_config", "replacement": "replacement", "lookup": "lookup",
        "min_confidence": "min_confidence", "tree": "tree", "pct_top_k": "pct_top_k", "pct_depth": "pct_depth",
        "pct_floor": "pct_floor"}

    k: int = 4
    k_config: list[int] = field(default_factory=list)  # tree widths per depth; empty = a chain of k tokens
    replacement: bool = True         # tree siblings drawn i.i.d. (False: without replacement)
    lookup: int | None = None        # n-gram lookup (n = lookup..2) before the draft model; 0 = off, None = auto
    min_confidence: float = 0.0      # stop a draft branch where the draft's top probability is below this
    tree: str = "fixed"              # fixed (--k / --k-config) | pct (shaped by expected time gain)
    pct_top_k: int = 5               # pct: children tried per node
    pct_depth: int = 10              # pct: deepest draft
    pct_floor: float = 0.02          # pct: no node whose estimated acceptance is below this

    def __post_init__(self) -> None:
        check_types(self)
        if not 1 <= self.k <= MAX_K:
            raise ConfigError(f"--k must be in 1..{MAX_K}, got {self.k}")
        widths = self.k_config
        if any(w < 1 for w in widths):
            raise ConfigError(f"--k-config widths must be at least 1, got {widths}")
        if len(widths) > MAX_K or any(w > MAX_K for w in widths) or tree_nodes(widths) > MAX_TREE_NODES:
            raise ConfigError(f"--k-config {','.join(map(str, widths))} drafts {tree_nodes(widths)} tokens "
                              f"a round; at most {MAX_TREE_NODES}, {MAX_K} levels of at most {MAX_K} each")
        if not 0 <= self.min_confidence < 1:
            raise ConfigError(f"--min-confidence must be in [0, 1), got {self.min_confidence}")
        if self.lookup is not None and (self.lookup < 0 or self.lookup == 1):
            raise ConfigError(f"--lookup must be 0 (off) or at least 2, got {self.lookup}")
        if self.tree not in (TreeKind.FIXED, TreeKind.PCT):
            raise ConfigError(f"unknown --tree {self.tree!r}; choose fixed or pct")
        if self.tree == TreeKind.PCT and widths:
            raise ConfigError("--tree pct shapes the tree itself: drop --k-config")
        if not (1 <= self.pct_top_k <= 64 and 1 <= self.pct_depth <= 64):
            raise ConfigError(f"--pct-top-k and --pct-depth must be in 1..64, got {self.pct_top_k}, "
                              f"{self.pct_depth}")
        if not 0 < self.pct_floor < 1:
            raise ConfigError(f"--pct-floor must be in (0, 1), got {self.pct_floor}")

    @property
    def widths(self) -> tuple[int, ...]:
        """Candidates per depth: --k-config, or a chain of k."""
        return tuple(self.k_config) if self.k_config else (1,) * self.k


@dataclass(frozen=True, slots=True)
class BranchLanes:
    """Self-Draft (--drafter branches or both): the branch lanes of a sequence and the corpus cache."""

    FLAGS: ClassVar[dict[str, str]] = {
        "branches": "count", "branch_length": "length", "corpus_cache": "corpus_cache",
        "branch_processes": "processes"}

    count: int = 1                   # lanes N per sequence (0 = caches only; CPU: docs/branches.md)
    length: int = 8                  # tokens per lane L at most
    corpus_cache: str = "auto"       # auto (the shipped one on hf, none on sim) | off | a .npz file
    processes: bool = False          # each lane in its own OS process (else in its sequence's worker)

    def __post_init__(self) -> None:
        check_types(self)
        if not 0 <= self.count <= 64:
            raise ConfigError(f"--branches must be in 0..64, got {self.count}")
        if not 4 <= self.length <= 64:  # a lane yields 4-grams (key + 3 tokens + prediction) from L = 4 on
            raise ConfigError(f"--branch-length must be in 4..64, got {self.length}")


MAX_SIM_VOCAB = 262_144   # the largest real vocabularies' size; the sim tokenizer holds a word per token
MAX_SIM_MS = 60_000       # a sim cost of more than a minute a step is a typo (and past ~1e11 s sleep() overflows)


@dataclass(frozen=True, slots=True)
class SimSettings:
    """The sim backend's pair: a vocabulary, how often draft and target agree, what a forward costs."""

    FLAGS: ClassVar[dict[str, str]] = {
        "sim_vocab": "vocab", "sim_agreement": "agreement", "sim_draft_ms": "draft_ms",
        "sim_verify_ms": "verify_ms"}

    vocab: int = 64
    agreement: float = 0.8
    draft_ms: float = 2.0
    verify_ms: float = 10.0

    def __post_init__(self) -> None:
        check_types(self)
        if not 0 <= self.agreement <= 1:
            raise ConfigError(f"--sim-agreement must be in [0, 1], got {self.agreement}")
        if not 4 <= self.vocab <= MAX_SIM_VOCAB:
            raise ConfigError(f"--sim-vocab must be in 4..{MAX_SIM_VOCAB:,}, got {self.vocab}")
        for flag, ms in (("--sim-draft-ms", self.draft_ms), ("--sim-verify-ms", self.verify_ms)):
            if not 0 <= ms <= MAX_SIM_MS:
                raise ConfigError(f"{flag} must be in [0, {MAX_SIM_MS:,}] ms, got {ms}")


@dataclass(frozen=True, slots=True)
class Supervision:
    """What the engine restarts, when it gives up, and how long anyone may stay silent."""

    FLAGS: ClassVar[dict[str, str]] = {
        "max_restarts": "max_restarts", "restart_period_s": "restart_period_s",
        "heartbeat_timeout_s": "heartbeat_timeout_s", "policy_timeout_s": "policy_timeout_s",
        "verdict_timeout_s": "verdict_timeout_s"}

    max_restarts: int = 3            # restarts of one child allowed within restart_period_s (OTP)
    restart_period_s: float = 5.0
    heartbeat_timeout_s: float = 10.0  # a worker silent this long is killed and restarted
    policy_timeout_s: float = 10.0   # a policy's pick (served, constructor) running longer is stopped
    verdict_timeout_s: float = 10.0  # a worker waiting this long for a verdict probes (draft_worker.py)

    def __post_init__(self) -> None:
        check_types(self)
        if not 0 <= self.max_restarts <= 1000:
            raise ConfigError(f"--max-restarts must be in 0..1000, got {self.max_restarts}")
        if not 0 < self.restart_period_s <= 86400:
            raise ConfigError(f"--restart-period must be in (0, 86400] seconds, got {self.restart_period_s}")
        for flag, seconds in (("--heartbeat-timeout", self.heartbeat_timeout_s),
                              ("--policy-timeout", self.policy_timeout_s),
                              ("--verdict-timeout", self.verdict_timeout_s)):
            if not 0 < seconds <= 3600:
                raise ConfigError(f"{flag} must be in (0, 3600] seconds, got {seconds}")


@dataclass(frozen=True, slots=True)
class Network:
    """How the processes talk: ipc, or tcp with CURVE keys, and where workers on other hosts join."""

    FLAGS: ClassVar[dict[str, str]] = {"transport": "transport", "listen": "listen", "keys": "keys"}

    transport: str = "ipc"
    listen: str | None = None        # tcp: HOST:PORT where workers on other hosts join (specsched worker --connect)
    keys: str | None = None          # tcp: engine.key (or its directory) from `specsched keys`; None = keys per run

    def __post_init__(self) -> None:
        check_types(self)
        if self.transport not in (TransportKind.IPC, TransportKind.TCP):
            raise ConfigError(f"unknown --transport {self.transport!r}; choose ipc or tcp")
        if self.keys is not None and not self.keys.strip():  # it read as "not given": keys made for this run
            raise ConfigError("--keys is empty; give engine.key or its directory (`specsched keys DIR`), or None")
        if (self.listen or self.keys) and self.transport != TransportKind.TCP:
            raise ConfigError(f"{'--listen' if self.listen else '--keys'} needs --transport tcp")
        if self.listen is not None:
            self._check_listen(self.listen)

    def _check_listen(self, listen: str) -> None:
        if not self.keys:
            raise ConfigError("--listen needs --keys DIR: a worker on another host must hold the run's key "
                              "(make them with `specsched keys DIR`)")
        host, _, port = listen.rpartition(":")
        if "://" in listen or "[" in host:  # the worker's --connect form, or IPv6 (the engine binds IPv4)
            raise ConfigError(f"--listen takes HOST:PORT with an IPv4 address or a name, no scheme (e.g. "
                              f"0.0.0.0:5555), got {listen!r}")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"--listen takes HOST:PORT (an address of this machine and a port 1..65535), "
                              f"got {listen!r}")


@dataclass(frozen=True, slots=True)
class BeamShape:
    """Beam modes (beam, dsbd): the width, and dsbd's draft forests."""

    FLAGS: ClassVar[dict[str, str]] = {
        "beams": "width", "draft_beams": "draft_width", "gamma": "gamma", "beam_threshold": "threshold",
        "min_beams": "min_width", "beam_input": "inputs"}

    width: int = 4                   # W: beams kept per step (W_L of a layer; input beams per step)
    draft_width: int = 0             # dsbd: W_S per layer (sampled: over all trees; greedy: per tree); 0 = width
    gamma: int = 3                   # dsbd: draft layers per iteration
    threshold: float = 0.0           # dsbd: t of the dynamic width (Eq. 6-7); 0 = a fixed width
    min_width: int = 1               # dsbd: W_min of the dynamic width
    inputs: str = "all"              # all beams go on | best: only the most likely (§3.4; not exact)

    def __post_init__(self) -> None:
        check_types(self)
        for flag, value, lo, hi in (("--beams", self.width, 1, 64), ("--draft-beams", self.draft_width, 0, 256),
                                    ("--gamma", self.gamma, 1, 16), ("--min-beams", self.min_width, 1, self.width)):
            if not lo <= value <= hi:
                raise ConfigError(f"{flag} must be in {lo}..{'--beams' if flag == '--min-beams' else hi}, "
                                  f"got {value}")
        if self.inputs not in ("all", "best"):
            raise ConfigError(f"--beam-input must be all or best, got {self.inputs!r}")
        if not 0 <= self.threshold <= 1:
            raise ConfigError(f"--beam-threshold must be in [0, 1], got {self.threshold}")

    @property
    def slots_at_start(self) -> int:
        """dsbd: beams a sequence holds from its first step on, each drafted by a worker of its own - the
        most it ever holds: --beams, or one with --beam-input best."""
        return 1 if self.inputs == "best" else self.width
