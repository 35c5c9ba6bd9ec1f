"""Drafters: what a draft worker runs to propose tokens. The worker kind is pluggable.

A drafter owns one sequence's draft-side state (model cache, RNG stream). ``propose`` returns a
Draft-shaped proposal (tokens, parents, q); ``observe`` takes the verdict's committed tokens and
accepted path. Chains and k_config trees are here; beam and n-gram drafters fit the same seam.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..runtime.backends.backend import ChainPlan, LanguageModel
from ..runtime.core.costs import CostCurve
from ..runtime.core.coupling import race, winners
from ..runtime.core.draft_q import DraftQ
from ..runtime.core.sampling import SamplingParams, distribution, sample, top_tokens
from .lookup import NgramIndex


@dataclass(slots=True)
class Proposal:
    tokens: np.ndarray          # int32 [n]
    parents: np.ndarray         # int32 [n]
    q: DraftQ | None            # what each token was drawn from (a point mass for a looked-up one); None when greedy
    conf: np.ndarray | None = None  # float32 [n]: the draft's probability of each token, softmax at T = 1
    lanes: int = 0              # the last `lanes` tokens are branch lanes, read but not verified (branch_lanes.py)


class Drafter(ABC):
    def __init__(self, model: LanguageModel, params: SamplingParams, rng: np.random.Generator,
                 prompt: list[int]) -> None:
        self.model = model
        self.params = params
        self.rng = rng
        self.context = list(prompt)  # the committed sequence: prompt + verified tokens
        self.cache = model.new_cache()
        self.base = 0                # cache index of the first draft token of the last proposal
        self.curve: CostCurve | None = None  # the verifier's measured forward cost, from the last verdict
        self.queue_ahead = 0         # drafts that were still waiting in the run queue at the last verdict
        self.clocks = (0, 0)         # coupled: the (seed, sequence) of the sequence's race (coupling.py)

    @abstractmethod
    def propose(self, budget: int) -> Proposal:
        """Draft after the committed context; no path through the draft may exceed ``budget``."""

    def close(self) -> None:
        """The sequence is done (or its worker stops): release what the drafter holds. Default: nothing."""

    def ready(self) -> bool:
        """Whether the model can draft after the context now (a feature draft waits for its features)."""
        return self.model.can_draft(self.cache, self.context)

    def features_held(self) -> int:
        """The target's feature rows this drafter holds (the draft says it; -1: its model reads none)."""
        return self.model.features_held(self.cache)

    def take_features(self, start: int, rows) -> None:
        """A verdict's feature rows, from prefix position `start` on."""
        self.model.take_features(self.cache, start, rows)

    def hear(self, curve: CostCurve | None, queue_ahead: int) -> None:
        """What the verdict says of the verifier: its cost curve and its queue (cost-aware drafters use it)."""
        if curve is not None:
            self.curve = curve
        self.queue_ahead = queue_ahead

    def observe(self, committed: list[int], path: list[int] | None = None, aside: int = 0,
                predictions: list[int] | None = None) -> None:
        """Take a verdict: extend the context; collapse a drafted tree to its accepted path. `aside`: how
        many of the committed tokens this drafter did not earn - the verifier decoded them alone while the
        sequence stepped aside, or another source's candidates won them (`--drafter both`);
        `predictions`: the target's argmax after each branch-lane token (branch_drafter.py reads them).

        A chain needs no collapsing - the next ``sync_to`` crops it to what was committed.
        """
        if path is not None and not self.cache.linear:
            kept = [self.base + j for j in path if self.base + j < len(self.cache)]
            self.model.keep(self.cache, [*range(self.base), *kept])
        self.context.extend(committed)


class TreeDrafter(Drafter):
    """A token tree shaped by k_config, one draft forward per depth (SEED §3.2, Appendix B).

    k_config (2, 2, 1) samples 2 candidates after the context, 2 children under each, 1 under each
    of those: 2 + 4 + 4 = 10 tokens, in level order. (1, 1, 1) is the plain chain of length 3.
    Candidates are drawn from q - never taken deterministically as the top-k when sampling, which
    would not be lossless - i.i.d. (with replacement) or each from q with the earlier siblings
    removed (``replacement=False``); each token travels with the exact q it was drawn from.
    """

    def __init__(self, model: LanguageModel, params: SamplingParams, rng: np.random.Generator,
                 prompt: list[int], *, k_config: tuple[int, ...], replacement: bool = True, lookup: int = 0,
                 min_confidence: float = 0.0) -> None:
        super().__init__(model, params, rng, prompt)
        self.k_config = k_config
        self.replacement = replacement
        self.min_confidence = min_confidence  # below depth 0, draft only where max softmax(logits) >= this
        self.ngrams = NgramIndex(lookup) if lookup >= 2 else None  # lookup.py: repeated text first
        if self.ngrams is not None:
            self.ngrams.extend(self.context)

    def observe(self, committed: list[int], path: list[int] | None = None, aside: int = 0,
                predictions: list[int] | None = None) -> None:
        super().observe(committed, path, aside)
        if self.ngrams is not None:
            self.ngrams.extend(committed)

    def propose(self, budget: int) -> Proposal:
        shape = self.k_config[:max(budget, 0)] if self.ready() else ()
        if (shape and set(shape) == {1} and self.model.draws_chains and not self.min_confidence
                and not self.params.coupled):
            return self._chain_drawn_by_model(len(shape))
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[np.ndarray | None] = []  # sampled: each token's q, None for a point mass (DraftQ.of)
        confs: list[float] = []
        if shape:
            root = self.model.root_row(self.cache, self.context)
            self.base = len(self.cache)
            frontier = [(-1, root)]
            for depth, width in enumerate(shape):
                level = []
                for parent, logits in frontier:
                    looked_up = self._lookup(tokens, parents, parent)
                    if looked_up is not None:  # q = δ_x, one candidate (siblings of a sure token are waste)
                        candidates = [self._certain(looked_up)]
                    elif depth and self.min_confidence and confidence(logits) < self.min_confidence:
                        continue  # the draft doubts itself here: stop this branch (draft-side, so lossless)
                    else:
                        candidates = self._candidates(logits, width, depth)
                    probs = softmax(logits)
                    for x, q in candidates:
                        tokens.append(x)
                        parents.append(parent)
                        confs.append(float(probs[x]))
                        qs.append(q)
                        level.append(len(tokens) - 1)
                if not level:
                    break
                if depth + 1 < len(shape):
                    # node j sits at cache index base + j: levels are fed in order, the last is not
                    at = [self.base + parents[j] if parents[j] >= 0 else self.base - 1 for j in level]
                    rows = self.model.forward(self.cache, [tokens[j] for j in level], at)
                    frontier = list(zip(level, rows))
        else:
            self.base = len(self.cache)
        return self._proposal(tokens, parents, qs, confs)

    def _chain_drawn_by_model(self, k: int) -> Proposal:
        """The same chain as propose's loop, drawn by the model (on its device: device_chain.py; over its own
        vocabulary: feature_chain.py): one uniform per token, taken up front in the order the loop takes them;
        the lookup reads the chain drafted so far."""
        guide = None
        if self.ngrams is not None:
            def guide(drafted: list[int]) -> int | None:
                return self._lookup(drafted, list(range(-1, len(drafted) - 1)), len(drafted) - 1)
        uniforms = None if self.params.greedy else self.rng.random(k)
        chain = self.model.draft_chain(self.cache, self.model.sync_to(self.cache, self.context),
                                       ChainPlan(k, self.params, uniforms, guide))
        self.base = len(self.cache) - (k - 1)  # the first draft token's cache index: k - 1 of them were read
        return Proposal(chain.tokens, np.arange(-1, k - 1, dtype=np.int32), chain.q, chain.conf)

    def _lookup(self, tokens: list[int], parents: list[int], node: int) -> int | None:
        """What followed the latest earlier occurrence of the text ending at draft node `node` (-1: root)."""
        if self.ngrams is None:
            return None
        path: list[int] = []
        while node >= 0 and len(path) < self.ngrams.longest:
            path.append(tokens[node])
            node = parents[node]
        tail = self.context[-(self.ngrams.longest - len(path)):] if len(path) < self.ngrams.longest else []
        return self.ngrams.lookup([*tail, *reversed(path)])

    def _certain(self, token: int) -> tuple[int, None]:
        """A looked-up token, drawn from q = δ_token: a point mass (DraftQ), so no row. Sampled, the draw
        still takes its one uniform (sampling.sample's), so the stream advances as for a model candidate."""
        if not self.params.greedy:
            self.rng.random()
        return token, None

    def _proposal(self, tokens: list[int], parents: list[int], qs: list[np.ndarray | None],
                  confs: list[float]) -> Proposal:
        """`qs`: each token's q, None for a point mass; ignored when greedy (no q travels)."""
        q = None if self.params.greedy else DraftQ.of(qs, self.model.vocab_size)
        return Proposal(np.asarray(tokens, np.int32), np.asarray(parents, np.int32), q, np.asarray(confs, np.float32))

    def _candidates(self, logits: np.ndarray, width: int, depth: int) -> Iterator[tuple[int, np.ndarray | None]]:
        """`width` children of a node at `depth` below the context, each with the q it was drawn from."""
        if self.params.greedy:  # deterministic top-width: lossless because acceptance is argmax equality
            for x in top_tokens(logits, width):
                yield int(x), None
            return
        q = distribution(logits[None], self.params)[0]
        if self.params.coupled:  # the race's front-runners under q: the verifier's y is the race's winner under p
            clocks = race(*self.clocks, len(self.context) + depth, len(q))
            for x in winners(q, clocks, width):
                yield x, q
            return
        for _ in range(width):
            x = sample(q, self.rng)
            yield x, q  # the very array x was drawn from travels to the verifier
            if not self.replacement:
                q = q.copy()
                q[x] = 0.0
                if q.sum() <= 0:
                    return
                q /= q.sum()


class ChainDrafter(TreeDrafter):
    """A chain of up to ``k`` tokens, one draft forward each: the SEED paper's draft model."""

    def __init__(self, model: LanguageModel, params: SamplingParams, rng: np.random.Generator,
                 prompt: list[int], k: int = 64) -> None:
        super().__init__(model, params, rng, prompt, k_config=(1,) * k)


def confidence(logits: np.ndarray) -> float:
    """The draft's top probability at temperature 1: max softmax = 1 / sum exp(l - max l)."""
    top = logits.max()
    return float(1.0 / np.exp(logits - top, dtype=np.float64).sum())


def softmax(logits: np.ndarray) -> np.ndarray:
    """The draft's distribution at temperature 1 (what PCT's c_i and the calibration monitor read).

    float32: it runs for every drafted node, and over a 49k vocabulary float64 costs ~0.7 ms against
    ~0.06 ms (a fifth of a draft forward); these probabilities only estimate, they never sample."""
    e = np.exp(logits - logits.max())
    return e / e.sum()
