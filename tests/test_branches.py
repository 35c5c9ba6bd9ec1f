"""Self-Draft's parts: the caches, the lanes, the draft that carries them, sampled verification of cached
candidates (q = δ), the policy's view and hostile drafts. Lanes in a forward and as processes: test_branch_lanes.py."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from chi2 import chi2_sf

from specsched.runtime.backends.sim import SimModel
from specsched.runtime.core.draft_q import DraftQ
from specsched.runtime.core.messages import Draft, Verdict
from specsched.runtime.core.sampling import SamplingParams, distribution, stream
from specsched.runtime.core.wire import unpack
from specsched.runtime.models.corpus_cache import SHIPPED, count, load, meta_of, save
from specsched.scheduler.acceptance import verify_tree
from specsched.scheduler.layout import lay_out
from specsched.workers.branch_cache import ContextCache, candidate_tree
from specsched.workers.branch_drafter import BranchDrafter, BranchSettings, WithBranches
from specsched.workers.branch_lanes import Lanes
from specsched.workers.drafter import TreeDrafter


# -- caches ---------------------------------------------------------------------------------------------
def test_context_cache_keeps_the_ten_newest_grams_per_key_and_reinsertion_moves_to_the_front():
    cache = ContextCache()
    for i in range(12):
        cache.add(7, (i, i, i, i))
    assert cache.lookup(7, 20) == [(i,) * 4 for i in range(11, 1, -1)]  # 10 kept, newest first
    cache.add(7, (5, 5, 5, 5))
    assert cache.lookup(7, 3) == [(5,) * 4, (11,) * 4, (10,) * 4]
    assert len(cache) == 10 and cache.lookup(8, 10) == []


def test_candidates_merge_into_one_tree_sharing_prefixes():
    tokens, parents = candidate_tree([(1, 2, 3, 4), (1, 2, 5, 6), (7, 8, 9, 9), (1, 2, 3, 4)], depth=3)
    assert tokens == [1, 2, 3, 5, 7, 8, 9]
    assert parents == [-1, 0, 1, 1, -1, 4, 5]


def test_corpus_cache_counts_top_continuations_and_tries_the_longest_key_first(tmp_path):
    text = [1, 2, 3, 4, 5, 6, 7, 8] * 3 + [9, 2, 3, 4, 10, 11, 12, 13] * 2
    arrays = count([text], min_count=2)
    save(tmp_path / "c.npz", arrays, {"tokenizer": None})
    cache = load(str(tmp_path / "c.npz"))
    assert cache.lookup([1, 2, 3, 4], 3) == [(5, 6, 7, 8)]          # the 4-token key
    assert cache.lookup([9, 2, 3, 4], 3) == [(10, 11, 12, 13)]      # its own 4-token key wins over (2, 3, 4)
    assert set(cache.lookup([0, 0, 3, 4], 3)) == {(5, 6, 7, 8), (10, 11, 12, 13)}  # (3, 4): both, by count
    assert cache.lookup([3, 4], 3)[0] == (5, 6, 7, 8)               # seen 3 times against 2
    assert cache.lookup([99], 3) == []


# a writer: waits for the start file (so both write at once, not one after the other's start-up), then
# saves one corpus cache 50 times
SAVE_OFTEN = """
import sys, time
from pathlib import Path
from specsched.runtime.models.corpus_cache import count, save
out, go = Path(sys.argv[1]), Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
for _ in range(50):
    save(out, count([[1, 2, 3, 4, 5] * 50], min_count=2), {"tokenizer": None})
"""


def test_two_processes_saving_one_corpus_cache_at_once_both_finish_and_leave_one_whole_file(tmp_path):
    # two first runs of one target build its cache at once: each writes its own hidden file, then renames
    out, go = tmp_path / "cache" / "c.npz", tmp_path / "go"
    writers = [subprocess.Popen([sys.executable, "-c", SAVE_OFTEN, str(out), str(go)]) for _ in range(2)]
    go.touch()
    assert [w.wait(120) for w in writers] == [0, 0]
    assert [p.name for p in out.parent.iterdir()] == ["c.npz"] and load(str(out)).lookup([3, 4], 1)


def test_the_shipped_corpus_cache_is_small_and_names_its_tokenizer():
    assert SHIPPED.stat().st_size <= 5_000_000
    meta = meta_of(SHIPPED)
    assert meta["tokenizer"] and meta["keys"] > 10_000 and meta["corpus"].startswith("shakespeare")


# -- lanes ----------------------------------------------------------------------------------------------
def test_lanes_start_inside_the_prompt_and_are_chains_on_the_context():
    lanes = Lanes(list(range(100, 130)), n=2, length=6)
    assert lanes.windows == [list(range(115, 120)), list(range(105, 110))]  # 5 = L - 1 tokens, ends at 20, 10
    tokens, parents = lanes.nodes(offset=3)
    assert tokens == [*range(115, 120), *range(105, 110)]
    assert parents == [-1, 3, 4, 5, 6, -1, 8, 9, 10, 11]


def test_lanes_turn_predictions_into_grams_and_move_on_by_the_last_one():
    lanes = Lanes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], n=1, length=6)
    assert lanes.windows == [[1, 2, 3, 4, 5]]
    entries = lanes.update([20, 21, 22, 23, 24])
    # sub-sequence w[j-3..j] and the prediction after w[j]: key w[j-3], value (w[j-2], w[j-1], w[j], D[j])
    assert entries == [(1, (2, 3, 4, 23)), (2, (3, 4, 5, 24))]
    assert lanes.windows == [[1, 2, 3, 4, 5, 24]]
    lanes.update([0] * 5 + [30])
    assert lanes.windows == [[2, 3, 4, 5, 24, 30]]  # at most L: the first token dropped
    with pytest.raises(ValueError, match="lane predictions"):
        lanes.update([1, 2])


# -- the draft on the wire ------------------------------------------------------------------------------
def test_a_draft_with_lanes_round_trips_and_a_lane_under_a_candidate_is_refused():
    d = Draft(3, 0, 1, np.array([5, 6, 7, 8], np.int32), np.array([-1, 0, -1, 2], np.int32), lanes=2)
    back = Draft.from_message(unpack(d.to_frames()))
    assert back.lanes == 2 and back.candidates == 2
    with pytest.raises(ValueError, match="branch lane"):
        Draft(3, 0, 1, np.array([5, 6, 7], np.int32), np.array([-1, 0, 1], np.int32), lanes=1)
    with pytest.raises(ValueError, match="lane tokens"):
        Draft(3, 0, 1, np.array([5], np.int32), np.array([-1], np.int32), lanes=2)
    with pytest.raises(ValueError, match="q is given for 2 tokens"):  # q covers the candidates only
        Draft(3, 0, 1, np.array([5, 6], np.int32), np.array([-1, -1], np.int32), DraftQ.rows(np.zeros((2, 8))),
              lanes=1)
    v = Verdict(3, 1, 1, np.array([5, 9], np.int32), np.array([0], np.int32), predictions=np.array([4, 4], np.int32))
    assert Verdict.from_message(unpack(v.to_frames())).predictions.tolist() == [4, 4]


def test_sampled_cache_candidates_travel_as_point_masses_with_no_vocabulary_wide_row():
    vocab, params, context = 4096, SamplingParams(1.0), [3, 5]  # a dense q row is 16 KiB here
    model = SimModel(vocab, 1234, 1.0, 0, draft=True)
    alone = BranchDrafter(vocab, params, context, BranchSettings(lanes=1, length=4))
    both = WithBranches(TreeDrafter(model, params, np.random.default_rng(0), context, k_config=(2, 1)), context,
                        BranchSettings(lanes=1, length=4))
    for drafter in (alone, both):
        for t in range(10):  # ten 4-grams after the key token 5: a tree of 40 candidates
            drafter.branches.context.add(5, (100 + t, 200 + t, 300 + t, 400 + t))
    for drafter, rows in ((alone, 0), (both, 4)):  # (2, 1): the model's four tokens carry their rows
        p = drafter.propose(4)
        frames = Draft(0, 0, 0, p.tokens, p.parents, p.q, lanes=p.lanes).to_frames()
        assert p.lanes and p.q.point.tolist() == [False] * rows + [True] * 40  # lanes: read, no q
        assert sum(len(memoryview(f)) for f in frames) < 4 * vocab * rows + 1000  # δ rows would add 4 * vocab * 40


# -- sampled: cached candidates (q = δ) emit exactly p --------------------------------------------------
def first_token_p_value(*, garbage: bool, wrong_q: bool = False, trials: int = 4000) -> float:
    """The first token emitted after a fixed context, verified against a tree of cached candidates, over
    `trials` seeded trials; the chi-square p-value of its frequencies against the target's exact p.
    Garbage: the candidates are random tokens; real: they include the target's likeliest tokens.
    `wrong_q`: cached tokens travel with a uniform q instead of δ (what they were not drawn from)."""
    vocab = 8
    params = SamplingParams(temperature=1.0)
    target = SimModel(vocab, 1234, 1.0, 0, draft=False)
    context = [3, 5]
    p = distribution(target.logits_for(context)[None], params)[0].astype(np.float64)
    counts = Counter()
    for trial in range(trials):
        rng = np.random.default_rng(trial)
        drafter = BranchDrafter(vocab, params, context, BranchSettings(lanes=1, length=4))
        firsts = rng.permutation(vocab)[:3] if garbage else np.argsort(-p)[:3]
        for t in firsts:  # three 4-grams for the key token 5, and a fourth sharing the first one's first token
            drafter.branches.context.add(5, (int(t), int(rng.integers(vocab)), 1, 2))
        drafter.branches.context.add(5, (int(firsts[0]), 7, 7, 7))
        prop = drafter.propose(4)
        m = len(prop.tokens) - prop.lanes
        q = DraftQ.rows(np.full((m, vocab), 1.0 / vocab, np.float32)) if wrong_q else prop.q
        cache = target.new_cache()
        layout = lay_out(target, cache, context, prop.tokens, prop.parents)
        rows = target.forward(cache, layout.tokens, layout.parents)
        out = verify_tree(rows[layout.unread - 1], rows[layout.unread:layout.unread + m], prop.tokens[:m],
                          prop.parents[:m], q, params, stream(trial, 0, "verify"))
        counts[out.tokens[0]] += 1
    observed = np.array([counts[t] for t in range(vocab)], dtype=np.float64)
    expected = trials * p / p.sum()
    return chi2_sf(float(((observed - expected) ** 2 / expected).sum()), vocab - 1)


@pytest.mark.parametrize("garbage", [False, True])
def test_sampled_branch_candidates_emit_the_target_distribution(garbage):
    """Chi-square goodness of fit over the vocabulary (7 degrees of freedom), threshold p-value 1e-4: a
    correct rule fails by chance with probability 1e-4 per case, and the trials are seeded, so a checkout
    always passes or always fails."""
    assert first_token_p_value(garbage=garbage) > 1e-4


def test_the_chi_square_check_rejects_cached_tokens_sent_with_the_wrong_q():
    """The negative control: the same trials with a uniform q for the cached tokens are caught."""
    assert first_token_p_value(garbage=False, wrong_q=True) < 1e-4


# -- the policy's view, and hostile drafts ---------------------------------------------------------------
def test_commit_first_serves_candidates_before_branch_only_drafts_then_by_arrival():
    from specsched.policies.base import ReadyDraft
    from specsched.policies.commit_first import CommitFirst

    explore = ReadyDraft(0, 0, 1.0, 0, length=0, verified_tokens=0, lanes=8)   # oldest, lanes only
    verify_a = ReadyDraft(1, 1, 2.0, 1, length=5, verified_tokens=0, lanes=8)
    verify_b = ReadyDraft(2, 2, 3.0, 2, length=3, verified_tokens=0)
    assert (explore.kind, verify_a.kind, verify_b.kind) == ("branch", "verify", "verify")
    assert (explore.forward_tokens, verify_a.forward_tokens) == (8, 13)
    policy, ready = CommitFirst(), [explore, verify_a, verify_b]
    order = []
    while ready:
        order.append(policy.pick(ready))
        ready = [d for d in ready if d is not order[-1]]
    assert order == [verify_a, verify_b, explore]
    assert CommitFirst().pick([explore]) is explore  # alone, served at once


def test_a_hostile_lane_count_or_token_is_refused_not_fatal():
    from specsched.runtime.core.config import RunConfig
    from specsched.runtime.core.transport import worker_identity
    from specsched.runtime.core.wire import ProtocolError, pack
    from specsched.scheduler.jobs import JobState
    from specsched.scheduler.verifier import Verifier

    frames = Draft(5, 3, 0, np.array([1, 2], np.int32), np.array([-1, -1], np.int32), lanes=1).to_frames()
    header = unpack(frames)
    for bad in ("1", 1.0, True):  # int() would take each of these
        forged = pack("draft", {**header.fields, "lanes": bad}, header.arrays)
        with pytest.raises(ProtocolError, match="whole number"):
            Draft.from_message(unpack(forged))

    class Quiet:
        def send(self, *a, **k): ...
        def events(self, rows): ...

    def verifier(**config) -> Verifier:
        v = Verifier(SimModel(16, 1234, 1.0, 0, draft=False), Quiet())
        run = RunConfig.of(backend="sim", mode="seed", sim_vocab=16, prompts=["x"], **config)
        v.add_job(JobState.from_message({"job": 0, "config": run.to_dict(), "sequences": [[5, 0, 3, [1, 2]]]},
                                        v.target))
        return v

    lanes_on_a_model_job = Draft(5, 3, 0, np.array([1, 2], np.int32), np.array([-1, -1], np.int32), lanes=1)
    with pytest.raises(ProtocolError, match="lane tokens"):
        verifier().admit(lanes_on_a_model_job, worker_identity(3), 0.0)
    too_many = Draft(5, 3, 0, np.arange(6, dtype=np.int32), np.array([-1, -1, 1, 2, 3, 4], np.int32), lanes=5)
    with pytest.raises(ProtocolError, match="lane tokens"):  # 1 lane of at most 4
        verifier(drafter="branches", branches=1, branch_length=4).admit(too_many, worker_identity(3), 0.0)
    with pytest.raises(ProtocolError, match="outside the vocabulary"):
        verifier().admit(Draft.chain(5, 3, 0, [4, 10**9]), worker_identity(3), 0.0)
    v = verifier(drafter="branches", branches=1, branch_length=4)
    v.admit(Draft(5, 3, 0, np.array([4, 1, 2], np.int32), np.array([-1, -1, 1], np.int32), lanes=2),
            worker_identity(3), 0.0)  # the control: a well-formed branch draft is queued
    assert len(v.queue) == 1
