"""Point masses (runtime/core/draft_q.py): a candidate drawn from δ at its own token travels as a flag, and
verify_tree's closed form for it is the dense rule on the δ row written out - the same tokens, the same
draws - over random trees, mixes, sampling settings and targets; DraftQ refuses what does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from specsched.runtime.backends.sim import SimModel
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import SamplingParams, distribution, sample
from specsched.runtime.core.transport import worker_identity
from specsched.runtime.core.wire import ProtocolError
from specsched.scheduler.acceptance import verify_tree
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier

PARAMS = [SamplingParams(1.0), SamplingParams(0.7, top_k=3), SamplingParams(1.3, top_p=0.8),
          SamplingParams(0.05, top_k=1)]  # the last: p is δ at the argmax, p(x) = 1 exactly


def random_draft(rng: np.random.Generator, vocab: int, params: SamplingParams):
    """A tree of 1-9 candidates, each a point mass at a random token or drawn from a dense row (some rows
    without replacement: earlier siblings zeroed); the target's logits at the root and after each node."""
    n = int(rng.integers(1, 10))
    parents = np.array([int(rng.integers(-1, i)) for i in range(n)], np.int32)
    tokens, rows = np.zeros(n, np.int32), []
    for i in range(n):
        if rng.random() < 0.5:
            tokens[i], row = int(rng.integers(vocab)), None
        else:
            row = distribution(rng.normal(0, 2, (1, vocab)), params)[0]
            if rng.random() < 0.3:  # siblings drawn before it removed, as TreeDrafter(replacement=False)
                row[[tokens[j] for j in range(i) if parents[j] == parents[i]]] = 0.0
                row = row / row.sum() if row.sum() > 0 else np.full(vocab, 1 / vocab, np.float32)
            tokens[i] = sample(row, rng)
        rows.append(row)
    logits = rng.normal(0, 2.5, (n + 1, vocab)).astype(np.float32)
    return tokens, parents, DraftQ.of(rows, vocab), logits


def test_a_point_mass_verifies_exactly_as_its_delta_row_written_out():
    accepted_points = rejected_all = 0
    for seed in range(3000):
        rng = np.random.default_rng(seed)
        vocab, params = int(rng.integers(3, 12)), PARAMS[seed % len(PARAMS)]
        tokens, parents, q, logits = random_draft(rng, vocab, params)
        dense = DraftQ.rows(q.written_out(tokens, vocab))
        a, b = np.random.default_rng([seed, 1]), np.random.default_rng([seed, 1])
        point = verify_tree(logits[0], logits[1:], tokens, parents, q, params, a)
        written = verify_tree(logits[0], logits[1:], tokens, parents, dense, params, b)
        assert (point.path, point.tokens, point.resampled) == (written.path, written.tokens, written.resampled)
        assert a.bit_generator.state == b.bit_generator.state  # the same draws, so the same stream after
        accepted_points += any(q.point[j] for j in point.path)
        rejected_all += point.resampled
    assert accepted_points > 300 and rejected_all > 300  # both branches of the closed form were taken


class _Fixed:
    """An rng whose every uniform is u."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


def test_a_point_mass_is_accepted_exactly_below_p_of_its_token():
    """u < p(x) accepts, u = p(x) does not: the boundary of min(1, p(x)/1), for the flag and the δ row alike."""
    params, logits = SamplingParams(1.0), np.array([[0.3, 1.1, -0.4, 0.9]] * 2, np.float32)
    tokens, parents = np.array([1], np.int32), np.array([-1], np.int32)
    p_x = (lambda p: p[1] / p.sum())(distribution(logits[:1], params)[0].astype(np.float64))
    for q in (DraftQ.of([None], 4), DraftQ.rows(np.eye(4, dtype=np.float32)[[1]])):
        below = verify_tree(logits[0], logits[1:], tokens, parents, q, params, _Fixed(np.nextafter(p_x, 0)))
        at = verify_tree(logits[0], logits[1:], tokens, parents, q, params, _Fixed(p_x))
        assert below.path == [0] and at.path == [] and at.tokens[0] != 1  # the residual has no mass at x


def test_a_point_mass_outside_the_targets_support_is_never_accepted():
    params = SamplingParams(1.0, top_k=1)  # p = δ at token 2
    logits = np.array([[0.0, 1.0, 5.0, 0.0]] * 3, np.float32)
    q = DraftQ.of([None, None], 4)
    for seed in range(50):
        out = verify_tree(logits[0], logits[1:], np.array([1, 2], np.int32), np.array([-1, -1], np.int32), q,
                          params, np.random.default_rng(seed))
        assert out.path == [1] and out.tokens[0] == 2  # 1 rejected (p(1) = 0), 2 accepted (p(2) = 1)


def test_the_form_reads_back_the_rows_it_was_built_from():
    r0, r2 = np.full(5, 0.2, np.float32), np.eye(5, dtype=np.float32)[1] * 0.5 + 0.1
    q = DraftQ.of([r0, None, r2, None], 5)
    assert (len(q), q.fits(5), q.point.tolist(), q.dense.shape) == (4, True, [False, True, False, True], (2, 5))
    assert q.row(0, 5) is not None and np.array_equal(q.row(2, 5), r2) and q.row(1, 5) is None and q.row(3, 5) is None
    longer = q.then_points(2)
    assert longer.point.tolist() == [False, True, False, True, True, True] and longer.dense is q.dense
    written = longer.written_out(np.array([4, 3, 0, 2, 1, 0], np.int32), 5)
    assert np.array_equal(written[[0, 2]], q.dense)
    assert written[[1, 3, 4, 5]].tolist() == np.eye(5)[[3, 2, 1, 0]].tolist()
    assert DraftQ.of([], 7).dense.shape == (0, 7) and not DraftQ.rows(np.zeros((3, 7))).point.any()


@pytest.mark.parametrize("dense, point, why", [
    (np.zeros((2, 4), np.float32), np.array([False, True]), "1 are point masses"),      # a row too many
    (np.zeros((0, 4), np.float32), np.array([False]), "0 rows for 1"),                   # a row missing
    (np.zeros((1, 4), np.float64), np.array([False]), "expected float32"),
    (np.zeros(4, np.float32), np.zeros(0, bool), "expected float32 \\[rows, V\\]"),
    (np.zeros((1, 4), np.float32), np.array([0, 1], np.int32), "expected bool"),
    (np.zeros((0, 4), np.float32), np.ones((1, 1), bool), "expected bool \\[n\\]"),
    (np.zeros((0, 4), np.float32), np.array([2], np.uint8).view(bool), "not a bool"),
])
def test_a_form_that_does_not_fit_is_refused(dense, point, why):
    with pytest.raises(ValueError, match=why):
        DraftQ(dense, point)


def test_point_masses_without_q_are_refused():
    with pytest.raises(ProtocolError, match="point masses or a support but no q"):
        DraftQ.from_arrays({"point": np.ones(2, bool)})
    assert DraftQ.from_arrays({}) is None


class _Quiet:
    def send(self, *a, **k): ...
    def events(self, rows): ...


def test_a_sampled_job_admits_point_masses_and_refuses_a_q_of_another_vocabulary():
    v = Verifier(SimModel(16, 1234, 1.0, 0, draft=False), _Quiet())
    run = RunConfig.of(backend="sim", mode="seed", sim_vocab=16, prompts=["x"], temperature=1.0)
    v.add_job(JobState.from_message({"job": 0, "config": run.to_dict(), "sequences": [[5, 0, 3, [1, 2]]]},
                                    v.target))
    tokens, parents = np.array([4, 1], np.int32), np.array([-1, 0], np.int32)
    with pytest.raises(ProtocolError, match="lacks a valid q"):
        v.admit(Draft(5, 3, 0, tokens, parents, DraftQ.of([None, None], 17)), worker_identity(3), 0.0)
    v.admit(Draft(5, 3, 0, tokens, parents, DraftQ.of([np.full(16, 1 / 16, np.float32), None], 16)),
            worker_identity(3), 0.0)
    assert 5 in v.queue.sequences()
