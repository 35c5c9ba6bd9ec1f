"""Speculation that pays: PCT trees and stepping aside keep every token the target's, and the verifier's
measurements (cost curve, calibration) reach the record and the summary."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runs import run_cli
from helpers import greedy_reference, outputs, run_ok, sim_config, words

from specsched.runtime.core.calibration import Calibration, ece
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.costs import CostCurve
from specsched.scheduler.step_aside import StepAside, Yield, drafting_pays

VOCAB = 64
PROMPT_TOKENS = [(5, 7), (1, 48), (2, 59), (3, 9)]
PROMPTS = [words(VOCAB, p) for p in PROMPT_TOKENS]
EXPECTED = [greedy_reference(p, VOCAB, 20) for p in PROMPT_TOKENS]


def config(**kw) -> RunConfig:
    base = dict(mode="seed", workers=4, prompts=PROMPTS, max_new_tokens=20, sim_vocab=VOCAB, sim_agreement=0.6,
                seed=7)
    return sim_config(**{**base, **kw})


@pytest.mark.parametrize("policy", ["fcfs", "priority", "rr", "batch", "goodput"])
def test_pct_trees_give_exactly_the_target_tokens_under_every_policy(policy):
    extra = {"priorities": [3, 2, 1, 0]} if policy == "priority" else {}
    record = run_ok(config(tree="pct", policy=policy, max_batch=0 if policy in ("batch", "goodput") else 1, **extra))
    assert outputs(record) == EXPECTED
    assert 0 < record.metrics.accepted < record.metrics.drafted
    assert CostCurve.from_list(record.collected.cost_curve).forwards > 0


@pytest.mark.parametrize("policy", ["fcfs", "batch"])
def test_sequences_that_step_aside_still_give_exactly_the_target_tokens(policy):
    # agreement 0: drafts never pay, and a dear draft (5 ms a token) makes that plain to the rule
    record = run_ok(config(step_aside="on", policy=policy, max_batch=0 if policy == "batch" else 1,
                           sim_agreement=0.0, sim_draft_ms=5, sim_verify_ms=2, max_new_tokens=40, workers=4))
    assert outputs(record) == [greedy_reference(p, VOCAB, 40) for p in PROMPT_TOKENS]
    aside = record.collected.counters["aside_tokens"]
    assert 0 < aside < record.metrics.tokens  # some tokens by the target alone, the first rounds drafted


def test_sequences_whose_drafts_pay_keep_drafting():
    # ~4.5 tokens a round for a 20 ms forward against 1 ms of drafting: drafting pays by far. The rule
    # reads measured times, so on a loaded machine a slow draft can send a sequence aside for a short
    # stint (it probes again after 2 rounds): most tokens, not all, come from drafts
    record = run_ok(config(step_aside="on", sim_agreement=0.95, sim_draft_ms=0.2, sim_verify_ms=20))
    assert outputs(record) == EXPECTED
    assert record.collected.counters["aside_tokens"] <= 0.25 * record.metrics.tokens


def test_the_rule_weighs_tokens_per_round_against_the_rounds_cost():
    curve = CostCurve(a=0.010, b=0.002, c=0.0)  # a 1-token forward 12 ms; each drafted token adds 2 ms
    # 4 drafted tokens: a round costs 10 + 2*5 = 20 ms (+ drafting); alone a token costs 12 ms
    assert drafting_pays(Yield(tokens=2.0, drafted=4, draft_s=0.0), curve)          # 24 >= 20
    assert not drafting_pays(Yield(tokens=1.6, drafted=4, draft_s=0.0), curve)      # 19.2 < 20
    assert not drafting_pays(Yield(tokens=2.0, drafted=4, draft_s=0.005), curve)    # 24 < 25: dear drafts
    rule = StepAside()
    assert rule.rounds_aside(0, 1, 4, 0.0, curve) == 0   # no decision before WARMUP rounds
    assert rule.rounds_aside(0, 1, 4, 0.0, curve) == 2   # then R = 2, 4, 8 ... while it does not pay
    assert rule.rounds_aside(0, 1, 4, 0.0, curve) == 4
    assert rule.rounds_aside(0, 5, 4, 0.0, None) == 0    # no curve yet: keep drafting


def test_calibration_counts_only_tokens_the_target_judged():
    cal = Calibration()
    # a chain of 3 (confidences 0.95, 0.55, 0.15): the first accepted, the second rejected, the third unreached
    cal.add(np.array([0.95, 0.55, 0.15], np.float32), np.array([-1, 0, 1]), [0])
    assert cal.proposed.tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0, 1]
    assert cal.accepted.tolist() == [0] * 9 + [1]
    # ECE: half the judged tokens at confidence 0.95 (accepted: |1 - 0.95|), half at 0.55 (rejected: 0.55)
    assert ece(cal.to_dict()) == pytest.approx(0.5 * 0.05 + 0.5 * 0.55, abs=1e-6)
    assert ece(Calibration().to_dict()) is None


def test_with_both_drafters_calibration_judges_the_draft_models_tokens_and_only_those():
    cal = Calibration()
    # the model's chain (0.95, 0.55), then a cache candidate at the root (NaN: no draft-model confidence);
    # the target took the cache's token, so the model's first token was judged and rejected, nothing more
    cal.add(np.array([0.95, 0.55, np.nan], np.float32), np.array([-1, 0, -1]), [2])
    assert cal.proposed.tolist() == [0] * 9 + [1] and cal.accepted.sum() == 0
    record = run_ok(config(drafter="both", branches=2, branch_length=5))
    assert outputs(record) == EXPECTED
    assert sum(record.collected.calibration["proposed"]) > 0  # the verifier's monitor hears the model's conf


def test_the_summary_shows_the_cost_curve_and_the_calibration():
    out = run_cli("--workers", "2", "--max-new-tokens", "12", "--tree", "pct", "--step-aside", "on", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "target forward (fitted)" in out.stdout and "ms/token" in out.stdout
    assert "draft calibration (ECE)" in out.stdout


@pytest.mark.parametrize("bad, message", [
    (dict(tree="beam"), "unknown --tree 'beam'"),
    (dict(tree="pct", k_config=[2, 1]), "drop --k-config"),
    (dict(pct_floor=0.0), "--pct-floor must be in (0, 1)"),
    (dict(step_aside="maybe"), "--step-aside must be on or off"),
    (dict(step_aside="on", mode="parallel"), "--step-aside needs draft workers"),
])
def test_bad_settings_are_refused_in_one_line(bad, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunConfig.of(backend="sim", **bad)


def test_export_draws_the_reliability_diagram_of_a_run(tmp_path):
    import json
    import xml.etree.ElementTree as ET

    from cli_runs import specsched

    run = run_cli("--workers", "2", "--max-new-tokens", "16", "--quiet", "--json", str(tmp_path / "r.json"))
    assert run.returncode == 0, run.stderr
    bins = json.loads((tmp_path / "r.json").read_text())["calibration"]
    out = specsched("export", str(tmp_path / "r.json"), "--reliability", str(tmp_path / "rel.svg"))
    assert out.returncode == 0, out.stderr
    svg = ET.fromstring((tmp_path / "rel.svg").read_text())
    circles = svg.findall(".//{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 2 + sum(n > 0 for n in bins["proposed"])  # the diagonal's two ends, one per bin
    assert "ECE" in (tmp_path / "rel.svg").read_text()
    ar = run_cli("--mode", "ar", "--max-new-tokens", "4", "--quiet", "--json", str(tmp_path / "ar.json"))
    assert ar.returncode == 0, ar.stderr
    refused = specsched("export", str(tmp_path / "ar.json"), "--reliability", str(tmp_path / "x.svg"),
                        "--chrome", str(tmp_path / "x.json"))
    assert refused.returncode == 2 and "no calibration bins" in refused.stderr
    assert not (tmp_path / "x.json").exists()  # refused before any output was written


def test_sampled_siblings_after_the_accepted_one_were_never_judged():
    # a root with three sampled candidates: the second is accepted, so the third was never tried
    cal = Calibration()
    cal.add(np.array([0.35, 0.55, 0.95], np.float32), np.array([-1, -1, -1]), [1], greedy=False)
    assert cal.proposed.tolist() == [0, 0, 0, 1, 0, 1, 0, 0, 0, 0]
    greedy = Calibration()  # greedy: every child met the target's argmax at once
    greedy.add(np.array([0.35, 0.55, 0.95], np.float32), np.array([-1, -1, -1]), [1])
    assert greedy.proposed.sum() == 3
