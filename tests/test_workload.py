"""Jobs arriving over time: workload files, seeded Poisson arrivals, per-job OS measures, policies compared."""

from __future__ import annotations

import json
import re
import signal
import time

import pytest
from cli_runs import assert_one_error_line, read_json, specsched
from process_watch import WatchedCommand

from specsched.policies.base import ReadyDraft
from specsched.policies.priority import Priority
from specsched.runtime.apps.commands.workload import job_config, load_workload, poisson_workload
from specsched.runtime.core.config import ConfigError, RunConfig

FAST = ["--backend", "sim", "--sim-draft-ms", "2", "--sim-verify-ms", "4"]


def _write(path, *jobs) -> str:
    path.write_text("\n".join(json.dumps(j) if isinstance(j, dict) else j for j in jobs) + "\n")
    return str(path)


def _garbage(tmp_path) -> str:
    (tmp_path / "garbage.jsonl").write_bytes(bytes(range(128, 256)))
    return str(tmp_path / "garbage.jsonl")


def test_a_workload_file_is_read_in_arrival_order(tmp_path):
    jobs = load_workload(_write(tmp_path / "w.jsonl", {"arrival": 0.5, "prompt": "b", "priority": 1},
                                {"arrival": 0.0, "prompts": ["a", "c"], "deadline": 2, "max_new_tokens": 5}))
    assert [j.prompts for j in jobs] == [["a", "c"], ["b"]]
    assert jobs[0].deadline == 2 and jobs[0].max_new_tokens == 5 and jobs[1].priority == 1
    config = job_config(RunConfig(backend="sim", seed=7), jobs[0], 3)
    assert config.n_sequences == 2 and config.seed == 10 and config.max_new_tokens == 5


@pytest.mark.parametrize("line, fragment", [
    ("not json", "line 2: not JSON"),
    ('{"arrival": -1, "prompt": "a"}', '"arrival" must be seconds in [0, 86400], got -1'),
    ('{"arrival": 1e300, "prompt": "a"}', '"arrival" must be seconds in [0, 86400], got 1e+300'),
    ('{"prompt": ""}', 'give a non-empty "prompt"'),
    ('{"prompt": "a", "colour": 1}', "unknown key 'colour'"),
    ('{"prompt": "a", "max_new_tokens": 0}', '"max_new_tokens" must be an integer in 1..1,000,000, got 0'),
    ('{"prompt": "a", "max_new_tokens": 99999999999999999999}', '"max_new_tokens" must be an integer in 1..1,000,000'),
    ('{"prompt": "a", "deadline": 0}', '"deadline" must be seconds > 0'),
    ('{"prompt": "a", "max_new_tokens": true}', '"max_new_tokens" must be an integer'),  # it read as 1
    ('{"prompt": "a", "priority": false}', '"priority" must be an integer'),
    # submit refuses these: found mid-play, they would end the workload; refused when it is read
    ('{"prompt": "a", "priority": 1e30}', '"priority" must be an integer in -2**63..2**63-1'),
    ('{"prompt": "a", "priority": 100000000000000000000}', '"priority" must be an integer in -2**63..2**63-1'),
    ('{"prompt": "a", "deadline": Infinity}', 'line 2: "deadline" must be seconds > 0 after the job arrives'),
    ('{"prompt": "a", "prompts": ["b"]}', 'give "prompt" or "prompts", not both'),  # "prompt" was dropped
    ('{"prompts": ["a", "b\\udcff"]}', 'line 2: a prompt is not UTF-8 text (byte 0xff at character 2)'),
])
def test_a_bad_job_line_is_named_by_file_and_line(tmp_path, line, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        load_workload(_write(tmp_path / "w.jsonl", {"prompt": "ok"}, line))


def test_poisson_arrivals_are_seeded_and_cycle_the_prompts():
    a, b = poisson_workload("poisson:4", 6, ["x", "y"], seed=3), poisson_workload("poisson:4", 6, ["x", "y"], seed=3)
    assert a == b and a != poisson_workload("poisson:4", 6, ["x", "y"], seed=4)
    assert [j.prompts[0] for j in a] == ["x", "y"] * 3 and a[0].arrival == 0.0
    assert all(later.arrival > earlier.arrival for earlier, later in zip(a, a[1:]))
    for spec in ("poisson:0", "poisson:x", "uniform:2"):
        with pytest.raises(ConfigError, match="poisson:RATE"):
            poisson_workload(spec, 3, ["x"], seed=0)


def test_the_priority_policy_serves_the_more_urgent_job_first():
    ready = [ReadyDraft(0, 0, 1.0, 0, 3, 0, priority=0, job=1, job_priority=2),
             ReadyDraft(1, 5, 2.0, 1, 3, 0, priority=0, job=2, job_priority=0)]
    assert Priority().pick(ready).job == 2


def test_compare_refuses_a_later_policy_that_does_not_load_before_any_job_plays(tmp_path):
    """Only the first policy's jobs were checked up front: fcfs played in full, then the second was refused."""
    workload = _write(tmp_path / "w.jsonl", {"prompt": "lo mi"}, {"arrival": 0.1, "prompt": "ka ri"})
    out = specsched("compare", "--workload", workload, "--policies", f"fcfs,{tmp_path}/gone.py:Gone",
                    "--max-new-tokens", "8", *FAST, timeout=300)
    assert_one_error_line(out, 2, "policy file not found", "gone.py")
    assert "playing" not in out.stdout


def test_compare_plays_the_workload_under_each_policy_with_identical_texts(tmp_path):
    workload = _write(tmp_path / "w.jsonl", {"arrival": 0.0, "prompt": "lo mi", "priority": 2, "name": "first"},
                      {"arrival": 0.0, "prompt": "ka ri", "priority": 2},
                      {"arrival": 0.1, "prompts": ["su te", "na ko"], "priority": 0, "deadline": 30})
    out = specsched("compare", "--workload", workload, "--max-new-tokens", "24", *FAST,  # priority: its own rule
                    "--json", str(tmp_path / "c.json"), timeout=300)
    assert out.returncode == 0, out.stderr
    assert "every job's text is identical across fcfs, priority, rr" in out.stdout
    record = read_json(tmp_path / "c.json")
    assert record["provenance"]["models"]["backend"] == "sim"
    for policy, result in record["policies"].items():
        assert [j["name"] for j in result["jobs"]] == ["first", "job 1", "job 2"], policy
        assert all(j["response_s"] is not None and j["turnaround_s"] >= j["response_s"] for j in result["jobs"])
        assert result["jobs"][2]["deadline_met"] is True
        assert [len(r["sequences"]) for r in result["records"]] == [1, 1, 2]
    # the two jobs arriving together ran side by side, not one after the other
    first, second = (r["events"] for r in record["policies"]["fcfs"]["records"][:2])
    assert min(e["start"] for e in second) < max(e["end"] for e in first)


def test_run_with_poisson_arrivals_prints_a_row_per_job(tmp_path):
    out = specsched("run", "--arrivals", "poisson:20", "--jobs", "4", "--prompt", "lo mi", "--workers", "1",
                    "--max-new-tokens", "8", *FAST, "--json", str(tmp_path / "r.json"), timeout=300)
    assert out.returncode == 0, out.stderr
    assert all(f"job {i}" in out.stdout for i in range(4)) and "mean" in out.stdout
    assert len(read_json(tmp_path / "r.json")["policies"]["fcfs"]["jobs"]) == 4


def test_workload_flags_refuse_what_they_cannot_mean(tmp_path):
    workload = _write(tmp_path / "w.jsonl", {"prompt": "a"})
    for flags, fragment in ((["--workload", workload, "--arrivals", "poisson:1"], "not both"),
                            (["--workload", workload, "--prompt", "x"], "drop --prompt"),
                            (["--workload", str(tmp_path / "missing.jsonl")], "missing.jsonl"),
                            (["--arrivals", "poisson:-1"], "poisson:RATE"),
                            (["--arrivals", "poisson:1e-9", "--jobs", "2"], "more than a day"),
                            (["--workload", workload, "--policy", "priority", "--priorities", "3,0"],
                             "--priorities applies to a --prompt run"),
                            (["--workload", workload, "--breadth", "2"], "--breadth applies to a Tree-of-Thoughts"),
                            (["--arrivals", "poisson:1", "--prompt", "x", "--task", "gsm8k"],
                             "--task applies to a Tree-of-Thoughts run, not to a workload's jobs"),
                            (["--workload", _garbage(tmp_path)], "not a text file")):
        out = specsched("run", *flags, *FAST)
        assert out.returncode == 2 and fragment in out.stderr, (flags, out.stderr)


ENDLESS = {"max_new_tokens": 1000000}   # still running when the signal comes
SHORT = {"max_new_tokens": 4}          # done long before it: the play waits for the next arrival


@pytest.mark.parametrize("command, budget, signum", [
    ("run", ENDLESS, signal.SIGINT),
    ("run", SHORT, signal.SIGINT),       # it exited 0, as if the play had ended
    ("compare", SHORT, signal.SIGINT),   # it played the next policy on the closed engine: a traceback
    pytest.param("compare", ENDLESS, signal.SIGTERM, marks=pytest.mark.slow)])
def test_a_signal_during_a_workload_keeps_what_the_jobs_that_had_arrived_verified(tmp_path, command, budget, signum):
    # README: after an interruption the tokens verified so far are printed and written to --json; a
    # workload used to lose every job's record
    workload = _write(tmp_path / "w.jsonl", {"arrival": 0.0, "prompt": "lo mi", "name": "first", **budget},
                      {"arrival": 0.0, "prompt": "ka ri", **budget},
                      {"arrival": 3600.0, "prompt": "su te", "name": "late"})
    code, stdout, stderr, result = _signal_during(tmp_path, [command, "--workload", workload], signum)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}[signum], stderr
    how = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}[signum]
    assert stderr.strip().splitlines()[-1] == (f"specsched: error: interrupted ({how}); 2 of 3 jobs had arrived: "
                                               "what they verified is shown above")
    assert "first" in stdout and "late" not in stdout.split("…", 1)[1]
    assert [j["name"] for j in result["jobs"]] == ["first", "job 1"]
    status = ("interrupted", signal.Signals(signum).name) if budget is ENDLESS else ("ok", None)
    assert [(r["status"], r.get("stopped_by")) for r in result["records"]] == [status] * 2
    assert all(s["tokens"] for r in result["records"] for s in r["sequences"])


def test_a_signal_before_the_first_arrival_ends_the_play_with_no_job(tmp_path):
    workload = _write(tmp_path / "w.jsonl", {"arrival": 3600.0, "prompt": "su te"})
    code, stdout, stderr, result = _signal_during(tmp_path, ["run", "--workload", workload], signal.SIGTERM)
    assert code == 143, stderr  # it was a ZeroDivisionError in the jobs table
    assert stderr.strip().splitlines()[-1].endswith("0 of 1 jobs had arrived: what they verified is shown above")
    assert result["jobs"] == [] and result["records"] == []


def _signal_during(tmp_path, args: list[str], signum: int):
    """`specsched ARGS` on sim, `signum` once its processes have run for two seconds: exit status, stdout,
    stderr, and the one policy's results in its --json (compare: the policies after it never ran)."""
    out = tmp_path / "w.json"
    with WatchedCommand(*args, "--workers", "1", "--max-new-tokens", "1000000", *FAST, "--json", str(out)) as w:
        w.wait_for_children(2)  # the verifier and the workers started before the first arrival
        time.sleep(2.0)
        w.signal(signum)
        code, stdout, stderr = w.finish(timeout=60)
    assert w.survivors() == [] and "Traceback" not in stderr, stderr
    (result,) = read_json(out)["policies"].values()
    return code, stdout, stderr, result
