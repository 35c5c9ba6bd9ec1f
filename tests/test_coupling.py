"""Gumbel coupling (`--coupling gumbel`, runtime/core/coupling.py): every token an exact draw from the
target's p, and the text a function of the seed and the target alone - the same whatever drafted it,
whatever the policy, and the same as `--mode ar` writes.

The statistical checks are Pearson chi-square at a fixed seed, failing at p < 1e-4, as in
test_sampling_exact.py (its docstring gives the reasoning for the bound): never flaky, and a wrong
sampler is rejected (the power test below).
"""

from __future__ import annotations

import numpy as np
import pytest
from chi2 import chi2_goodness_of_fit
from helpers import outcome_probabilities, sim_config, target_model, words
from loopback_decode import decode_in_process

from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.coupling import race, winners
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.engine.engine import Engine

ALPHA = 1e-4
GUMBEL = dict(temperature=0.9, coupling="gumbel")


def test_the_race_winner_is_an_exact_draw_from_p_and_the_clocks_are_fixed_by_their_key():
    p = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625, 0.0])
    drawn = [winners(p, race(3, 1, i, len(p)))[0] for i in range(6000)]
    *_, pvalue, impossible = chi2_goodness_of_fit(drawn, dict(enumerate(p)))
    assert not impossible and pvalue > ALPHA  # token 5 (p = 0) never wins
    assert np.array_equal(race(3, 1, 7, 6), race(3, 1, 7, 6)) and not np.array_equal(race(3, 1, 7, 6), race(3, 2, 7, 6))
    assert np.array_equal(race(3, 1, 7, 100)[:6], race(3, 1, 7, 6))  # a longer vocabulary extends the same clocks


def test_the_check_rejects_a_race_that_ignores_p():
    """Power: the same check on winners of the clocks alone (argmin E, uniform over tokens) fails."""
    p = np.array([0.5, 0.25, 0.125, 0.0625, 0.0625])
    drawn = [winners(np.ones(5), race(3, 1, i, 5))[0] for i in range(6000)]
    *_, pvalue, _ = chi2_goodness_of_fit(drawn, dict(enumerate(p)))
    assert pvalue < ALPHA


def test_siblings_are_the_next_front_runners_and_distinct():
    q = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    clocks = race(0, 0, 0, 5)
    front = winners(q, clocks, 3)
    ratio = q / clocks
    assert front[0] == winners(q, clocks)[0] and len(set(front)) == 3
    assert list(ratio[front]) == sorted(ratio[front], reverse=True) and 4 not in winners(q, clocks, 5)


@pytest.mark.parametrize("agreement, params", [(0.5, SamplingParams(1.3, top_k=5, coupling="gumbel")),
                                               (0.9, SamplingParams(0.9, top_p=0.9, coupling="gumbel"))],
                         ids=["T1.3-top_k5", "T0.9-top_p0.9"])
def test_whole_coupled_sequences_follow_the_exact_joint_target_distribution(agreement, params):
    config = sim_config(sim_vocab=8, sim_agreement=agreement, temperature=params.temperature, top_k=params.top_k,
                        top_p=params.top_p, coupling="gumbel", max_new_tokens=3, k=2, seed=3)
    samples = [tuple(decode_in_process(config, [3, 5], seq)) for seq in range(1200)]
    *_, pvalue, impossible = chi2_goodness_of_fit(samples, outcome_probabilities(target_model(8), [3, 5], 3, params))
    assert not impossible and pvalue > ALPHA


def test_the_coupled_text_is_the_same_whatever_drafts_it_and_equals_ar():
    """Chains, trees, PCT, n-gram lookup, the branch caches, one worker for all (sd), batched policies and
    target-only decoding, sampled with one seed: one text. The residual rule gives other texts here."""
    prompts = [words(64, (i + 1, i + 3)) for i in range(3)]
    runs = [dict(mode="ar"), dict(mode="parallel"), dict(), dict(k_config=[2, 2, 1]), dict(tree="pct"),
            dict(k=6, lookup=2), dict(drafter="both"), dict(mode="sd"), dict(policy="batch", max_batch=0),
            dict(sim_agreement=0.3, policy="srtf")]
    texts = []
    for extra in runs:
        with Engine(sim_config(sim_vocab=64, seed=5, **GUMBEL, **extra)) as e:
            texts.append([s.tokens for s in e.generate(prompts, max_new_tokens=40, **GUMBEL, seed=5).sequences])
    assert all(t == texts[0] for t in texts), [i for i, t in enumerate(texts) if t != texts[0]]
    with Engine(sim_config(sim_vocab=64, seed=5)) as e:  # the residual rule: the draft changes the text
        residual = [[s.tokens for s in e.generate(prompts, max_new_tokens=40, temperature=0.9, seed=5,
                                                   k_config=k).sequences] for k in ([1, 1, 1, 1], [2, 2, 1])]
    assert residual[0] != residual[1]


def test_coupling_is_refused_where_it_does_not_apply():
    with pytest.raises(ConfigError, match="--coupling must be residual or gumbel"):
        RunConfig.of(backend="sim", coupling="maximal", temperature=1.0)
    with pytest.raises(ConfigError, match="samples beams jointly"):
        RunConfig.of(backend="sim", mode="dsbd", coupling="gumbel", temperature=1.0)
