"""`--lockstep`: the verifier waits until every worker that still owes a draft has one queued, so
verification goes in steps (one draft per live sequence) whatever the timing of the drafts.

Steps are read from the record as a user would: each draft worker's ``verify`` spans carry the
verifier's start and end of the forward that verified that draft, so drafts verified in the same
forward share one span, and a worker's n-th span is its sequence's round n. (``test_core_`` name:
the conftest hang guard covers these runs, so a lockstep that never picks fails, not stalls.)
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from cli_runs import read_json, run_cli
from helpers import greedy_reference, outputs, run_ok, sim_config, words

from specsched.runtime.apps.cli import build_parser
from specsched.runtime.apps.run.flag_config import config_from_args
from specsched.runtime.backends.sim import EOS
from specsched.runtime.core.config import RunConfig

VOCAB = 64
MAX_NEW = 16
# Sequences that stop at EOS at different rounds and ones that run to the limit: the step shrinks
# as sequences finish, which is when a wrong count of owing workers would hang or misbatch.
PROMPT_TOKENS = [(5, 7), (1, 48), (2, 59), (3, 9)]
PROMPTS = [words(VOCAB, p) for p in PROMPT_TOKENS]


def config(**kw) -> RunConfig:
    return sim_config(**{"mode": "seed", "workers": len(PROMPTS), "prompts": PROMPTS, "max_new_tokens": MAX_NEW,
                         "k": 3, "sim_vocab": VOCAB, "sim_agreement": 0.6, "seed": 7, **kw})


def forwards(spans) -> list[list[tuple[int, int]]]:
    """The (sequence, round) drafts verified by each target forward, in time order, from the draft
    workers' ``verify`` spans as (sequence, start, end)."""
    rounds: Counter[int] = Counter()
    by_forward: dict[tuple[float, float], list[tuple[int, int]]] = defaultdict(list)
    for seq, start, end in sorted(spans, key=lambda span: span[1]):
        by_forward[start, end].append((seq, rounds[seq]))
        rounds[seq] += 1
    return [sorted(drafts) for _, drafts in sorted(by_forward.items())]


def record_forwards(record) -> list[list[tuple[int, int]]]:
    return forwards((e.seq, e.start, e.end) for e in record.collected.events
                    if e.role == "draft" and e.kind == "verify")


def assert_steps(steps: list[list[tuple[int, int]]]) -> None:
    """Step i holds round i of every sequence that lasts more than i rounds, and nothing else."""
    rounds = Counter(seq for step in steps for seq, _ in step)
    assert steps == [[(s, i) for s in sorted(rounds) if rounds[s] > i] for i in range(max(rounds.values()))]


def test_the_prompts_finish_at_different_rounds():
    refs = [greedy_reference(p, VOCAB, MAX_NEW) for p in PROMPT_TOKENS]
    assert any(r[-1] == EOS for r in refs) and any(len(r) == MAX_NEW and EOS not in r for r in refs)


def test_lockstep_batch_verifies_every_live_sequence_in_one_forward_per_step():
    record = run_ok(config(policy="batch", max_batch=0, lockstep=True))
    assert outputs(record) == [greedy_reference(p, VOCAB, MAX_NEW) for p in PROMPT_TOKENS]
    steps = record_forwards(record)
    assert_steps(steps)
    assert len(steps[0]) == len(PROMPTS)
    rounds = Counter(seq for step in steps for seq, _ in step)
    assert len(set(rounds.values())) > 1  # the step did shrink as sequences finished
    c = record.collected.counters
    assert c["verifications"] == len(steps) < c["batched_drafts"] == sum(rounds.values())


@pytest.mark.parametrize("mode, policy", [("seed", "fcfs"), ("seed", "rr"), ("sd", "fcfs")])
def test_lockstep_one_draft_per_forward_is_lossless_and_goes_round_by_round(mode, policy):
    # --min-confidence varies the draft lengths, and so the drafting times: without --lockstep a
    # worker with short drafts can get its next round verified before a slower one's current round
    record = run_ok(config(mode=mode, policy=policy, lockstep=True, min_confidence=0.5))
    assert outputs(record) == [greedy_reference(p, VOCAB, MAX_NEW) for p in PROMPT_TOKENS]
    steps = record_forwards(record)
    assert all(len(step) == 1 for step in steps)
    if mode == "seed":  # (sd drafts its sequences one after another: no rounds to interleave)
        served = [step[0][1] for step in steps]
        assert served == sorted(served)


def test_lockstep_keeps_sampled_outputs():
    # every sequence has its own random streams, so holding drafts back changes when, not what
    kw = dict(policy="batch", max_batch=0, temperature=0.9, seed=11, k_config=[2, 2, 1])
    assert outputs(run_ok(config(lockstep=True, **kw))) == outputs(run_ok(config(**kw)))


def test_lockstep_flag_reaches_the_run_and_its_record(tmp_path):
    out = tmp_path / "run.json"
    prompts = [a for p in PROMPTS[:3] for a in ("--prompt", p)]
    result = run_cli(*prompts, "--policy", "batch", "--lockstep", "--max-new-tokens", str(MAX_NEW), "--k", "3",
                     "--sim-vocab", str(VOCAB), "--sim-draft-ms", "1", "--sim-verify-ms", "2", "--json", str(out),
                     "--quiet")
    assert result.returncode == 0, result.stderr
    record = read_json(out)
    assert record["config"]["lockstep"] is True and record["config"]["policy"] == "batch"
    assert RunConfig.from_dict(record["config"]).lockstep  # what `replay` and `export` read back
    assert record["sequences"][0]["tokens"] == greedy_reference(PROMPT_TOKENS[0], VOCAB, MAX_NEW)
    steps = forwards((e["seq"], e["start"], e["end"]) for e in record["events"]
                     if e["role"] == "draft" and e["kind"] == "verify")
    assert_steps(steps)
    assert len(steps[0]) == 3  # the first forward verified all three workers' drafts


@pytest.mark.parametrize("flags, lockstep", [([], False), (["--lockstep"], True)])
def test_lockstep_is_off_unless_asked_for(flags, lockstep):
    args = build_parser().parse_args(["run", "--prompt", "hi", "--backend", "sim", *flags])
    assert config_from_args(args).lockstep is lockstep
