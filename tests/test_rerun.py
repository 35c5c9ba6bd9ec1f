"""`specsched rerun RECORD`: a recorded run run again, its tokens checked against the record's, and what
produced each (provenance) side by side."""

from __future__ import annotations

import json

import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, run_cli, specsched

from specsched.runtime.apps.analysis.rerun import (
    NodeParting,
    Parting,
    Recorded,
    RecordedTrees,
    load_record,
    partings,
    tree_partings,
)
from specsched.runtime.apps.analysis.rerun_commands import verdict
from specsched.runtime.core.config import ConfigError, RunConfig

PROMPTS = ["--prompt", "lo mi ka", "--prompt", "ne ru"]
TWO = '{{"status": "ok", "config": {{"backend": "sim", "workers": 2, "prompts": ["a"]}}, "sequences": {}}}'


def recorded_run(tmp_path, *flags: str) -> tuple[str, dict]:
    path = tmp_path / "record.json"
    result = run_cli(*PROMPTS, "--max-new-tokens", "12", *FAST_FLAGS, "--no-live", "--quiet", "--json", str(path),
                     *flags)
    assert result.returncode == 0, result.stderr
    return str(path), json.loads(path.read_text())


@pytest.fixture(scope="module")
def greedy_record(tmp_path_factory) -> dict:
    """One greedy record, for the tests that edit a copy of it (or only read it)."""
    return recorded_run(tmp_path_factory.mktemp("record"))[1]


def edited(tmp_path, data: dict) -> str:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    return str(path)


def rerun(*args: str):
    return specsched("rerun", *args, "--no-live", "--quiet")


@pytest.mark.parametrize("flags", [[], ["--temperature", "0.8", "--seed", "3", "--policy", "rr"]],
                         ids=["greedy", "sampled"])
def test_a_recorded_run_reruns_to_the_same_tokens(tmp_path, flags):
    path, data = recorded_run(tmp_path, *flags)
    out = tmp_path / "again.json"
    result = rerun(path, "--json", str(out))
    assert result.returncode == 0, result.stderr
    tokens = sum(len(s["tokens"]) for s in data["sequences"])
    assert f"✓ every sequence's tokens are the record's: 2 sequences, {tokens} tokens" in result.stdout
    assert "git commit" in result.stdout and "tokens/s" in result.stdout
    again = json.loads(out.read_text())
    assert again["config"] == data["config"]
    assert [s["tokens"] for s in again["sequences"]] == [s["tokens"] for s in data["sequences"]]


def test_a_changed_token_is_caught_where_it_is_and_the_provenance_is_blamed(tmp_path, greedy_record):
    data = json.loads(json.dumps(greedy_record))
    original = data["sequences"][1]["tokens"][3]
    data["sequences"][1]["tokens"][3] = (original + 1) % 64
    data["provenance"]["software"]["versions"]["torch"] = "1.0.0"
    result = rerun(edited(tmp_path, data))
    assert result.returncode == 1
    text = " ".join(result.stdout.split())
    assert (f"✗ 1 of 2 sequences part from the record: sequence 1 at token 3 (recorded {(original + 1) % 64}, "
            f"now {original})") in text
    assert "the record was made with another torch" in text


def test_a_record_that_did_not_finish_is_a_prefix_the_rerun_must_begin_with(tmp_path, greedy_record):
    data = json.loads(json.dumps(greedy_record))
    data["status"] = "interrupted"
    for s in data["sequences"]:
        s["tokens"] = s["tokens"][:4]
    result = rerun(edited(tmp_path, data))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "begin with (the record is interrupted) the record's: 2 sequences, 8 tokens" in text


def test_partings_name_the_first_token_that_differs_and_an_end():
    record = Recorded(RunConfig(backend="sim"), {0: [1, 2, 3], 1: [4, 5], 2: [6]}, "ok", {}, None)
    assert partings(record, {0: [1, 2, 3], 1: [4, 9], 2: [6, 7]}) == [Parting(1, 1, 5, 9), Parting(2, 1, None, 7)]
    unfinished = Recorded(RunConfig(backend="sim"), {0: [1, 2]}, "interrupted", {}, None)
    assert partings(unfinished, {0: [1, 2, 3, 4]}) == []
    assert partings(unfinished, {0: [1]}) == [Parting(0, 1, 2, None)]


@pytest.mark.parametrize("content, fragments", [
    (None, ["cannot read"]),
    ("{not json", ["not JSON"]),
    ('{"provenance": {}, "policies": []}', ["is a compare, bench or workload record"]),
    ('{"config": {"backend": "sim"}, "search": {"width": 2}, "trees": []}', ["its trees are not a tree record's"]),
    ('{"config": {"backend": "sim"}, "search": {}, "trees": [{"task": "gsm8k"}]}', ["its trees are not"]),
    ('{"status": "ok"}', ["not a specsched record"]),
    ('{"config": {"backend": "sim", "warp": 9}, "sequences": []}', ["written by another specsched", "'warp'"]),
    ('{"config": {"backend": "sim", "k": 0}, "sequences": []}', ["--k must be in"]),
    ('{"config": {"backend": "sim"}, "sequences": [{"id": "x"}]}', ["its sequences are not a record's"]),
    (TWO.format('[{"id": 0, "tokens": [Infinity]}]'), ["its sequences are not a record's", "inf"]),
    (TWO.format('[{"id": 0, "tokens": "12"}, {"id": 1, "tokens": []}]'), ["its sequences are not a record's"]),
    (TWO.format('[{"id": true, "tokens": [true]}]'), ["its sequences are not a record's"]),
    (TWO.format('[{"id": 5, "tokens": [1]}, {"id": 6, "tokens": [2]}]'), ["sequence 5 is not one its config runs"]),
    (TWO.format('[{"id": 0, "tokens": [1]}, {"id": 0, "tokens": [2]}]'), ["sequence 0 appears twice"]),
    (TWO.format('[{"id": 0, "tokens": [1]}]'), ["its config runs 2 sequences", "sequence 1 is missing"]),
    (TWO.format('[]').replace('"ok"', '"weird"'), ["status is one of ok, failed, interrupted", "'weird'"]),
    ("[" * 100_000 + "]" * 100_000, ["not JSON"]),
])
def test_what_is_not_a_runs_or_a_trees_record_is_refused_naming_why(tmp_path, content, fragments):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as refused:
        load_record(str(path))
    assert all(f in str(refused.value) for f in fragments), str(refused.value)


@pytest.mark.parametrize("content, fragment", [
    (None, "cannot read"),
    (TWO.format('[{"id": 5, "tokens": [1]}, {"id": 6, "tokens": [2]}]'), "sequence 5 is not one its config runs"),
])
def test_a_refused_record_is_one_line_and_exit_2_before_any_model_loads(tmp_path, content, fragment):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert_one_error_line(rerun(str(path)), 2, fragment)


def test_the_rerun_record_may_not_overwrite_the_record_it_reads(tmp_path, greedy_record):
    path = edited(tmp_path, greedy_record)
    assert_one_error_line(rerun(path, "--json", path), 2, "would overwrite the record it reads")


def recorded_tree(tmp_path) -> tuple[str, dict]:
    path = tmp_path / "tree.json"
    result = specsched("run", *FAST_FLAGS, "--task", "gsm8k", "--limit", "1", "--thought-tokens", "6",
                       "--eval-tokens", "4", "--answer-tokens", "6", "--no-live", "--quiet", "--json", str(path))
    assert result.returncode == 0, result.stderr
    return str(path), json.loads(path.read_text())


def test_a_recorded_tree_is_rebuilt_node_for_node_and_an_edited_node_is_named(tmp_path):
    path, data = recorded_tree(tmp_path)
    nodes = sum(len(t["nodes"]) for t in data["trees"])
    result = rerun(path)
    assert result.returncode == 0, result.stderr
    assert f"✓ every tree is the record's, node for node: 1 tree, {nodes} nodes" in result.stdout
    data["trees"][0]["nodes"][2]["raw"] += " edited"
    with open(path, "w") as f:
        json.dump(data, f)
    edited = rerun(path)
    assert edited.returncode == 1
    assert "✗ 1 of 1 trees part from the record: tree 0 at node 2 (raw)" in " ".join(edited.stdout.split())


def test_tree_partings_take_an_unfinished_tree_as_a_prefix():
    node = {"parent": 0, "level": 1, "raw": "a", "evaluation": "", "score": 1.0, "kept": True}
    other = {**node, "score": 0.5}
    recorded = RecordedTrees(RunConfig(backend="sim"), {}, "gsm8k", [{}, {}], [[node], [node, node]],
                             ["ok", "interrupted"], {})
    assert tree_partings(recorded, [[node], [node, node, node]]) == []
    assert tree_partings(recorded, [[node, node], [node, other]]) == [NodeParting(0, 1, "only in the rerun"),
                                                                      NodeParting(1, 1, "score")]
    assert tree_partings(recorded, [[node]]) == [NodeParting(1, 0, "only in the record")]


@pytest.mark.slow  # two runs that each load the tiny transformers pair
def test_a_run_on_transformers_models_reruns_to_the_same_tokens_with_the_same_weights(tmp_path):
    path = tmp_path / "record.json"
    first = specsched("run", "--backend", "hf", "--target", "tiny", "--prompt", "LEONTES.", "--workers", "2",
                      "--max-new-tokens", "16", "--no-live", "--quiet", "--json", str(path), timeout=300)
    assert first.returncode == 0, first.stderr
    result = specsched("rerun", str(path), "--no-live", "--quiet", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "✓ every sequence's tokens are the record's: 2 sequences, 32 tokens" in result.stdout
    weights = [line for line in result.stdout.splitlines() if "weights (sha256)" in line]
    assert len(weights) == 2 and all("same" in line for line in weights)


@pytest.mark.parametrize("settings, flags", [({"tree": "pct", "k_config": []}, "--tree pct"),
                                             ({"step_aside": "on"}, "--step-aside on")])
def test_a_sampled_run_whose_drafts_follow_measured_times_is_not_blamed_on_a_tie_or_a_bug(settings, flags):
    """Its sampled text varies from run to run (docs/faults.md): a parting is expected, not a bug."""
    parts = [Parting(1, 3, 17, 16)]
    sampled = Recorded(RunConfig.of(backend="sim", temperature=0.8, **settings), {0: [1], 1: [2]}, "ok", {}, None)
    why = verdict(sampled, parts, []).splitlines()[1]
    assert f"samples (--temperature 0.8) with {flags}" in why and "varies from run to run" in why
    assert "a bug" not in why
    greedy = Recorded(RunConfig.of(backend="sim", **settings), {0: [1], 1: [2]}, "ok", {}, None)
    assert "a floating-point tie (docs/lossless.md) or a bug" in verdict(greedy, parts, [])
