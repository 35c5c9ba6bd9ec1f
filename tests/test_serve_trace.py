"""`specsched serve --trace`: a server's requests recorded as one workload when SIGTERM stops it, which replay,
export and whatif read as they read any run."""

import json
import re
import signal

import httpx
import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, specsched
from process_watch import WatchedCommand

# three requests, in this order: one sequence, two (n = 2) more urgent, one decoded by the target alone
REQUESTS = [{"prompt": "kaka lomi", "max_tokens": 12},
            {"prompt": "lomi nene", "max_tokens": 8, "n": 2, "specsched": {"priority": -1}},
            {"prompt": "nene kaka", "max_tokens": 4, "specsched": {"drafter": "none"}}]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("serve") / "served.json"
    with WatchedCommand("serve", *FAST_FLAGS, "--port", "0", "--trace", str(path)) as w:
        w.wait_for_line("serving ")
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", "".join(w.out)).group(1)
        answers = [httpx.post(url + "/v1/completions", json={"model": "sim", **r}, timeout=120).json()
                   for r in REQUESTS]
        w.signal(signal.SIGTERM)
        status, out, err = w.finish()
    assert status == 143, err
    return path, answers, out


def test_the_trace_holds_every_drafted_request_as_a_job_with_its_arrival(recorded):
    path, answers, out = recorded
    assert f"trace of 2 requests written to {path} (1 decoded by the target alone left out)" in out
    data = json.loads(path.read_text())
    jobs = data["workload"]["jobs"]
    assert [(j["name"], j["first_seq"], j["sequences"], j["priority"], j["max_new_tokens"]) for j in jobs] == [
        ("request 0", 0, 1, 0, 12), ("request 1", 1, 2, -1, 8)]
    assert jobs[0]["arrival_s"] == 0.0 < jobs[1]["arrival_s"]  # sent one after the other
    # the texts the clients were sent, as the trace's sequences (job j's sequence i is j's first_seq + i)
    sent = [c["text"] for a in answers[:2] for c in sorted(a["choices"], key=lambda c: c["index"])]
    assert [s["text"] for s in data["sequences"]] == sent
    assert {e["worker"] for e in data["events"] if e["role"] == "draft"} == {0, 1, 2}


def test_whatif_replay_and_export_read_it(recorded, tmp_path):
    path, _, _ = recorded
    out = specsched("whatif", str(path), "--policy", "fcfs", "--policy", "priority", "--json", str(tmp_path / "w.json"))
    assert out.returncode == 0, out.stderr
    predicted = json.loads((tmp_path / "w.json").read_text())["predicted"]
    data = json.loads(path.read_text())
    rounds = sum(1 for e in data["events"] if e["role"] == "draft" and e["kind"] == "verify")
    for name in ("fcfs", "priority"):  # every round of every request, once
        assert len(predicted[name]["order"]) == rounds and sorted(set(predicted[name]["order"])) == [0, 1, 2]
    replay = specsched("replay", str(path), "--final")
    assert replay.returncode == 0 and "metrics recomputed from the trace's events equal the recorded ones" in \
        replay.stdout, replay.stderr
    chrome = specsched("export", str(path), "--chrome", str(tmp_path / "c.json"))
    assert chrome.returncode == 0, chrome.stderr


def test_a_server_of_another_mode_cannot_record_and_says_so_in_one_line(tmp_path):
    out = specsched("serve", "--backend", "sim", "--mode", "sd", "--port", "0", "--trace", str(tmp_path / "t.json"))
    assert_one_error_line(out, 2, "--trace records a server's jobs as one --mode seed run")
