"""The run configuration: every flag of `specsched run`, validated once, passed to every process.

Children receive it as JSON on stdin (``to_dict`` / ``from_dict``), never pickled.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

from specsched.runtime.core.sampling import SamplingParams

MODES = ("ar", "sd", "seed", "parallel", "beam", "dsbd")
BEAM_MODES = ("beam", "dsbd")  # beam sampling / search: target only, and with one draft worker per beam
BACKENDS = ("sim", "hf", "llamacpp")
MODEL_BACKENDS = ("hf", "llamacpp")  # real models, a transformers tokenizer and torch drafts
TRANSPORTS = ("ipc", "tcp")
DRAFTERS = ("model", "branches", "both")  # the draft model | Self-Draft's lanes and caches | both (branch_drafter.py)


class ConfigError(ValueError):
    """Bad user input: reported as one line, exit status 2."""


AUTO_LOOKUP = 4  # --lookup on hf unless set: n-grams of 4, 3, 2 tokens


@dataclass(slots=True)
class RunConfig:
    workers: int = 0                 # 0 = one per prompt (or 3 with a single prompt)
    k: int = 4
    k_config: list[int] = field(default_factory=list)  # tree shape; empty = a chain of k tokens
    replacement: bool = True         # tree siblings drawn i.i.d. (False: without replacement)
    lookup: int | None = None        # n-gram lookup (n = lookup..2) before the draft model; 0 = off, None = auto
    min_confidence: float = 0.0      # stop a draft branch where the draft's top probability is below this
    max_batch: int = 1               # drafts per target forward a batching policy may pick; 0 = all
    step_aside: str = "off"          # on: a sequence is decoded by the target alone while drafting does not pay
    tree: str = "fixed"              # fixed (--k / --k-config) | pct (shaped by expected time gain)
    pct_top_k: int = 5               # pct: children tried per node
    pct_depth: int = 10              # pct: deepest draft
    pct_floor: float = 0.02          # pct: no node whose estimated acceptance is below this
    drafter: str = "model"           # model | branches (Self-Draft: lanes and caches, no draft model) | both
    branches: int = 1                # Self-Draft: branch lanes N per sequence (0 = caches only; CPU: README)
    branch_length: int = 8           # Self-Draft: tokens per lane L at most
    corpus_cache: str = "auto"       # Self-Draft: auto (the shipped one on hf, none on sim) | off | a .npz file
    branch_processes: bool = False   # Self-Draft: each lane in its own OS process (else in its sequence's worker)
    lockstep: bool = False           # verify only when every worker that owes a draft has one queued
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    mode: str = "seed"
    policy: str = "fcfs"
    priorities: list[int] = field(default_factory=list)
    tickets: list[int] = field(default_factory=list)  # shares for lottery / stride (100 each unless given)
    backend: str = "hf"
    target: str | None = None
    draft: str | None = None
    prompts: list[str] = field(default_factory=list)
    raw_prompt: bool = False
    transport: str = "ipc"
    device: str = "auto"             # hf: auto (a CUDA GPU when torch sees one) | cpu | cuda | cuda:N
    dtype: str = "auto"              # auto = bf16 on CUDA, fp32 on the CPU (model_dtype)
    verifier_threads: int = 0        # 0 = all cores
    sim_vocab: int = 64
    sim_agreement: float = 0.8
    sim_draft_ms: float = 2.0
    sim_verify_ms: float = 10.0
    beams: int = 4                   # beam modes: the beam width W (W_L of a layer; input beams per step)
    draft_beams: int = 0             # dsbd: W_S per layer (sampled: over all trees; greedy: per tree); 0 = --beams
    gamma: int = 3                   # dsbd: draft layers per iteration
    beam_threshold: float = 0.0      # dsbd: t of the dynamic width (Eq. 6-7); 0 = a fixed width
    min_beams: int = 1               # dsbd: W_min of the dynamic width
    beam_input: str = "all"          # beam modes: all beams go on | best: only the most likely (§3.4; not exact)
    max_restarts: int = 3            # supervision: restarts of one child allowed within restart_period_s (OTP)
    restart_period_s: float = 5.0
    heartbeat_timeout_s: float = 10.0  # supervision: a worker silent this long is killed and restarted
    listen: str | None = None        # tcp: HOST:PORT where workers on other hosts join (specsched worker --connect)
    keys: str | None = None          # tcp: engine.key (or its directory) from `specsched keys`; None = keys per run

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown --mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"unknown --backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.transport not in TRANSPORTS:
            raise ConfigError(f"unknown --transport {self.transport!r}; choose ipc or tcp")
        self._check_listen()
        if self.k < 1:
            raise ConfigError(f"--k must be at least 1, got {self.k}")
        if self.workers < 0:
            raise ConfigError(f"--workers must be at least 1, got {self.workers}")
        if any(w < 1 for w in self.k_config):
            raise ConfigError(f"--k-config widths must be at least 1, got {self.k_config}")
        if not 0 <= self.min_confidence < 1:
            raise ConfigError(f"--min-confidence must be in [0, 1), got {self.min_confidence}")
        if self.lookup is not None and (self.lookup < 0 or self.lookup == 1):
            raise ConfigError(f"--lookup must be 0 (off) or at least 2, got {self.lookup}")
        if self.step_aside not in ("on", "off"):
            raise ConfigError(f"--step-aside must be on or off, got {self.step_aside!r}")
        if self.step_aside == "on" and self.mode not in ("seed", "sd"):
            raise ConfigError(f"--step-aside needs draft workers (--mode seed or sd); --mode {self.mode} has none")
        if self.tree not in ("fixed", "pct"):
            raise ConfigError(f"unknown --tree {self.tree!r}; choose fixed or pct")
        if self.tree == "pct" and self.k_config:
            raise ConfigError("--tree pct shapes the tree itself: drop --k-config")
        if not (1 <= self.pct_top_k <= 64 and 1 <= self.pct_depth <= 64):
            raise ConfigError(f"--pct-top-k and --pct-depth must be in 1..64, got {self.pct_top_k}, "
                              f"{self.pct_depth}")
        if not 0 < self.pct_floor < 1:
            raise ConfigError(f"--pct-floor must be in (0, 1), got {self.pct_floor}")
        if self.max_batch < 0:
            raise ConfigError(f"--max-batch must be >= 0 (0 = every ready draft), got {self.max_batch}")
        if self.lockstep and self.mode in ("ar", "parallel"):
            # refused, not ignored: these target-only modes have no drafts to hold back
            raise ConfigError(f"--lockstep needs draft workers (--mode seed or sd); --mode {self.mode} has none")
        self._check_beams()
        self._check_branches()
        if self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be at least 1, got {self.max_new_tokens}")
        if not 0 <= self.sim_agreement <= 1:
            raise ConfigError(f"--sim-agreement must be in [0, 1], got {self.sim_agreement}")
        if self.sim_vocab < 4:
            raise ConfigError(f"--sim-vocab must be at least 4, got {self.sim_vocab}")
        self._check_device()
        for flag, ms in (("--sim-draft-ms", self.sim_draft_ms), ("--sim-verify-ms", self.sim_verify_ms)):
            if not (math.isfinite(ms) and ms >= 0):
                raise ConfigError(f"{flag} must be a number >= 0, got {ms}")
        if self.verifier_threads < 0:
            raise ConfigError(f"--verifier-threads must be >= 0 (0 = all cores), got {self.verifier_threads}")
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}")
        if not math.isfinite(self.temperature):
            raise ConfigError(f"--temperature must be a finite number, got {self.temperature}")
        if any(not p.strip() for p in self.prompts):
            raise ConfigError("a --prompt is empty: give the text to continue")
        try:
            self.sampling  # noqa: B018 - validates temperature / top-k / top-p
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        n = self.n_sequences
        if len(self.prompts) > 1 and self.workers and self.workers != len(self.prompts):
            raise ConfigError(f"{len(self.prompts)} prompts but --workers {self.workers}: give one prompt "
                              "(shared by every worker) or one per worker")
        if self.priorities and len(self.priorities) not in (1, n):
            raise ConfigError(f"--priorities needs 1 or {n} values, got {len(self.priorities)}")
        if self.tickets and (len(self.tickets) not in (1, n) or min(self.tickets) < 1):
            raise ConfigError(f"--tickets needs 1 or {n} values, each at least 1, got {self.tickets}")

    def _check_device(self) -> None:
        from specsched.runtime.core.device import DTYPES, check_device

        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown --dtype {self.dtype!r}; choose auto, fp32, bf16 or fp16")
        check_device(self.device)
        if self.device != "auto" and self.backend == "sim":  # refused, not ignored: sim has no models to place
            raise ConfigError("--device applies to --backend hf (this run uses --backend sim)")
        if self.device.startswith("cuda") and self.backend == "llamacpp":
            raise ConfigError(f"--device {self.device}: the llamacpp backend runs on the CPU; use --backend hf "
                              "for CUDA, or --device cpu")

    def _check_listen(self) -> None:
        if (self.listen or self.keys) and self.transport != "tcp":
            raise ConfigError(f"{'--listen' if self.listen else '--keys'} needs --transport tcp")
        if self.listen is None:
            return
        if not self.keys:
            raise ConfigError("--listen needs --keys DIR: a worker on another host must hold the run's key "
                              "(make them with `specsched keys DIR`)")
        host, _, port = self.listen.rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"--listen takes HOST:PORT (an address of this machine and a port 1..65535), "
                              f"got {self.listen!r}")

    def _check_branches(self) -> None:
        if self.drafter not in DRAFTERS:
            raise ConfigError(f"unknown --drafter {self.drafter!r}; choose one of {', '.join(DRAFTERS)}")
        if self.drafter != "model" and self.mode not in ("seed", "sd"):
            raise ConfigError(f"--drafter {self.drafter} needs draft workers (--mode seed or sd), "
                              f"not --mode {self.mode}")
        if not 0 <= self.branches <= 64:
            raise ConfigError(f"--branches must be in 0..64, got {self.branches}")
        if self.branch_processes and (self.drafter == "model" or not self.branches):
            raise ConfigError("--branch-processes needs branch lanes: --drafter branches or both, --branches >= 1")
        if not 4 <= self.branch_length <= 64:  # a lane yields 4-grams (key + 3 tokens + prediction) from L = 4 on
            raise ConfigError(f"--branch-length must be in 4..64, got {self.branch_length}")

    def _check_beams(self) -> None:
        for flag, value, lo, hi in (("--beams", self.beams, 1, 64), ("--draft-beams", self.draft_beams, 0, 256),
                                    ("--gamma", self.gamma, 1, 16), ("--min-beams", self.min_beams, 1, self.beams)):
            if not lo <= value <= hi:
                raise ConfigError(f"{flag} must be in {lo}..{'--beams' if flag == '--min-beams' else hi}, got {value}")
        if self.beam_input not in ("all", "best"):
            raise ConfigError(f"--beam-input must be all or best, got {self.beam_input!r}")
        if not 0 <= self.beam_threshold <= 1:
            raise ConfigError(f"--beam-threshold must be in [0, 1], got {self.beam_threshold}")
        if self.mode in BEAM_MODES and (self.lockstep or self.tree != "fixed" or self.k_config):
            raise ConfigError(f"--mode {self.mode} drafts beam forests: --lockstep, --tree and --k-config do not apply")
        if not 0 <= self.max_restarts <= 1000:
            raise ConfigError(f"--max-restarts must be in 0..1000, got {self.max_restarts}")
        if not 0 < self.restart_period_s <= 86400:
            raise ConfigError(f"--restart-period must be in (0, 86400] seconds, got {self.restart_period_s}")
        if not 0 < self.heartbeat_timeout_s <= 3600:
            raise ConfigError(f"--heartbeat-timeout must be in (0, 3600] seconds, got {self.heartbeat_timeout_s}")
        if self.beam_threshold and self.temperature == 0:
            raise ConfigError("--beam-threshold (a dynamic width) needs sampling: beam search at --temperature 0 "
                              "keeps a fixed width")

    @property
    def beam_mode(self) -> bool:
        return self.mode in BEAM_MODES

    @property
    def target_only(self) -> bool:
        """No draft workers: the verifier decodes alone (ar, parallel, beam)."""
        return self.mode in ("ar", "parallel", "beam")

    @property
    def draft_workers(self) -> int:
        """Draft-worker processes a job needs: one per thought (seed), one (sd), one per beam (dsbd)."""
        return {"seed": self.n_sequences, "sd": 1,
                "dsbd": self.n_sequences * self.beam_slots_at_start}.get(self.mode, 0)

    @property
    def beam_slots_at_start(self) -> int:
        """dsbd: beams a sequence holds from its first step on, each drafted by a worker of its own - the
        most it ever holds: --beams, or one with --beam-input best."""
        return 1 if self.beam_input == "best" else self.beams

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)

    @property
    def elastic_threads(self) -> bool:
        """The verifier's threads follow the drafting workers (scheduler/cores.py): the default on hf. Fixed
        --verifier-threads N turns it off, and so does llamacpp, which keeps every core: its batched
        kernels are compute-bound (a verification of 5 tokens on 1 thread takes twice as long as on 2), and
        measured on a 2-core machine, every core made seed-fcfs 1.4x faster than elastic threads (README: llama.cpp)."""
        return self.verifier_threads == 0 and self.backend != "llamacpp"

    @property
    def model_device(self) -> str:
        """Where this machine runs the models: --device resolved ("cpu" or "cuda:N"; imports torch unless
        cpu). The sim backend has no models and llama.cpp runs on the CPU: "cpu" for both."""
        if self.backend != "hf":
            return "cpu"
        from specsched.runtime.core.device import resolve_device

        return resolve_device(self.device)

    @property
    def model_dtype(self) -> str:
        """The dtype the models load in: --dtype, or for auto bf16 on CUDA and fp32 on the CPU."""
        if self.dtype != "auto":
            return self.dtype
        from specsched.runtime.core.device import default_dtype

        return default_dtype(self.model_device)

    @property
    def draft_lookup(self) -> int:
        """--lookup as the drafters use it. Auto: 4 on hf (real text repeats its own phrases, names and
        numbers); off on sim, whose tiny synthetic vocabulary repeats every n-gram and would hide
        --sim-agreement."""
        if self.lookup is not None:
            return self.lookup
        return AUTO_LOOKUP if self.backend in MODEL_BACKENDS else 0

    @property
    def steps_aside(self) -> bool:
        """--step-aside on. Off by default: which rounds a sequence spends aside is decided from measured
        times, so under sampling the same seed no longer gives the same text (the law is still the
        target's), and a stepped-aside sequence is not in the run queue, out of the policy's sight."""
        return self.step_aside == "on"

    @property
    def tree_shape(self) -> tuple[int, ...]:
        """Candidates per depth: k_config, or a chain of k."""
        return tuple(self.k_config) if self.k_config else (1,) * self.k

    @property
    def n_sequences(self) -> int:
        """One sequence per worker: the SEED paper's n thoughts."""
        if self.workers:
            return self.workers
        if self.beam_mode:  # one beam search per prompt
            return max(1, len(self.prompts))
        return len(self.prompts) if len(self.prompts) > 1 else 3

    def prompt_for(self, seq: int) -> str:
        return self.prompts[seq] if len(self.prompts) > 1 else self.prompts[0]

    def priority_of(self, worker: int) -> int:
        if not self.priorities:
            return 0
        return self.priorities[0] if len(self.priorities) == 1 else self.priorities[worker]

    def tickets_of(self, worker: int) -> int:
        if not self.tickets:
            return 100
        return self.tickets[0] if len(self.tickets) == 1 else self.tickets[worker]

    def to_dict(self) -> dict:
        return {**asdict(self), "lookup": self.draft_lookup}  # records say what the drafters used

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
