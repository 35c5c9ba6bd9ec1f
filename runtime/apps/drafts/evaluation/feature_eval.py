"""Draft quality on held-out prompts: serial speculative decoding with the runtime's own parts.

One process plays both sides, with the code the processes run: the draft worker's drafter
(workers/drafter.py) over the draft model, and the verifier's layout, acceptance rule and feature rows
(scheduler/layout.py, scheduler/acceptance.py, scheduler/features.py). So a feature draft reads exactly
what a verdict would carry, and a draft's first proposal of a prompt is empty, as in a run: it has no
features yet. Greedy output equals target-only decoding by construction (acceptance is argmax equality);
sampled output follows the target's law (speculative sampling).

    α = accepted / drafted,   tokens per verification = committed / target forwards.

`cost` times one draft step against one target forward, paired (target, then k draft steps, repeated;
medians), after `context` tokens: the host's speed drifts, and pairing keeps the ratio steady.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .....scheduler.features import attach, keep_features
from .....scheduler.jobs import SequenceState
from .....scheduler.layout import lay_out, settle
from .....workers.drafter_choice import make_drafter
from ....backends.backend import LanguageModel
from ....core.messages import Verdict
from ....core.sampling import SamplingParams, stream

GREEDY = SamplingParams()


@dataclass(slots=True)
class Tally:
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    verifications: int = 0
    reached: list[int] = field(default_factory=lambda: [0] * 8)  # reached[d]: rounds that drafted a (d+1)-th token
    passed: list[int] = field(default_factory=lambda: [0] * 8)   # passed[d]: ... whose (d+1)-th was accepted

    @property
    def alpha(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def per_verification(self) -> float:
        return self.committed / self.verifications if self.verifications else 0.0

    def add(self, other: Tally) -> None:
        for k, v in asdict(other).items():
            mine = getattr(self, k)
            setattr(self, k, [a + b for a, b in zip(mine, v)] if isinstance(v, list) else mine + v)

    def by_position(self) -> list[float]:
        """Acceptance at draft position d given the d earlier ones were accepted (chains)."""
        return [round(p / r, 3) for p, r in zip(self.passed, self.reached) if r]

    def row(self) -> dict:
        return {"drafted": self.drafted, "accepted": self.accepted, "committed": self.committed,
                "verifications": self.verifications, "alpha": round(self.alpha, 4),
                "per_verification": round(self.per_verification, 3), "by_position": self.by_position()}


def pooled(tallies: list[Tally]) -> Tally:
    total = Tally()
    for t in tallies:
        total.add(t)
    return total


def _excess(tallies: list[Tally]) -> tuple[list[float], int]:
    """Each prompt's e_i = a_i − α d_i (accepted, drafted; α pooled over the prompts), and D = Σ d_i."""
    alpha = pooled(tallies).alpha
    return [t.accepted - alpha * t.drafted for t in tallies], sum(t.drafted for t in tallies)


def alpha_error(tallies: list[Tally]) -> float:
    """The standard error of the pooled α = Σ a_i / Σ d_i over prompts i, the prompts as the independent units
    (a prompt's tokens are not): by the ratio estimator's delta method, SE² = Σ e_i² / D²."""
    excess, total = _excess(tallies)
    return math.sqrt(sum(e * e for e in excess)) / total if total else 0.0


def paired_alpha(first: list[Tally], other: list[Tally]) -> tuple[float, float]:
    """α(other) − α(first) over the same prompts, and its standard error: linearised as above, the difference
    is Σ_i (e'_i / D' − e_i / D), each draft's excess over its own total, so what a prompt does to both drafts
    cancels term by term."""
    (e0, d0), (e1, d1) = _excess(first), _excess(other)
    terms = [b / d1 - a / d0 for a, b in zip(e0, e1)]
    return pooled(other).alpha - pooled(first).alpha, math.sqrt(sum(x * x for x in terms))


def per_prompt(target: LanguageModel, draft: LanguageModel, prompts: list[list[int]], *, max_new: int,
               params: SamplingParams = GREEDY) -> list[Tally]:
    """Each prompt decoded serially with k = 4 chains, seed i for prompt i: its tally."""
    return [speculate(target, draft, ids, max_new=max_new, k=4, params=params, seed=i)[1]
            for i, ids in enumerate(prompts)]


def speculate(target: LanguageModel, draft: LanguageModel, prompt: list[int], *, max_new: int, k: int = 4,
              params: SamplingParams = GREEDY, seed: int = 0, lookup: int = 0) -> tuple[list[int], Tally]:
    """One prompt, decoded serially with k-token chains: (the tokens, the tally)."""
    st = SequenceState(0, 0, 0, list(prompt), target.new_cache(), seed=seed)
    drafter = make_drafter(draft, params, stream(seed, 0, "draft", 0), list(prompt), k_config=(1,) * k,
                           lookup=lookup, clocks=(seed, 0))
    target.want_features = drafter.features_held() >= 0
    tally = Tally()
    while len(st.generated) < max_new:
        drafter.rng = stream(seed, 0, "draft", len(st.generated))
        proposal = drafter.propose(max_new - len(st.generated) - 1)
        st.held = drafter.features_held()
        layout = lay_out(target, st.cache, st.context, proposal.tokens, proposal.parents)
        rows = target.forward(st.cache, layout.tokens, layout.parents, first_row=layout.first_row)
        outcome = settle(target, st.cache, layout, rows, proposal.tokens, proposal.parents, proposal.q, params,
                         st.draws(), race=st.race())
        keep_features(target, st, layout, target.features[0] if target.want_features else None, outcome.path)
        tokens = outcome.tokens[:max_new - len(st.generated)]
        if target.eos_token_id in tokens:
            tokens = tokens[:tokens.index(target.eos_token_id) + 1]
        verdict = attach(Verdict(0, 0, outcome.accepted, np.asarray(tokens, np.int32),
                                 np.asarray(outcome.path, np.int32)), st)
        if verdict.features is not None:
            drafter.take_features(verdict.features_from, verdict.features)
        drafter.observe(tokens, outcome.path)
        st.generated += tokens
        tally.drafted += len(proposal.tokens)
        tally.accepted += outcome.accepted
        tally.committed += len(tokens)
        tally.verifications += 1
        for d in range(min(len(proposal.tokens), 8)):
            if d <= outcome.accepted:  # the d-th token was judged: every one before it was accepted
                tally.reached[d] += 1
                tally.passed[d] += d < outcome.accepted
        if target.eos_token_id in tokens:
            break
    return st.generated, tally


def cost(target: LanguageModel, draft: LanguageModel, *, context: int = 128, rounds: int = 30,
         k: int = 4) -> tuple[float, float]:
    """Median ms of a 1-token target forward and of one draft step after `context` tokens, timed paired."""
    rng = np.random.default_rng(0)
    top = min(1000, target.vocab_size)
    prefix = rng.integers(2, top, context).tolist()
    tc, dc = target.new_cache(), draft.new_cache()
    target.want_features = draft.features_held(dc) >= 0
    target.forward(tc, prefix)
    if target.want_features:
        draft.take_features(dc, 0, target.features[0][:-1])
    draft.root_row(dc, prefix)
    times: dict[str, list[float]] = {"target": [], "draft": []}
    for r in range(rounds + 2):
        t0 = time.perf_counter()
        target.forward(tc, [int(rng.integers(2, top))])
        if r >= 2:
            times["target"].append(time.perf_counter() - t0)
        target.crop(tc, context)
        base = len(dc)
        for _ in range(k):
            t0 = time.perf_counter()
            draft.forward(dc, [int(rng.integers(2, top))], [len(dc) - 1])
            if r >= 2:
                times["draft"].append(time.perf_counter() - t0)
        draft.crop(dc, base)
    return 1e3 * statistics.median(times["target"]), 1e3 * statistics.median(times["draft"])
