"""A workload of jobs arriving over time recorded with --trace: one run of every job's sequences on one timeline,
which replay, export and whatif read as they read any run (issue 47, repro 2)."""

from __future__ import annotations

import json

import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, run_cli, specsched

from specsched.policies.loader import BUILTIN
from specsched.runtime.apps.run.trace import load_trace


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    root = tmp_path_factory.mktemp("workload")
    out = run_cli("--arrivals", "poisson:4", "--jobs", "3", "--prompt", "x", *FAST_FLAGS, "--max-new-tokens", "16",
                  "--trace", str(root / "t.json"), "--json", str(root / "jobs.json"))
    assert out.returncode == 0, out.stderr
    return root


def test_the_trace_holds_every_job_on_one_timeline(traced):
    data, jobs = (json.loads((traced / name).read_text()) for name in ("t.json", "jobs.json"))
    played = jobs["policies"]["fcfs"]["jobs"]
    section = data["workload"]["jobs"]
    # the jobs as they were played: their arrivals (from the first) and priorities, one sequence each
    assert [(j["name"], j["arrival_s"], j["priority"]) for j in section] == \
        [(j["name"], j["arrival_s"], j["priority"]) for j in played]
    assert [(j["first_seq"], j["sequences"]) for j in section] == [(0, 1), (1, 1), (2, 1)]
    # each job's tokens, now the whole run's sequence of the same number
    texts = [r["sequences"][0]["tokens"] for r in jobs["policies"]["fcfs"]["records"]]
    assert [s["tokens"] for s in data["sequences"]] == texts
    rows = {e["worker"] for e in data["events"] if e["role"] == "draft"}
    assert rows == {0, 1, 2}
    # a later job's first draft comes after its arrival
    first_draft = {s: min(e["start"] for e in data["events"] if e["role"] == "draft" and e["seq"] == s)
                   for s in range(3)}
    assert all(first_draft[j["first_seq"]] >= j["started"] for j in section)


def test_replay_and_export_read_it(traced, tmp_path):
    assert load_trace(traced / "t.json").reproduced()  # its metrics recomputed from its events: as recorded
    out = specsched("export", str(traced / "t.json"), "--chrome", str(tmp_path / "t.chrome.json"))
    assert out.returncode == 0, out.stderr
    tracks = {e["args"]["name"] for e in json.loads((tmp_path / "t.chrome.json").read_text())["traceEvents"]
              if e["name"] == "process_name"}
    assert "verifier" in tracks and len(tracks) >= 2


def test_whatif_re_simulates_it_under_every_built_in_policy(traced, tmp_path):
    policies = [a for name in BUILTIN for a in ("--policy", name)]
    out = specsched("whatif", str(traced / "t.json"), *policies, "--json", str(tmp_path / "w.json"))
    assert out.returncode == 0, out.stderr
    table = json.loads((tmp_path / "w.json").read_text())
    assert list(table["predicted"]) == list(BUILTIN)
    data = json.loads((traced / "t.json").read_text())
    rounds = sum(1 for e in data["events"] if e["role"] == "draft" and e["kind"] == "verify")
    for name, p in table["predicted"].items():  # every round of every job, once, whatever the policy
        assert len(p["order"]) == rounds and sorted(set(p["order"])) == [0, 1, 2], name
    # the recorded policy, re-simulated: its own makespan back
    assert table["predicted"]["fcfs"]["makespan_s"] == pytest.approx(table["recorded"]["makespan_s"], rel=0.25)


def test_a_workload_of_another_mode_is_refused_in_one_line(tmp_path):
    out = run_cli("--arrivals", "poisson:4", "--jobs", "2", "--prompt", "x", "--mode", "ar", *FAST_FLAGS,
                  "--trace", str(tmp_path / "t.json"))
    assert_one_error_line(out, 2, "--trace records a workload of --mode seed jobs")
    assert not (tmp_path / "t.json").exists()
