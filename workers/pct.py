"""PCT: a draft tree shaped by expected time gain, with the costs measured (``--tree pct``).

EDD/PCT (../shared/papers/003_49db5f3c92e73b63.txt, §3.2) estimates a node's chance of acceptance as
p̂ = ∏ c_i along its path (c_i: the draft's probability of token i, softmax at T = 1). The calibration
monitor shows how well that holds: the shipped draft is under-confident (tokens at c ≈ 0.6-0.9 were
accepted 83-100 % of the time), so the raw product stops trees early. This drafter therefore keeps the
monitor's bins over its own verdicts and multiplies calibrated chances ĉ(c_i) instead
(runtime/core/calibration.py: a bin's accepted share, shrunk towards c; c itself before any data).

Drafting one more level costs a draft forward s_d and gains p̂·s_t for a node that is then accepted,
so a node is expanded only while p̂ ≥ s_d / s_t (Eq. 5).
The paper takes the target's forward time s_t as a constant and values an accepted token at one
target forward. On a CPU every token a forward reads costs b more (the verifier's fitted curve
t = a + b·tokens + c·(rows − 1), which each verdict carries), and a verifier that commits E tokens
per forward spends t/E on each: that is what one more expected token is worth. So this drafter
prices both sides, with v = t(n̄ + 1) / Ē (n̄ its running mean tree size, Ē its running tokens
committed per round; v = t(1) until it has rounds to go by, the paper's s_t):

    a node enters the tree   iff  p̂ · v ≥ b        (and p̂ ≥ the leaf floor)
    a node gets children     iff  p̂ · v ≥ s_d      (s_d measured here, per draft level)
 Top-k children per node (default 5), depth ≤ 10, at most
`MAX_NODES` nodes. **Queue-aware, beyond the paper:** a draft that will wait in the run queue anyway
drafts deeper for free - while the time spent drafting stays within the expected wait (the drafts
queued ahead at the last verdict × the verifier's forward time), a level costs no latency and s_d
counts as 0.

Lossless whatever the shape. Greedy: children are the top-k by draft probability, pruned by the
rules (acceptance is argmax equality). Sampled: how many candidates a node gets is decided *before*
they are drawn (from p̂ and the node's distribution: the i-th most likely token must pass the entry
rule), then they are drawn as every tree draft draws them and never dropped; whether a drawn node
gets children may depend on it, as it only shapes what is verified after it was accepted.
"""

from __future__ import annotations

import time

import numpy as np

from ..runtime.backends.backend import LanguageModel
from ..runtime.core.calibration import Calibration
from ..runtime.core.sampling import SamplingParams, top_tokens
from .drafter import Proposal, TreeDrafter, softmax

MAX_NODES = 48          # a tree never reads more tokens than this into one verification
PRIOR_SD_ST = 0.1       # s_d / s_t until both are measured
RUNNING = 0.3           # weight of the newest value in the running means (s_d, n̄, Ē)


class PctDrafter(TreeDrafter):
    def __init__(self, model: LanguageModel, params: SamplingParams, rng: np.random.Generator,
                 prompt: list[int], *, top_k: int = 5, depth: int = 10, floor: float = 0.02,
                 replacement: bool = True, lookup: int = 0, calibration: Calibration | None = None) -> None:
        super().__init__(model, params, rng, prompt, k_config=(top_k,) * depth, replacement=replacement,
                         lookup=lookup)
        self.top_k, self.depth, self.floor = top_k, depth, floor
        self.step_s: float | None = None   # s_d: one draft level's forward, measured
        self.nodes: float | None = None    # n̄: running mean of the nodes per tree
        self.committed: float | None = None  # Ē: running mean of the tokens a verdict commits
        # acceptance by confidence over the verdicts seen: the worker's (over every sequence it drafted), if given
        self.calibration = calibration if calibration is not None else Calibration()
        self.judged: tuple[list[float], list[int]] | None = None  # the last tree's (confidences, parents)

    def thresholds(self, drafted_s: float) -> tuple[float, float]:
        """(entry, expansion): the p̂ a node needs to enter the tree, and to get children."""
        curve = self.curve
        if curve is None or self.step_s is None or curve.time(1) <= 0:
            return self.floor, PRIOR_SD_ST
        if self.nodes is None or not self.committed:
            value = curve.time(1)
        else:
            value = curve.time(round(self.nodes) + 1) / self.committed
        wait = self.queue_ahead * curve.time(self.top_k)
        s_d = 0.0 if drafted_s + self.step_s <= wait else self.step_s
        return max(self.floor, curve.b / value), s_d / value

    def observe(self, committed: list[int], path: list[int] | None = None, aside: int = 0,
                predictions: list[int] | None = None) -> None:
        super().observe(committed, path, aside)
        self.committed = _mean(self.committed, len(committed) - aside)  # what the draft itself earned
        if path is not None and self.judged is not None:
            confs, parents = self.judged
            self.calibration.add(np.asarray(confs), np.asarray(parents), list(path), greedy=self.params.greedy)
        self.judged = None

    def propose(self, budget: int) -> Proposal:
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[np.ndarray | None] = []
        confs: list[float] = []
        if budget <= 0 or not self.ready():
            self.base = len(self.cache)
            return self._proposal(tokens, parents, qs, confs)
        started = time.monotonic()
        root = self.model.root_row(self.cache, self.context)
        self.base = len(self.cache)
        frontier = [(-1, root, 1.0)]
        phat: list[float] = []
        for depth in range(min(self.depth, budget)):
            enter, expand = self.thresholds(time.monotonic() - started)
            level = []
            for parent, logits, p in frontier:
                probs = softmax(logits)
                for x, q in self._children(tokens, parents, parent, logits, probs, p, enter, depth):
                    if len(tokens) >= MAX_NODES:
                        break
                    tokens.append(x)
                    parents.append(parent)
                    confs.append(float(probs[x]))
                    phat.append(p * float(self.calibration.acceptance(probs[x])))
                    qs.append(q)
                    level.append(len(tokens) - 1)
            growing = [j for j in level if phat[j] >= expand]
            if not growing or depth + 1 >= min(self.depth, budget) or len(tokens) >= MAX_NODES:
                break
            # node j sits at cache index base + j: the whole level is read, its expandable nodes grow
            t0 = time.monotonic()
            at = [self.base + parents[j] if parents[j] >= 0 else self.base - 1 for j in level]
            rows = dict(zip(level, self.model.forward(self.cache, [tokens[j] for j in level], at)))
            self.observe_step(time.monotonic() - t0)
            frontier = [(j, rows[j], phat[j]) for j in growing]
        self.nodes = _mean(self.nodes, len(tokens))
        self.judged = (confs, parents)
        return self._proposal(tokens, parents, qs, confs)

    def observe_step(self, seconds: float) -> None:
        """One draft level's forward took `seconds`: s_d follows it (a running mean)."""
        self.step_s = _mean(self.step_s, seconds)

    def _children(self, tokens: list[int], parents: list[int], parent: int, logits: np.ndarray,
                  probs: np.ndarray, p: float, enter: float, depth: int):
        looked_up = self._lookup(tokens, parents, parent)
        if looked_up is not None:  # repeated text: one certain candidate (q = δ), as the tree drafter does
            yield self._certain(looked_up)
            return
        if self.params.greedy:
            top = top_tokens(logits, self.top_k)
            for x, chance in zip(top, self.calibration.acceptance(probs[top])):
                if p * chance >= enter:
                    yield int(x), None
            return
        # sampled: the width is fixed before any draw - the i-th likeliest token must pass the entry rule
        likeliest = np.sort(probs)[::-1][: self.top_k]
        width = int(np.sum(p * self.calibration.acceptance(likeliest) >= enter))
        yield from self._candidates(logits, width, depth)


def _mean(old: float | None, new: float) -> float:
    return float(new) if old is None else old + RUNNING * (new - old)
