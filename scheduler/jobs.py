"""What the verifier knows of each job: its settings, its sequences and which worker owns each one.

The engine announces a job (``job`` message) before any of its drafts can arrive, with every
sequence's global id, its index inside the job, its tokenised prompt and its owner - the draft worker
whose drafts alone may extend it (none for target-only jobs). Global ids are unique over the engine's
life, so drafts of concurrent jobs share one run queue without ambiguity; RNG streams are keyed by the
job's seed and the sequence's index *inside* the job, so a job's output never depends on what ran
before it or beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..runtime.backends.backend import Cache, LanguageModel, Traffic
from ..runtime.core.beam_state import BeamState
from ..runtime.core.config import Mode, RunConfig
from ..runtime.core.coupling import Race
from ..runtime.core.sampling import stream


@dataclass(slots=True)
class SequenceState:
    seq: int                     # global id (unique in the engine)
    local: int                   # index inside its job: 0..n-1
    job: int
    prompt: list[int]
    cache: Cache
    owner: int = -1              # the draft worker allowed to extend it; -1 = target only
    generated: list[int] = field(default_factory=list)
    rounds: int = 0
    done: bool = False
    yield_mean: float = 0.0      # running mean of tokens a verification of its drafts commits (0: none yet)
    beam_workers: list[int] = field(default_factory=list)  # dsbd: the draft worker of each beam slot
    epoch: int = 0               # restarts of its worker it has resumed after (scheduler/resume.py)
    seed: int = 0                # the job's seed and the stream's purpose, for draws()
    purpose: str = "verify"
    held: int = -1               # feature rows its drafter holds, as its last draft said (-1: it reads none)
    features: np.ndarray | None = None  # float16 [cache entries, d]: the target's features (features.py)

    @property
    def context(self) -> list[int]:
        return self.prompt + self.generated

    def draws(self) -> np.random.Generator:
        """The random stream of the sequence's next verification (or target step): keyed by its position
        (tokens committed), so a restarted process draws what the undisturbed run would (sampling.stream).
        Every verification commits at least one token, so no position is drawn at twice."""
        return stream(self.seed, self.local, self.purpose, len(self.generated))

    def race(self) -> Race:
        """The sequence's clocks from its next token on (`--coupling gumbel`): keyed by the token's place in
        the sequence, prompt included, as the draft worker keys the same clocks (runtime/core/coupling.py)."""
        return Race(self.seed, self.local, len(self.prompt) + len(self.generated))


@dataclass(slots=True)
class Counters:
    verifications: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    rejected_messages: int = 0
    batched_drafts: int = 0      # drafts verified; / verifications = mean batch size
    aside_tokens: int = 0        # committed while the sequence stepped aside (decoded by the target alone)
    lane_tokens: int = 0         # branch-lane tokens read (Self-Draft): forward work that verifies nothing
    h2d_bytes: int = 0           # host -> device bytes of the target's forwards (inputs, tree masks); 0 on the CPU
    d2h_bytes: int = 0           # device -> host bytes of them (the logits the acceptance rule reads); 0 on the CPU


@dataclass(slots=True)
class JobState:
    id: int
    config: RunConfig
    sequences: list[SequenceState]
    arrival: float = 0.0         # when the job was submitted (time.monotonic())
    priority: int = 0            # the job's priority (lower = more urgent)
    deadline: float | None = None  # absolute time.monotonic() deadline, if any
    counters: Counters = field(default_factory=Counters)
    rejected_before: int = 0     # the verifier's rejected-message count when the job arrived
    beam_states: dict[int, BeamState] = field(default_factory=dict)  # by index in the job: where a beam
                                 # sequence stood when a dead verifier last reported it (beam_jobs.py)

    @property
    def target_only(self) -> bool:
        return self.config.target_only

    @property
    def done(self) -> bool:
        return all(st.done for st in self.sequences)

    def owing(self) -> int:
        """Drafts this job still owes the run queue at a time: one per unfinished sequence in seed mode,
        at most one in sd mode (its single worker drafts its sequences one after another)."""
        unfinished = sum(not st.done for st in self.sequences)
        return unfinished if self.config.mode == Mode.SEED else min(unfinished, 1)

    @classmethod
    def from_message(cls, fields: dict, target: LanguageModel) -> JobState:
        """A job as the engine announces it; re-announced to a restarted verifier, each sequence comes with
        what it has committed (``generated``, ``done``), which the first verification re-reads, and a beam
        sequence with its beams (``beam_states``)."""
        config = RunConfig.from_dict(fields["config"])
        purpose = "target" if config.mode in (Mode.AR, Mode.PARALLEL) else "verify"
        slots = fields.get("beam_workers") or [[] for _ in fields["sequences"]]
        seqs = [SequenceState(int(g), int(local), int(fields["job"]), [int(t) for t in prompt], target.new_cache(),
                              int(owner), beam_workers=list(beams), seed=config.seed, purpose=purpose)
                for (g, local, owner, prompt), beams in zip(fields["sequences"], slots)]
        for st, generated, done in zip(seqs, fields.get("generated") or [], fields.get("done") or []):
            st.generated, st.done = [int(t) for t in generated], bool(done)
        deadline = fields.get("deadline")
        beam_states = {i: BeamState.from_dict(d) for i, d in enumerate(fields.get("beam_states") or []) if d}
        return cls(int(fields["job"]), config, seqs, float(fields.get("arrival", 0.0)),
                   int(fields.get("priority", 0)), None if deadline is None else float(deadline),
                   beam_states=beam_states)


def count_traffic(moved: Traffic, counters: list[Counters]) -> None:
    """A forward's host <-> device bytes, counted for each of `counters` (the verifier's, each job's it served)."""
    for c in counters:
        c.h2d_bytes += moved.h2d
        c.d2h_bytes += moved.d2h


def running_mean(mean: float, value: float, n: int, weight: float = 0.3) -> float:
    """A running mean that starts as the first value (n = 1) and then follows the newest with `weight`."""
    return float(value) if n <= 1 else mean + weight * (value - mean)


def commit(st: SequenceState, tokens: list[int], eos: int | None, limit: int) -> list[int]:
    """Append verified tokens, stopping at EOS (kept) or at the token limit. Returns what was kept."""
    kept = []
    for t in tokens:
        if len(st.generated) >= limit:
            break
        st.generated.append(t)
        kept.append(t)
        if t == eos:
            break
    st.done = len(st.generated) >= limit or (eos is not None and bool(kept) and kept[-1] == eos)
    return kept
