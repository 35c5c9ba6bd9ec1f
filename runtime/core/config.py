"""The run configuration: every flag of `specsched run`, validated once, passed to every process.

Children receive it as JSON on stdin (``to_dict`` / ``from_dict``), never pickled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .config_checks import check
from .device import default_dtype, resolve_device
from .kinds import (  # noqa: F401 - re-exported: the package reads the kinds from config
    BACKENDS,
    BEAM_MODES,
    DRAFTERS,
    MODEL_BACKENDS,
    MODES,
    TRANSPORTS,
    BackendKind,
    ConfigError,
    DrafterKind,
    Mode,
    TransportKind,
    TreeKind,
)
from .sampling import SamplingParams

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
    branches: int = 1                # Self-Draft: branch lanes N per sequence (0 = caches only; CPU: docs/branches.md)
    branch_length: int = 8           # Self-Draft: tokens per lane L at most
    corpus_cache: str = "auto"       # Self-Draft: auto (the shipped one on hf, none on sim) | off | a .npz file
    branch_processes: bool = False   # Self-Draft: each lane in its own OS process (else in its sequence's worker)
    lockstep: bool = False           # verify only when every worker that owes a draft has one queued
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    coupling: str = "residual"       # sampled acceptance: residual (Leviathan) | gumbel (drafter-invariant text)
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
    policy_timeout_s: float = 10.0   # supervision: a policy's pick (served, constructor) running longer is stopped
    verdict_timeout_s: float = 10.0  # supervision: a worker waiting this long for a verdict probes (draft_worker.py)
    listen: str | None = None        # tcp: HOST:PORT where workers on other hosts join (specsched worker --connect)
    keys: str | None = None          # tcp: engine.key (or its directory) from `specsched keys`; None = keys per run

    def __post_init__(self) -> None:
        check(self)

    @property
    def beam_mode(self) -> bool:
        return self.mode in BEAM_MODES

    @property
    def target_only(self) -> bool:
        """No draft workers: the verifier decodes alone (ar, parallel, beam)."""
        return self.mode in (Mode.AR, Mode.PARALLEL, Mode.BEAM)

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
        return SamplingParams(self.temperature, self.top_k, self.top_p, self.coupling)

    @property
    def elastic_threads(self) -> bool:
        """The verifier's threads follow the drafting workers (scheduler/cores.py): the default on hf. Fixed
        --verifier-threads N turns it off, and so does llamacpp, which keeps every core: its batched
        kernels are compute-bound (a verification of 5 tokens on 1 thread takes twice as long as on 2), and
        measured on a 2-core machine, every core made seed-fcfs 1.4x faster than elastic threads (docs/llamacpp.md)."""
        return self.verifier_threads == 0 and self.backend != BackendKind.LLAMACPP

    @property
    def model_device(self) -> str:
        """Where this machine runs the models: --device resolved ("cpu" or "cuda:N"; imports torch unless
        cpu). The sim backend has no models and llama.cpp runs on the CPU: "cpu" for both."""
        if self.backend != BackendKind.HF:
            return "cpu"
        return resolve_device(self.device)

    @property
    def model_dtype(self) -> str:
        """The dtype the models load in: --dtype, or for auto bf16 on CUDA and fp32 on the CPU."""
        if self.dtype != "auto":
            return self.dtype
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
    def why_text_varies(self) -> str:
        """Why the same seed may give another text, '' if it may not (every command that compares texts says
        it so). Sampling with flags that shape drafts from measured times (--tree pct's cost curve, --step-aside
        on), each run or policy draws another text from the target's law, so only a greedy run's text can be
        checked against another."""
        timed = [flag for flag, on in (("--tree pct", self.tree == TreeKind.PCT), ("--step-aside on", self.steps_aside))
                 if on]
        if self.temperature <= 0 or not timed:
            return ""
        return (f"it samples (--temperature {self.temperature:g}) with {' and '.join(timed)}, whose drafts are "
                "shaped by measured times, so its text varies from run to run, each a draw from the target's law")

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
