"""PCT trees: which nodes enter and grow for given draft confidences and measured costs, and the
queue-aware depth. A hand-built draft: the distribution after a token depends on that token only."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from specsched.runtime.backends.backend import Cache, LanguageModel
from specsched.runtime.core.costs import CostCurve
from specsched.runtime.core.sampling import SamplingParams
from specsched.workers.pct import MAX_NODES, PctDrafter

V = 8


class TableModel(LanguageModel):
    """Logits after token t are log(table[t]); `forwards` counts draft forwards (levels)."""

    eos_token_id = None

    def __init__(self, table: dict[int, list[float]]) -> None:
        self.vocab_size = V
        self.table = {t: np.log(np.maximum(np.asarray(p, np.float64), 1e-12)).astype(np.float32)
                      for t, p in table.items()}
        self.forwards = 0

    def new_cache(self) -> Cache:
        return Cache()

    def forward(self, cache: Cache, tokens: Sequence[int], parents: Sequence[int] | None = None, *,
                first_row: int = 0) -> np.ndarray:
        self.forwards += 1
        cache.append(tokens, parents)
        return np.stack([self.table.get(int(t), self.table[-1]) for t in tokens[first_row:]])

    def keep(self, cache: Cache, indices: Sequence[int]) -> None:
        cache.select(list(indices))


def dist(**probs: float) -> list[float]:
    """A distribution over tokens 0..7 from keyword t<i>=p; the rest shares what is left."""
    out = np.zeros(V)
    for name, p in probs.items():
        out[int(name[1:])] = p
    rest = [i for i in range(V) if out[i] == 0]
    out[rest] = (1 - out.sum()) / len(rest)
    return out.tolist()


def drafter(table, *, curve: CostCurve | None, step_s: float | None, queue: int = 0, top_k: int = 3,
            depth: int = 10, floor: float = 0.02, greedy: bool = True) -> PctDrafter:
    d = PctDrafter(TableModel(table), SamplingParams(0.0 if greedy else 1.0), np.random.default_rng(0), [0],
                   top_k=top_k, depth=depth, floor=floor)
    d.curve, d.step_s, d.queue_ahead = curve, step_s, queue
    d.observe_step = lambda seconds: None  # s_d stays what the test says, however fast this machine is
    return d


# after 0 the draft is sure of 1 (0.9); after 1 it hesitates between 2 (0.5) and 3 (0.3); after 2 it
# is sure of 4 (0.8); after anything else it is lost (uniform)
TABLE = {0: dist(t1=0.9), 1: dist(t2=0.5, t3=0.3), 2: dist(t4=0.8), -1: [1 / V] * V}


def nodes(proposal) -> list[tuple[int, int]]:
    return list(zip(proposal.tokens.tolist(), proposal.parents.tolist()))


def test_a_node_enters_while_its_estimated_acceptance_pays_for_its_verification():
    # s_t = t(1) = 10 ms + 1 ms; b = 1 ms: a node needs p̂ >= 1/11 = 0.091 to enter; s_d = 0.5 ms: p̂ >= 0.045 to grow
    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005)
    p = d.propose(10)
    # 1 (0.9) -> 2 (0.45), 3 (0.27) -> under 2: 4 (0.36); under 3: uniform 0.034, none enters; under 4: none
    assert nodes(p) == [(1, -1), (2, 0), (3, 0), (4, 1)]
    assert p.conf.tolist() == pytest.approx([0.9, 0.5, 0.3, 0.8])


def test_a_dearer_token_in_the_verifier_prunes_harder():
    # b = 5 ms of s_t = 15 ms: p̂ >= 0.33 to enter: 3 (0.27) goes, 4 (0.36) stays
    d = drafter(TABLE, curve=CostCurve(0.010, 0.005, 0.0), step_s=0.0005)
    assert nodes(d.propose(10)) == [(1, -1), (2, 0), (4, 1)]


def test_a_dear_draft_step_stops_the_tree_early():
    # s_d / s_t = 0.5: only 1 (0.9) may grow; its children enter but get none of their own
    d = drafter(TABLE, curve=CostCurve(0.010, 0.0001, 0.0), step_s=0.00505, floor=0.05)
    p = d.propose(10)
    assert nodes(p) == [(1, -1), (2, 0), (3, 0)]
    assert d.model.forwards == 2  # the root read, then one level


def test_a_draft_that_will_wait_in_the_queue_drafts_deeper_for_free():
    # same costs as above, but 3 drafts are queued ahead: the wait (3 x t(3) = 3 x 10.3 ms) covers the levels
    d = drafter(TABLE, curve=CostCurve(0.010, 0.0001, 0.0), step_s=0.00505, queue=3)
    assert (4, 1) in nodes(d.propose(10))


def test_depth_budget_and_node_cap_bound_the_tree():
    sure = {t: dist(**{f"t{(t + 1) % V}": 0.99}) for t in range(V)} | {-1: [1 / V] * V}
    d = drafter(sure, curve=CostCurve(0.010, 0.0, 0.0), step_s=0.0)
    assert len(d.propose(3).tokens) == 3          # a chain of sure tokens, cut by the budget
    wide = {t: [1 / V] * V for t in range(V)} | {-1: [1 / V] * V}
    d = drafter(wide, curve=CostCurve(0.010, 0.0, 0.0), step_s=0.0, top_k=8, floor=1e-9)
    assert len(d.propose(10).tokens) == MAX_NODES


def test_sampled_widths_are_fixed_before_the_draw_and_every_drawn_token_is_kept():
    # after 0: p̂ of the likeliest tokens 0.9, then 0.014...: only one candidate is drawn, whatever it is
    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005, greedy=False)
    p = d.propose(1)
    assert len(p.tokens) == 1 and p.q.dense.shape == (1, V) and not p.q.point.any()
    assert p.q.row(0, V)[p.tokens[0]] > 0  # drawn from the q it travels with


def test_before_any_measurement_the_floor_and_a_prior_shape_the_tree():
    d = drafter(TABLE, curve=None, step_s=None, floor=0.3)
    assert nodes(d.propose(10)) == [(1, -1), (2, 0), (4, 1)]  # 3 (0.27) is under the floor


def test_a_token_is_worth_what_the_verifier_spends_on_one():
    # t = 10 ms + 1 ms/token; trees of 4 nodes (t(5) = 15 ms): committing 5 tokens a round, the verifier
    # spends 3 ms on each, so a node needs p̂ >= b / 3 ms = 0.33 to enter; 3 (p̂ 0.27) stays out
    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005)
    d.nodes, d.committed = 4.0, 5.0
    assert nodes(d.propose(10)) == [(1, -1), (2, 0), (4, 1)]
    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005)
    d.nodes, d.committed = 4.0, 1.5   # 10 ms a token: p̂ >= 0.1, and 3 enters
    assert (3, 0) in nodes(d.propose(10))


def test_a_draft_that_proved_under_confident_grows_deeper_trees():
    # b = 5 ms of s_t = 15 ms: p̂ >= 0.33 to enter. Raw, 3 (0.9 * 0.3 = 0.27) stays out; after 100 tokens at
    # c in [0.3, 0.4) were all accepted, ĉ(0.3) = (100 + 4 * 0.3) / 104 = 0.97 and 3 enters
    curve = CostCurve(0.010, 0.005, 0.0)
    raw = drafter(TABLE, curve=curve, step_s=0.0005).propose(10)
    assert (3, 0) not in nodes(raw)
    d = drafter(TABLE, curve=curve, step_s=0.0005)
    d.calibration.proposed[3] = d.calibration.accepted[3] = 100
    assert (3, 0) in nodes(d.propose(10))


def test_the_drafter_learns_its_calibration_from_its_verdicts():
    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005)
    p = d.propose(10)  # 1 -> 2, 3 -> 4 under 2
    d.observe([1, 2, 5], path=[0, 1])  # 1 and 2 accepted; 3 judged and rejected; 4 judged (parent 2 accepted)
    assert d.calibration.proposed.sum() == len(p.tokens) == 4
    assert d.calibration.accepted.sum() == 2


def test_a_worker_keeps_pct_calibration_over_every_sequence_it_drafts():

    from helpers import sim_config
    from loopback_decode import LoopbackSocket, NoTelemetry

    from specsched.runtime.backends.backend import get_backend
    from specsched.scheduler.jobs import JobState
    from specsched.scheduler.verifier import Verifier
    from specsched.workers.draft_worker import DraftWorker

    config = (sim_config(tree="pct", sim_vocab=64, max_new_tokens=12)).replace(mode="sd", workers=2, prompts=[],
                     sim_draft_ms=0.0, sim_verify_ms=0.0)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), NoTelemetry())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[s, s, 0, [5, 7 + s]] for s in (0, 1)]}, verifier.target))
    worker = DraftWorker(backend.draft(), 0, LoopbackSocket(verifier), NoTelemetry())
    worker.run_sequence(config, 0, 0, [5, 7])
    after_one = int(worker.calibrations[True].proposed.sum())
    worker.run_sequence(config, 1, 1, [5, 8])
    assert 0 < after_one < int(worker.calibrations[True].proposed.sum())  # the second sequence adds to the bins


def test_beside_self_draft_a_pct_drafter_counts_only_the_tokens_its_own_tree_earned():
    from specsched.workers.branch_drafter import BranchSettings, WithBranches

    d = drafter(TABLE, curve=CostCurve(0.010, 0.001, 0.0), step_s=0.0005)
    both = WithBranches(d, [0], BranchSettings(lanes=0, length=4))
    both.branches.context.add(0, (5, 6, 7, 5))  # after token 0 the context cache holds 5 6 7 5
    p = both.propose(10)
    cached = both.inner_size                     # the cache's chain follows the PCT tree
    assert p.tokens[cached:].tolist() == [5, 6, 7, 5]
    both.observe([5, 6, 7, 5, 2], path=[cached, cached + 1, cached + 2, cached + 3])
    assert d.committed == 1  # the target's own token; the cache's four are not the tree's yield
    assert both.propose(10).tokens[0] == 4       # after 2 the draft is sure of 4
    both.observe([4, 1], path=[0])               # its own token accepted, and the target's after it
    assert d.committed == pytest.approx(1 + 0.3 * (2 - 1))  # the running mean (RUNNING = 0.3) of 1, then 2
