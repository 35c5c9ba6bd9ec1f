"""The run configuration: every flag of `specsched run`, validated once, passed to every process.

A RunConfig holds the run's own settings and its parts (config_parts.py), each of which checks itself:
the draft's shape, Self-Draft's lanes, the sim pair, supervision, the network, sampling and beams. Outside
the code a setting keeps its flag's flat name (`--sim-verify-ms`, `"sim_verify_ms"` in a record, a workload
or `Engine.submit`): `RunConfig.of`, `replace`, `to_dict` and `from_dict` speak those names, through
`SETTINGS`, the one table from a flat name to its part. Children receive the config as JSON on stdin
(`to_dict` / `from_dict`), never pickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from .config_checks import check
from .config_parts import BeamShape, BranchLanes, DraftShape, Network, SimSettings, Supervision
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

# The parts by field name; each part's FLAGS names its settings' flat names.
PARTS = {"shape": DraftShape, "lanes": BranchLanes, "sim": SimSettings, "supervision": Supervision,
         "network": Network, "sampling": SamplingParams, "beam": BeamShape}
# flat name -> (part, its field): every setting that lives in a part
SETTINGS: dict[str, tuple[str, str]] = {
    flat: (part, leaf) for part, cls in PARTS.items() for flat, leaf in cls.FLAGS.items()}


@dataclass(slots=True)
class RunConfig:
    """Every setting of a run: its own fields, then its parts (`shape`, `lanes`, `sim`, `supervision`, `network`,
    `sampling`, `beam`). Made, it has been checked (ConfigError otherwise); by flat names: `RunConfig.of`."""

    workers: int = 0                 # 0 = one per prompt (or 3 with a single prompt)
    max_batch: int = 1               # drafts per target forward a batching policy may pick; 0 = all
    step_aside: str = "off"          # on: a sequence is decoded by the target alone while drafting does not pay
    drafter: str = "model"           # model | branches (Self-Draft: lanes and caches, no draft model) | both
    lockstep: bool = False           # verify only when every worker that owes a draft has one queued
    max_new_tokens: int = 32
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
    device: str = "auto"             # hf: auto (a CUDA GPU when torch sees one) | cpu | cuda | cuda:N
    dtype: str = "auto"              # auto = bf16 on CUDA, fp32 on the CPU (model_dtype)
    verifier_threads: int = 0        # 0 = all cores
    shape: DraftShape = field(default_factory=DraftShape)
    lanes: BranchLanes = field(default_factory=BranchLanes)
    sim: SimSettings = field(default_factory=SimSettings)
    supervision: Supervision = field(default_factory=Supervision)
    network: Network = field(default_factory=Network)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    beam: BeamShape = field(default_factory=BeamShape)

    def __post_init__(self) -> None:
        check(self)

    @classmethod
    def of(cls, **settings) -> RunConfig:
        """A RunConfig from settings by their flat names (`temperature=1.0, sim_verify_ms=5`); parts given
        whole (`sim=SimSettings(...)`) are taken too."""
        return cls().replace(**settings)

    def replace(self, **settings) -> RunConfig:
        """This config with settings changed, by their flat names or as whole parts; checked again. An unknown
        name is a ConfigError naming it."""
        own = {f.name for f in fields(self)}
        if unknown := sorted(set(settings) - own - set(SETTINGS)):
            raise ConfigError(f"unknown setting {unknown[0]!r}: settings are `specsched run`'s flags, "
                              "by their flat names (sim_verify_ms for --sim-verify-ms)")
        changes = {name: value for name, value in settings.items() if name in own}
        by_part: dict[str, dict] = {}
        for name, value in settings.items():
            if name not in own:
                part, leaf = SETTINGS[name]
                by_part.setdefault(part, {})[leaf] = value
        for part, leaves in by_part.items():
            changes[part] = replace(changes.get(part, getattr(self, part)), **leaves)
        return replace(self, **changes)

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
                "dsbd": self.n_sequences * self.beam.slots_at_start}.get(self.mode, 0)

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
        if self.shape.lookup is not None:
            return self.shape.lookup
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
        timed = [flag for flag, on in (("--tree pct", self.shape.tree == TreeKind.PCT),
                                       ("--step-aside on", self.steps_aside)) if on]
        if self.sampling.temperature <= 0 or not timed:
            return ""
        return (f"it samples (--temperature {self.sampling.temperature:g}) with {' and '.join(timed)}, whose drafts "
                "are shaped by measured times, so its text varies from run to run, each a draw from the target's law")

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
        """Every setting by its flat name (the form records, workloads and the children read)."""
        flat = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in PARTS}
        for name, (part, leaf) in SETTINGS.items():
            flat[name] = getattr(getattr(self, part), leaf)
        return {**flat, "lookup": self.draft_lookup}  # records say what the drafters used

    @classmethod
    def from_dict(cls, data: dict) -> RunConfig:
        """The inverse of `to_dict`; names this specsched does not know are left out (rerun refuses them)."""
        return cls.of(**{k: v for k, v in data.items() if k in known_settings()})


def known_settings() -> set[str]:
    """Every setting's flat name: a run's own fields and its parts' settings."""
    return {f.name for f in fields(RunConfig) if f.name not in PARTS} | set(SETTINGS)
