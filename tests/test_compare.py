"""`specsched compare`: one seeded workload under several policies. A policy changes when drafts are
verified, never what is generated, so the texts must agree - and a disagreement must be loud."""

from __future__ import annotations

import dataclasses
import io
from contextlib import redirect_stdout

import pytest
from rich.console import Console

from specsched.runtime.apps.cli import main
from specsched.runtime.apps.commands.compare import compare, differing_sequences, policy_configs, print_comparison
from specsched.runtime.core.config import ConfigError, RunConfig

WORKLOAD = RunConfig.of(backend="sim", workers=3, max_new_tokens=12, sim_draft_ms=1, sim_verify_ms=3, seed=11,
                        temperature=0.8)


@pytest.fixture(scope="module")
def records():
    return compare(policy_configs(WORKLOAD, ["fcfs", "priority", "rr"]))


def printed(records, **kwargs) -> tuple[bool, str]:
    out = io.StringIO()
    ok = print_comparison(records, Console(file=out, width=100, color_system=None), **kwargs)
    return ok, out.getvalue()


def test_priority_without_priorities_gets_one_per_worker():
    configs = policy_configs(WORKLOAD, ["fcfs", "priority"])
    assert [c.priorities for c in configs] == [[], [0, 1, 2]]
    given = dataclasses.replace(WORKLOAD, priorities=[2, 1, 0])
    assert policy_configs(given, ["priority"])[0].priorities == [2, 1, 0]


@pytest.mark.parametrize("names, message", [
    (["fcfs", "", "rr"], "has an empty name"),
    (["fcfs", "rr", "fcfs"], "names fcfs more than once"),
])
def test_an_empty_or_repeated_policy_name_is_refused(names, message):
    with pytest.raises(ConfigError, match=message):
        policy_configs(WORKLOAD, names)


def test_policy_names_are_printed_as_text_not_markup(records):
    # ":boom:" is an emoji code and "[b]" a style tag to Rich; a policy's name is neither
    named = [dataclasses.replace(r, config=dataclasses.replace(r.config, policy=f"{i}:boom:[b]"))
             for i, r in enumerate(records)]
    ok, text = printed(named)
    assert ok and "💥" not in text
    header = next(ln for ln in text.splitlines() if "metric" in ln)
    assert header.replace("┃", " ").split() == ["metric", "0:boom:[b]", "1:boom:[b]", "2:boom:[b]"]
    assert "✓ generated texts are identical across 0:boom:[b], 1:boom:[b], 2:boom:[b]" in text


def test_same_texts_under_every_policy(records, tmp_path):
    assert [r.status for r in records] == ["ok"] * 3 and differing_sequences(records) == []
    ok, text = printed(records, svg_dir=tmp_path)
    assert ok
    header = next(ln for ln in text.splitlines() if "metric" in ln)
    assert header.replace("┃", " ").split() == ["metric", "fcfs", "priority", "rr"]
    for name in ("tokens/s", "mean waiting", "Jain's index, verifier time", "starvation"):
        assert name in text
    assert [ln for ln in text.splitlines() if ln.startswith("policy ")] == \
        ["policy fcfs", "policy priority", "policy rr"]
    assert sum(ln.startswith("verifier ") for ln in text.splitlines()) == 3   # a Gantt per policy
    assert "✓ generated texts are identical across fcfs, priority, rr (3 sequences)" in text
    svgs = sorted(p.name for p in tmp_path.iterdir())
    assert svgs == ["gantt-fcfs.svg", "gantt-priority.svg", "gantt-rr.svg"]


def test_different_texts_are_reported_loudly(records):
    first, second, third = records[2].sequences
    tampered = dataclasses.replace(second, tokens=second.tokens + [0])
    broken = dataclasses.replace(records[2], sequences=[first, tampered, third])
    ok, text = printed([records[0], records[1], broken])
    assert not ok
    assert "✗ GENERATED TEXTS DIFFER ACROSS POLICIES (fcfs, priority, rr)" in text
    assert "sequences 1 differ" in text


@pytest.mark.parametrize("flags, shown", [({"tree": "pct"}, "--tree pct"), ({"step_aside": "on"}, "--step-aside on"),
                                          ({"tree": "pct", "step_aside": "on"}, "--tree pct and --step-aside on")])
def test_sampled_texts_of_drafts_shaped_by_measured_times_may_differ_and_are_not_called_a_bug(records, flags, shown):
    first, second, third = records[2].sequences
    timed = [dataclasses.replace(r, config=r.config.replace(**flags)) for r in records]
    timed[2] = dataclasses.replace(timed[2], sequences=[first, dataclasses.replace(second, tokens=[0]), third])
    ok, text = printed(timed)
    assert ok and "DIFFER" not in text and "bug" not in text
    said = " ".join(text.replace("│", " ").split())
    assert f"(sequences 1), as they may: it samples (--temperature 0.8) with {shown}, whose drafts are shaped" in said
    greedy = [dataclasses.replace(r, config=r.config.replace(temperature=0.0)) for r in timed]
    ok, text = printed(greedy)  # greedy: every run's text is the target's argmax chain, so a difference is a bug
    assert not ok and "✗ GENERATED TEXTS DIFFER ACROSS POLICIES" in text


def test_a_workload_compared_calls_only_the_differences_of_untimed_jobs_a_bug(records):
    from specsched.runtime.apps.commands.workload_commands import text_verdict

    def job(r, tokens=None, **flags):  # one job's record under one policy
        seqs = r.sequences if tokens is None else [dataclasses.replace(r.sequences[0], tokens=tokens)]
        return dataclasses.replace(r, config=r.config.replace(**flags), sequences=seqs)

    fcfs, rr = records[0], records[2]
    same, said = text_verdict(["a", "b"], {"fcfs": [job(fcfs), job(fcfs)], "rr": [job(rr), job(rr)]})
    assert same and said.plain == "✓ every job's text is identical across fcfs, rr"
    timed = {"fcfs": [job(fcfs), job(fcfs, tree="pct")], "rr": [job(rr), job(rr, [9], tree="pct")]}
    same, said = text_verdict(["a", "b"], timed)
    assert same and said.plain.startswith("texts differ between policies, as they may (b: it samples (--temperature "
                                          "0.8) with --tree pct, whose drafts are shaped by measured times")
    greedy = {p: [job(r, temperature=0.0) for r in recs] for p, recs in timed.items()}  # the same texts, greedy
    same, said = text_verdict(["a", "b"], greedy)
    assert not same and said.plain == "✗ the texts of b differ between policies: a runtime bug"


def test_compare_command():
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["compare", "--policies", "fcfs,rr", "--workers", "2", "--max-new-tokens", "6",
                     "--sim-draft-ms", "1", "--sim-verify-ms", "2", "--seed", "3", "--backend", "sim"])
    assert code == 0
    assert "✓ generated texts are identical across fcfs, rr (2 sequences)" in out.getvalue()


def test_an_interrupted_policy_run_ends_the_comparison(monkeypatch):
    """Ctrl-C (or SIGTERM) during one policy's run: the policies after it are not started."""
    import types

    import specsched.runtime.apps.commands.compare as cmp

    started = []

    def fake_run(config, engine=None):
        started.append(config.policy)
        return types.SimpleNamespace(status="interrupted" if config.policy == "priority" else "ok")

    monkeypatch.setattr(cmp, "run", fake_run)
    configs = policy_configs(RunConfig(backend="sim", workers=2), ["fcfs", "priority", "rr"])
    records = compare(configs)
    assert started == ["fcfs", "priority"] and [r.status for r in records] == ["ok", "interrupted"]


def test_compare_starts_the_processes_once():
    configs = policy_configs(RunConfig.of(backend="sim", workers=3, max_new_tokens=6, sim_draft_ms=1, sim_verify_ms=2),
                             ["fcfs", "priority", "rr"])
    records = compare(configs)
    loaded = [r.extra["engine"]["models_loaded"] for r in records]
    assert loaded == [3, 0, 0] and {r.extra["engine"]["engine_models_loaded"] for r in records} == {4}
