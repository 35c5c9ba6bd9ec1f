"""Greedy speculative decoding is lossless: every mode and policy produces exactly the target's
greedy tokens - the same tokens as `ar`, and the same as decoding the sim target by hand.
"""

from __future__ import annotations

import textwrap

import pytest
from helpers import greedy_reference, outputs, run_ok, sim_config, words

from specsched.runtime.backends.sim import EOS, SimTokenizer

VOCAB = 64
MAX_NEW = 16
# Two-token prompts (the sim models look at the last two tokens). Under greedy decoding some run to
# the token limit and some stop early at EOS after 5, 7, 1 (immediately), 4 and 10 tokens, so EOS
# lands at different offsets inside a k-token draft.
PROMPT_TOKENS = [(5, 7), (1, 48), (2, 59), (3, 9), (4, 63), (2, 38), (14, 30), (11, 13)]
PROMPTS = [words(VOCAB, p) for p in PROMPT_TOKENS]
POLICIES = ["fcfs", "priority", "rr"]


def expected(n: int) -> list[list[int]]:
    return [greedy_reference(p, VOCAB, MAX_NEW) for p in PROMPT_TOKENS[:n]]


def config(mode: str, n: int, policy: str = "fcfs", **kw):
    extra = {"priorities": list(range(n, 0, -1))} if policy == "priority" else {}
    return sim_config(mode=mode, workers=n, prompts=PROMPTS[:n], policy=policy, max_new_tokens=MAX_NEW,
                      k=3, sim_vocab=VOCAB, sim_agreement=0.6, seed=7, **extra, **kw)


def test_the_prompts_cover_sequences_that_end_early_at_eos_and_ones_that_do_not():
    refs = expected(8)
    ended = [len(r) for r in refs if r[-1] == EOS]
    assert sorted(ended) == [1, 4, 5, 7, 10]
    assert sum(len(r) == MAX_NEW and EOS not in r for r in refs) == 3
    assert refs[0][-1] != EOS and refs[1][-1] == EOS  # n = 3 already mixes both kinds


@pytest.fixture(scope="module", params=[1, 3, 8], ids=lambda n: f"n{n}")
def ar_tokens(request):
    """`ar` output for n sequences; it must itself be plain greedy decoding of the target."""
    n = request.param
    record = run_ok(config("ar", n))
    assert outputs(record) == expected(n)
    assert [s.finished for s in record.sequences] == [True] * n
    return n, outputs(record)


@pytest.mark.parametrize("policy", POLICIES)
def test_seed_mode_produces_exactly_the_ar_tokens(ar_tokens, policy):
    n, ar = ar_tokens
    record = run_ok(config("seed", n, policy))
    assert outputs(record) == ar
    assert [s.text for s in record.sequences] == [SimTokenizer(VOCAB).decode(t) for t in ar]
    # the drafts were really speculative: some accepted, some rejected
    assert 0 < record.metrics.accepted < record.metrics.drafted


def test_sd_mode_produces_exactly_the_ar_tokens(ar_tokens):
    # One worker has at most one draft in the queue, so the policy has no choice to make in sd mode;
    # each n runs under a different built-in policy all the same.
    n, ar = ar_tokens
    policy = {1: "rr", 3: "priority", 8: "fcfs"}[n]
    assert outputs(run_ok(config("sd", n, policy))) == ar


def test_parallel_mode_produces_exactly_the_ar_tokens(ar_tokens):
    n, ar = ar_tokens
    assert outputs(run_ok(config("parallel", n))) == ar


@pytest.mark.parametrize("k, agreement", [(1, 0.3), (6, 1.0), (6, 0.0)])
def test_seed_mode_is_lossless_for_any_draft_length_and_agreement(k, agreement):
    record = run_ok(sim_config(workers=3, prompts=PROMPTS[:3], max_new_tokens=MAX_NEW, k=k,
                               sim_vocab=VOCAB, sim_agreement=agreement))
    assert outputs(record) == expected(3)
    if agreement == 1.0:  # the draft is the target: every draft token is accepted
        assert record.metrics.accepted == record.metrics.drafted


def test_one_shared_prompt_gives_every_worker_the_same_greedy_text():
    record = run_ok(sim_config(workers=4, prompts=[PROMPTS[0]], max_new_tokens=MAX_NEW, sim_vocab=VOCAB))
    assert outputs(record) == [greedy_reference(PROMPT_TOKENS[0], VOCAB, MAX_NEW)] * 4
    assert [s.prompt for s in record.sequences] == [PROMPTS[0]] * 4


def test_a_custom_policy_from_a_file_is_used_and_keeps_the_output(tmp_path):
    log = tmp_path / "picks.log"
    path = tmp_path / "newest_first.py"
    path.write_text(textwrap.dedent(f"""
        from specsched.policies import Policy

        class NewestFirst(Policy):
            name = "newest-first"

            def pick(self, ready):
                choice = max(ready, key=lambda d: d.order)
                with open({str(log)!r}, "a") as f:
                    f.write(f"{{len(ready)}} {{choice.worker}}\\n")
                return choice
    """))
    # --lockstep: the policy is asked only once every live sequence has a draft queued, so it has a
    # real choice to make whatever the timing of the drafts
    record = run_ok(config("seed", 3, f"{path}:NewestFirst", sim_verify_ms=8, lockstep=True))
    assert outputs(record) == expected(3)
    picks = [(int(n), int(w)) for n, w in (line.split() for line in log.read_text().splitlines())]
    # the verifier process ran this policy for every verification; the first pick saw all 3 drafts
    assert len(picks) == record.metrics.verifications
    assert picks[0][0] == 3
    # ... and verified the drafts in the order the policy chose (seed mode: worker i owns sequence i)
    verified = sorted((e for e in record.collected.events if e.role == "verifier" and e.kind == "verify"),
                      key=lambda e: e.start)
    assert [w for _, w in picks] == [e.seq for e in verified]
    # newest-first under lockstep: the draft just verified is redrafted and is then the newest, so
    # each sequence is served to its end before the next one starts, with one fewer draft to choose from
    chosen = [w for _, w in picks]
    runs = [w for i, w in enumerate(chosen) if i == 0 or chosen[i - 1] != w]
    assert sorted(runs) == [0, 1, 2]
    assert [n for n, _ in picks] == [3 - runs.index(w) for w in chosen]
