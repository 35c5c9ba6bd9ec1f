"""Theorem 3.1 of the DSBD paper, tested exactly: whatever the draft's q, the W_L beams a verified layer
outputs are i.i.d. from the target's p_beam, so their multiset is Multinomial(W_L, p_beam); over whole
iterations DSBD decodes as target-only beam sampling, and at temperature 0 as beam search.

Statistics. Pearson's chi-square of the output multisets against their exact multinomial
probabilities, cells pooled until each expects >= 5 (tests/chi2.py). A correct implementation fails a
test with probability about ALPHA = 1e-4 for a random seed, so the 12 statistical tests below would
fail together with probability < 1.2e-3; the seeds are fixed, so every run gives the same verdict and
nothing is flaky. The power tests run the same check, at the same sample size, on the reference code's
departures from the theorem and require p < 1e-6.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from types import SimpleNamespace

import numpy as np
import pytest
from beam_models import ToyModel, beam_sampling_law, decode, multinomial_law
from chi2 import chi2_goodness_of_fit

from specsched.runtime.core.beam_width import DynamicWidth, acceptance_chain, accepted_count_law
from specsched.runtime.core.beams import beam_distribution, draw, joint_logprobs, log_softmax
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_acceptance import verify_layer
from specsched.scheduler.beam_forest import DraftLayer, Forest, verify_forest

ALPHA = 1e-4
POWER = 1e-6
TRIALS = 12_000  # layers verified per test


def layer_case(agreement: str, params: SamplingParams, rows: int = 2, vocab: int = 5, seed: int = 0):
    """A target joint [rows, vocab], its p_beam, and a draft q over the same cells: equal to p, close to
    it, or unrelated (with the draft's own warp, so q can miss cells where p has mass)."""
    rng = np.random.default_rng(seed)
    joint = joint_logprobs(rng.normal(-2, 1, rows), log_softmax(rng.normal(0, 1.5, (rows, vocab))))
    p = beam_distribution(joint, params)
    if agreement == "same":
        q = p
    elif agreement == "close":
        q = 0.7 * p + 0.3 * rng.dirichlet(np.ones(p.size)).reshape(p.shape)
    else:
        q = beam_distribution(rng.normal(0, 1.5, (rows, vocab)), params)
    return joint, p, q


def layer_multisets(p, q, drafts: int, width: int, seed: int, draft=draw, verify=verify_layer) -> list[tuple]:
    """Draft ``drafts`` beams from q, verify them, and keep the sorted cells of the W_L outputs."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(TRIALS):
        parents, tokens = draft(q, drafts, rng)
        o = verify(p, q, parents, tokens, width, rng)
        out.append(tuple(sorted((o.parents * p.shape[1] + o.tokens).tolist())))
    return out


def chi2_multinomial(samples, p, width) -> tuple[float, int, float, dict]:
    return chi2_goodness_of_fit(samples, multinomial_law(p.ravel(), width))


def assert_multinomial(samples, p, width):
    stat, dof, pvalue, impossible = chi2_multinomial(samples, p, width)
    assert not impossible, f"outputs the target cannot produce: {impossible}"
    assert dof >= 10
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


# -- (1) one layer: Multinomial(W_L, p_beam), whatever q ----------------------------------------------

LAYER_CASES = [  # agreement, warp, drafts W_S, width W_L
    ("same", SamplingParams(1.0), 4, 3),
    ("close", SamplingParams(1.0), 4, 3),
    ("far", SamplingParams(1.0), 4, 3),
    ("far", SamplingParams(0.7, top_k=6), 5, 3),      # q misses cells of p: only the residual reaches them
    ("close", SamplingParams(1.3, top_p=0.9), 2, 3),  # fewer drafts than beams: p' and p_beam fill in
]


@pytest.mark.parametrize("agreement, params, drafts, width", LAYER_CASES, ids=str)
def test_a_layer_outputs_a_multinomial_sample_of_p_beam(agreement, params, drafts, width):
    _, p, q = layer_case(agreement, params)
    assert_multinomial(layer_multisets(p, q, drafts, width, seed=1), p, width)


def tiny_cells() -> np.ndarray:
    """p_beam over 3 x 8 cells, 20 of them at 9e-4 (1.8 % of the mass): where the reference's "below
    1e-3 -> argmax" substitution matters. Used with an agreeing draft (q = p)."""
    p = np.full(24, 9e-4)
    p[[0, 9, 10, 23]] = (1 - 20 * 9e-4) * np.array([0.4, 0.3, 0.2, 0.1])
    return p.reshape(3, 8)


def test_a_layer_outputs_improbable_cells_at_their_rate():
    p = tiny_cells()
    assert_multinomial(layer_multisets(p, p, 4, 3, seed=2), p, 3)


def test_the_accepted_count_follows_the_law_the_dynamic_width_is_computed_from():
    """Eq. 2-4 describe this verifier: with W_L = m (no early stop) the number accepted is P(m, .)."""
    _, p, q = layer_case("close", SamplingParams(1.0), seed=3)
    rng = np.random.default_rng(3)
    counts = []
    for _ in range(TRIALS):
        parents, tokens = draw(q, 4, rng)
        counts.append(int((verify_layer(p, q, parents, tokens, 4, rng).nodes >= 0).sum()))
    law = accepted_count_law(acceptance_chain(p, q, 4))
    stat, dof, pvalue, _ = chi2_goodness_of_fit(counts, dict(enumerate(law)))
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof"


def test_a_dynamic_width_layer_is_multinomial_with_the_width_it_chose():
    params, rule = SamplingParams(0.9, top_k=8), DynamicWidth(threshold=0.5, w_min=1)
    joint, p, q = layer_case("close", params, seed=4)
    width = rule.layer(p, q, 4)
    assert width == 3  # a width above 1 and below the 4 drafts: the rule, not a constant, decides
    rng = np.random.default_rng(4)
    out = []
    for _ in range(TRIALS):
        parents, tokens = draw(q, 4, rng)
        layer = DraftLayer(parents, tokens, q, np.zeros((4, 5)))
        step = verify_forest(Forest(np.zeros(2), joint, (layer,)), params, rule, rng).steps[0]
        out.append(tuple(sorted((step.parents * 5 + step.tokens).tolist())))
    assert_multinomial(out, p, width)


ACCEPTED_ROWS = np.array([2, 0])  # of the 3 draft beams above, these were accepted, in this order


def thinned_case():
    """A layer below a partly accepted one: the draft drew its beams from q over (3 draft beams) x V,
    the target's p_beam is over (the 2 accepted beams) x V, and the candidates are the draws whose
    parent was accepted, renumbered to p's rows (children of the rejected beam are skipped)."""
    _, p, _ = layer_case("same", SamplingParams(1.0), seed=8)  # 2 rows: the accepted beams' p_beam
    q = np.random.default_rng(8).dirichlet(np.ones(15)).reshape(3, 5)
    row = np.array([1, -1, 0])  # draft beam -> row of p (ACCEPTED_ROWS inverted), -1: rejected

    def thinned(_q, n, rng):
        parents, tokens = draw(q, n, rng)
        live = row[parents] >= 0
        return row[parents[live]], tokens[live]
    return p, q, thinned


def test_a_layer_below_rejected_beams_is_multinomial_with_q_restricted_and_renormalised():
    p, q, thinned = thinned_case()
    restricted = q[ACCEPTED_ROWS]  # verify_layer renormalises it to q_A = q / Q_A on the accepted rows
    assert_multinomial(layer_multisets(p, restricted, 5, 3, seed=9, draft=thinned), p, 3)


# -- (2) power: the same check rejects the reference code's departures ---------------------------------

def draw_without_replacement(q, n, rng):
    """torch.multinomial(q, n, replacement=False), as the reference draws its draft beams."""
    flat = q.ravel() / q.sum()
    return np.divmod(rng.choice(flat.size, size=n, replace=False, p=flat), q.shape[1])


def draw_with_argmax_substitution(q, n, rng):
    """The reference's sample(): a drawn cell of probability < 1e-3 is replaced by the argmax."""
    parents, tokens = draw(q, n, rng)
    cells = parents * q.shape[1] + tokens
    return np.divmod(np.where(q.ravel()[cells] / q.sum() < 1e-3, np.argmax(q), cells), q.shape[1])


def verify_as_written(p, q, parents, tokens, width, rng, *, upside_down=False):
    """``verify_layer`` as the reference code writes it: q used at the scale it is given (the reference
    restricts the draft's q to the surviving beams without renormalising it), and with ``upside_down``
    the paper's text's ratio min(1, q / p') instead of min(1, p' / q)."""
    residual, nodes = p, []
    for i, (b, v) in enumerate(zip(parents, tokens)):
        if len(nodes) == width:
            break
        u = rng.random()
        if (u * residual[b, v] < q[b, v]) if upside_down else (u * q[b, v] < residual[b, v]):
            nodes.append(i)
            residual = p
        else:
            rest = np.maximum(residual - q, 0)
            residual = rest / rest.sum() if rest.sum() > 0 else residual
    extra = [draw(residual, 1, rng), draw(p, width - len(nodes) - 1, rng)] if len(nodes) < width else []
    return SimpleNamespace(parents=np.concatenate([parents[nodes], *(b for b, _ in extra)]).astype(int),
                           tokens=np.concatenate([tokens[nodes], *(v for _, v in extra)]).astype(int))


def test_the_check_rejects_drafts_drawn_without_replacement():
    _, p, _ = layer_case("same", SamplingParams(0.6))  # peaked: i.i.d. draws repeat beams, these never do
    assert chi2_multinomial(layer_multisets(p, p, 4, 3, seed=5, draft=draw_without_replacement), p, 3)[2] < POWER


def test_the_check_rejects_improbable_draws_replaced_by_the_argmax():
    p = tiny_cells()
    samples = layer_multisets(p, p, 4, 3, seed=2, draft=draw_with_argmax_substitution)
    assert chi2_multinomial(samples, p, 3)[2] < POWER


def test_the_check_rejects_the_upside_down_acceptance_ratio():
    _, p, q = layer_case("far", SamplingParams(1.0))
    upside_down = partial(verify_as_written, upside_down=True)
    assert chi2_multinomial(layer_multisets(p, q, 4, 3, seed=6, verify=upside_down), p, 3)[2] < POWER


def test_the_check_rejects_a_restricted_q_that_is_not_renormalised():
    p, q, thinned = thinned_case()
    q_as_drawn = q[ACCEPTED_ROWS]  # mass Q_A < 1: the reference divides by it as it is
    samples = layer_multisets(p, q_as_drawn, 5, 3, seed=9, draft=thinned, verify=verify_as_written)
    assert chi2_multinomial(samples, p, 3)[2] < POWER


# -- (3) whole iterations: the beams after each step are those of target-only beam sampling ----------

VOCAB = 3
TARGET = ToyModel(VOCAB, seed=10)
DRAFT = ToyModel(VOCAB, seed=11, like=TARGET, agreement=0.6)


@pytest.mark.parametrize("params", [SamplingParams(1.0), SamplingParams(0.8, top_k=4)], ids=str)
def test_dsbd_decodes_as_target_only_beam_sampling(params):
    """gamma = 2 draft layers of W_S = 3 beams, W_L = 2: an iteration ends after 1, 2 or 3 steps, and
    iterations are chained until 3 steps; the beams after step j, as a multiset of sequences, have the
    law of j steps of beam sampling."""
    rng = np.random.default_rng(7)
    runs, used = [], Counter()
    for _ in range(4000):
        history, verdicts = decode(TARGET, DRAFT, params, width=2, drafts=3, gamma=2, steps=3, rng=rng)
        runs.append(history)
        used.update(v.layers_used for v in verdicts)
    assert set(used) == {0, 1, 2}  # a short first layer, a short second layer, and the bonus all happen
    for j, law in enumerate(beam_sampling_law(TARGET, params, width=2, steps=3)):
        stat, dof, pvalue, impossible = chi2_goodness_of_fit([h[j] for h in runs], law)
        assert not impossible
        assert pvalue > ALPHA, f"step {j + 1}: chi2 = {stat:.1f} on {dof} dof"


# -- (4) temperature 0: deterministic beam search, whether the draft agrees or not ---------------------

@pytest.mark.parametrize("draft", [TARGET, ToyModel(VOCAB, seed=12)], ids=["agreeing", "unrelated"])
def test_greedy_dsbd_is_deterministic_beam_search(draft):
    greedy, rng = SamplingParams(0.0), np.random.default_rng(0)
    got, verdicts = decode(TARGET, draft, greedy, width=2, drafts=3, gamma=3, steps=8, rng=rng, ordered=True)
    want, _ = decode(TARGET, None, greedy, width=2, drafts=0, gamma=0, steps=8, rng=rng, ordered=True)
    assert [[s for s, _ in step] for step in got] == [[s for s, _ in step] for step in want]
    np.testing.assert_allclose([[lp for _, lp in step] for step in got], [[lp for _, lp in step] for step in want])
    used = {v.layers_used for v in verdicts}
    assert used != {0}  # some draft layers were accepted (not only target corrections)...
    assert draft is TARGET or 0 in used  # ...and the unrelated draft also had a layer corrected


def test_a_greedy_layer_missing_one_of_the_targets_best_cells_is_replaced_by_them():
    joint = np.log(np.array([[0.5, 0.2, 0.1], [0.15, 0.05, 1e-9]]))  # best two: (0, 0), (0, 1)
    after = np.log(np.full((2, 3), 1 / 3))
    missing = DraftLayer(np.array([1, 0]), np.array([0, 0]), None, after)  # has (0, 0), lacks (0, 1)
    verdict = verify_forest(Forest(np.zeros(2), joint, (missing,)), SamplingParams(0.0), 2, np.random.default_rng(0))
    assert verdict.layers_used == 0
    assert list(zip(verdict.output.parents.tolist(), verdict.output.tokens.tolist())) == [(0, 0), (0, 1)]
    covering = DraftLayer(np.array([0, 1, 0]), np.array([1, 0, 0]), None, np.log(np.full((3, 3), 1 / 3)))
    verdict = verify_forest(Forest(np.zeros(2), joint, (covering,)), SamplingParams(0.0), 2, np.random.default_rng(0))
    assert verdict.layers_used == 1
    assert verdict.accepted[0].tolist() == [2, 0]  # the nodes, in the target's order: (0, 0) then (0, 1)
    assert len(verdict.steps) == 2  # and the bonus step after them
