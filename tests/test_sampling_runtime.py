"""Sampling through the real multi-process runtime.

* Seed-mode outputs follow the target distribution (statistically, at several agreement levels).
* Outputs depend on ``--seed`` only: identical under every policy, and identical between `sd` and
  `seed`, sampling included; `ar` draws from other streams, so it is compared in distribution.

The statistical test: the sim models are order-2 Markov (the next token depends on the last two),
so a lossless run's output is a Markov chain with the target's transition probabilities. We count
the transitions of long sequences and apply Pearson's chi-square, summed over contexts
(Anderson & Goodman 1957), cells pooled to expect >= 5 draws each. One run with 24 workers gives
the >= 1,000 transitions the check asks for (16 workers can fall short) - far cheaper than
thousands of short sequences, each a draft process. We fail when p < 1e-4: with a correct runtime
a random seed fails with probability about 1e-4 per test; the seed is fixed, so the verdict is reproducible, not flaky.
Power, at these sample sizes: chains drawn from the draft model (no correction) are rejected
(test_sampling_exact.py::test_the_markov_check_rejects_chains_drawn_from_the_draft_model); in an
offline simulation a residual drawn from p instead of norm(max(0, p - q)) was rejected for 90-100 %
of seeds at agreement 0 and 0.5. At agreement 0.9 q is so close to p that only gross errors show.
"""

from __future__ import annotations

from collections import Counter

import pytest
from chi2 import markov_chi2
from helpers import outputs, run_ok, sim_config, target_model, transition_table, words
from loopback_decode import decode_in_process

from specsched.runtime.backends.sim import SimTokenizer
from specsched.runtime.core.sampling import SamplingParams

ALPHA = 1e-4
VOCAB = 8
N_WORKERS = 24
# Different two-token starts, so the chains begin in different contexts.
START = [[1 + i % 7, 1 + (3 * i + 1) % 7] for i in range(N_WORKERS)]


def statistical_run(mode: str, agreement: float, params: SamplingParams, seed: int, lookup: int = 0,
                    min_confidence: float = 0.0, **kw):
    config = sim_config(**{"mode": mode, "workers": N_WORKERS, "lookup": lookup, "min_confidence": min_confidence,
                           "prompts": [words(VOCAB, p) for p in START],
                           "sim_vocab": VOCAB, "sim_agreement": agreement, "temperature": params.temperature,
                           "top_k": params.top_k, "top_p": params.top_p, "max_new_tokens": 400, "k": 3, "seed": seed,
                           "sim_draft_ms": 0.0, "sim_verify_ms": 0.0, **kw})
    return run_ok(config)


@pytest.mark.parametrize("mode, agreement, params", [
    ("seed", 0.0, SamplingParams(1.0)),
    ("seed", 0.5, SamplingParams(1.5, top_k=5, top_p=0.9)),
    ("seed", 0.9, SamplingParams(1.0)),
    # ar draws from its own streams: following the same exact law makes it equal in distribution
    ("ar", 0.5, SamplingParams(1.5, top_k=5, top_p=0.9)),
    # n-gram lookup drafts (q = δ): over 8 tokens nearly every 3-gram has occurred, so most drafts are lookups.
    # Power: reporting the model's q for a looked-up token instead of δ gave chi2 = 306 on 26 dof (p ~ 1e-50).
    ("seed+lookup", 0.5, SamplingParams(1.0)),
    ("seed+lookup", 0.5, SamplingParams(1.5, top_k=5, top_p=0.9)),
    # adaptive draft length: branches stop where the draft's top probability is below 0.5
    ("seed+confidence", 0.5, SamplingParams(1.0)),
    # PCT trees: widths fixed before the draw, depth from the measured costs
    ("seed+pct", 0.5, SamplingParams(1.0)),
    ("seed+pct", 0.5, SamplingParams(1.5, top_k=5, top_p=0.9)),
    # stepping aside: a dear draft (1 ms a token) at agreement 0 sends sequences to ride with the target
    ("seed+aside", 0.0, SamplingParams(1.0)),
], ids=lambda x: str(x) if not isinstance(x, SamplingParams) else
    f"T{x.temperature}-k{x.top_k}-p{x.top_p}")
def test_sampled_outputs_follow_the_target_distribution(mode, agreement, params):
    mode, _, extra = mode.partition("+")
    kw = {"pct": {"tree": "pct"}, "aside": {"step_aside": "on", "sim_draft_ms": 1.0}}.get(extra, {})
    record = statistical_run(mode, agreement, params, seed=2024, lookup=3 if extra == "lookup" else 0,
                             min_confidence=0.5 if extra == "confidence" else 0.0, **kw)
    if extra == "aside":  # sequences really rode with the target
        assert record.collected.counters["aside_tokens"] > 0
    if extra == "confidence":  # the stop really shortened drafts (k = 3 otherwise, bar the last rounds)
        assert record.metrics.drafted < 0.9 * 3 * record.collected.counters["verifications"]
    table = transition_table(target_model(VOCAB), VOCAB, params)
    stat, dof, pvalue, draws, impossible = markov_chi2(outputs(record), START, table)
    assert not impossible, f"transitions outside the top-k/top-p support: {impossible}"
    # PCT shapes trees from measured times, so its realisation (not its law) changes from run to run,
    # and with it where EOS ends each chain: fewer transitions are guaranteed, and the p > 1e-4 verdict
    # is then a 1-in-10,000 false alarm per run rather than a fixed one
    least_draws, least_dof = (500, 10) if extra == "pct" else (1000, 15)
    assert draws >= least_draws and dof >= least_dof, (draws, dof)
    assert pvalue > ALPHA, f"chi2 = {stat:.1f} on {dof} dof over {draws} tokens"
    if mode == "seed":
        # the tokens really went through speculation: some draft tokens accepted, some rejected
        assert 0 < record.metrics.accepted < record.metrics.drafted


SAMPLED = {"temperature": 0.9, "top_p": 0.95, "sim_vocab": 64}
PROMPTS = ["kaka lomi", "nene ruru", "sasa toto", "vivi bebe"]


def verify_order(record) -> list[int]:
    return [e.seq for e in sorted(record.collected.events, key=lambda e: e.start)
            if e.role == "verifier" and e.kind == "verify"]


POLICIES = [("fcfs", {}), ("priority", {"priorities": [3, 2, 1, 0]}), ("rr", {})]


def sampled_run(policy: str, extra: dict, **kw):
    return run_ok(sim_config(mode="seed", workers=4, prompts=PROMPTS, max_new_tokens=24, k=3, seed=99,
                             policy=policy, sim_draft_ms=1.0, sim_verify_ms=12.0, **SAMPLED, **extra, **kw))


@pytest.fixture(scope="module")
def sampled_by_policy():
    """The same sampled seed-mode run under each built-in policy, with a busy verifier."""
    return {policy: sampled_run(policy, extra) for policy, extra in POLICIES}


def test_the_same_seed_gives_identical_sampled_outputs_under_every_policy(sampled_by_policy):
    fcfs = outputs(sampled_by_policy["fcfs"])
    assert outputs(sampled_by_policy["priority"]) == fcfs
    assert outputs(sampled_by_policy["rr"]) == fcfs
    # ... although the policies really do verify the sequences in different orders. Compared under
    # --lockstep, where every live sequence has its draft queued whenever the policy picks, so the
    # order is the policy's alone, not the timing's:
    lockstep = {p: sampled_run(p, extra, lockstep=True) for p, extra in POLICIES[:2]}
    assert all(outputs(r) == fcfs for r in lockstep.values())
    orders = {p: verify_order(r) for p, r in lockstep.items()}
    rounds = Counter(orders["fcfs"])
    assert sorted(rounds) == [0, 1, 2, 3] and Counter(orders["priority"]) == rounds  # rounds: the streams'
    # priority (lower = more urgent) serves sequence 3 to its end, then 2, 1 and 0
    assert orders["priority"] == [s for s in (3, 2, 1, 0) for _ in range(rounds[s])]
    # fcfs goes round by round, each round in the arrival order of the first (a served worker's next
    # draft arrives after every other draft of the step)
    first = orders["fcfs"][:4]
    assert sorted(first) == [0, 1, 2, 3]
    assert orders["fcfs"] == [s for r in range(max(rounds.values())) for s in first if rounds[s] > r]
    assert orders["priority"] != orders["fcfs"]


def test_sampled_outputs_are_really_random(sampled_by_policy):
    # four sequences from four different per-sequence streams (temperature 0.9) do not coincide
    fcfs = outputs(sampled_by_policy["fcfs"])
    other_seed = run_ok(sim_config(mode="seed", workers=4, prompts=PROMPTS, max_new_tokens=24, k=3,
                                   seed=100, **SAMPLED))
    assert outputs(other_seed) != fcfs


def test_sd_and_seed_give_identical_sampled_outputs(sampled_by_policy):
    fcfs = outputs(sampled_by_policy["fcfs"])
    sd = run_ok(sim_config(mode="sd", workers=4, prompts=PROMPTS, max_new_tokens=24, k=3, seed=99, **SAMPLED))
    assert outputs(sd) == fcfs
    # and both are what the drafter and verifier produce in process, from the same streams
    config = sd.config
    tok = SimTokenizer(config.sim.vocab)
    assert [decode_in_process(config, tok.encode(p), seq) for seq, p in enumerate(PROMPTS)] == fcfs


def test_one_shared_prompt_still_samples_independent_sequences(sampled_by_policy):
    record = run_ok(sim_config(mode="seed", workers=3, prompts=[PROMPTS[0]], max_new_tokens=24, k=3,
                               seed=99, **SAMPLED))
    tokens = outputs(record)
    assert len({tuple(t) for t in tokens}) == 3
    # sequence 0 (same prompt, same seed) is the same as in the four-prompt run
    assert tokens[0] == outputs(sampled_by_policy["fcfs"])[0]
