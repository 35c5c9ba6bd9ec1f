"""What-if: a recorded run's rounds replayed in virtual time under other policies."""

from __future__ import annotations

import json

import pytest
from cli_runs import run_cli, specsched

from specsched.runtime.apps.analysis.recorded_run import Dispatch, JobFacts, Recorded, Round, recorded
from specsched.runtime.apps.analysis.whatif import simulate
from specsched.runtime.core.config import ConfigError, RunConfig
from specsched.runtime.core.costs import CostCurve
from specsched.runtime.core.events import VERIFIER, Event
from specsched.runtime.engine.osmetrics import measure as measure_os

CONFIG = RunConfig.of(backend="sim", mode="seed", workers=2, prompts=["a", "b"], max_new_tokens=10, k=4)


def verified_order(prediction) -> list[int]:
    return [e.seq for e in sorted(prediction.events, key=lambda e: e.start)
            if e.role == "verifier" and e.kind == "verify"]


def test_a_hand_worked_schedule_under_fcfs_and_srtf():
    # seq 0: a long job (3 rounds); seq 1: a short one (1 round) whose draft arrives 1 ms after seq 0's.
    # Every draft takes 10 ms (seq 1's first 11 ms), every verification 20 ms, no dispatch gap.
    run = Recorded({0: [Round(0, 0.010, 0.020, 4), Round(0, 0.010, 0.020, 4), Round(0, 0.010, 0.020, 2)],
                    1: [Round(0, 0.011, 0.020, 5)]})
    fcfs = simulate(CONFIG, run, "fcfs")
    # t=10 seq 0 verified (10-30); seq 1 waits from 11; seq 0's next draft arrives at 40 - seq 1 (30-50)
    # goes first; seq 0 at 50-70, drafts 70-80, verified 80-100
    assert verified_order(fcfs) == [0, 1, 0, 0]
    assert fcfs.makespan_s == pytest.approx(0.100)
    # SRTF: at t=30 seq 1 (5 tokens left) and nothing else is ready: the same; the long job is never
    # preferred while the short one waits
    srtf = simulate(CONFIG, run, "srtf")
    assert verified_order(srtf) == [0, 1, 0, 0]
    # worker 1's turnaround: first draft start 0 to its verification end at 50 ms
    assert {w.worker: round(w.turnaround_s, 3) for w in fcfs.os.workers} == {0: 0.1, 1: 0.05}


def start_up_trace() -> tuple[list[Event], list[tuple[float, int, int]]]:
    """Issue 47's repro 1, by hand (ms): three workers send their first drafts at 3, 4 and 5; the verifier, still
    starting, begins the first verification at 65 (62 after its draft) and takes 127 (later ones 8, 2 ms apart).
    Each worker drafts its second round from 1 to 4 ms after its verdict; the verifier reads a draft sent during a
    verification after it ends."""
    ms, events, commits = 1e-3, [Event(1, "verifier", VERIFIER, "idle", 0, 0.065)], []
    turns = [(0, 0.065, 0.192), (1, 0.194, 0.202), (2, 0.204, 0.212), (0, 0.214, 0.222), (1, 0.224, 0.232),
             (2, 0.234, 0.242)]
    sent = {0: [3 * ms, 0.196], 1: [4 * ms, 0.206], 2: [5 * ms, 0.216]}
    admitted = {0: [3 * ms, 0.2025], 1: [4 * ms, 0.2125], 2: [5 * ms, 0.2225]}
    for n, (seq, start, end) in enumerate(turns):
        rnd = n // 3
        begin = 0.0 if rnd == 0 else sent[seq][1] - 3 * ms
        events += [Event(10 + seq, "draft", seq, "draft", begin, sent[seq][rnd], seq),
                   Event(10 + seq, "draft", seq, "queued", sent[seq][rnd], start, seq, admitted=admitted[seq][rnd]),
                   Event(10 + seq, "draft", seq, "verify", start, end, seq), Event(1, "verifier", VERIFIER, "verify",
                                                                                    start, end, seq)]
        commits.append((end, seq, 4))
    return events, commits


def test_a_slow_start_up_is_re_simulated_as_recorded():
    events, commits = start_up_trace()
    three = RunConfig.of(backend="sim", mode="seed", workers=3, max_new_tokens=8, k=4)
    recorded_os = measure_os(events, {0: 8, 1: 8, 2: 8})
    # responses 62, 190 and 199 ms: every first wait carries the start-up (a median dispatch gap and the long
    # first forward kept with one sequence predicted 2, 130 and 139 ms: -40 %)
    assert [round(w.response_s, 4) for w in recorded_os.workers] == [0.062, 0.190, 0.199]
    predicted = simulate(three, recorded(three, events, commits), "fcfs")
    assert verified_order(predicted) == [0, 1, 2, 0, 1, 2]
    assert [round(w.response_s, 4) for w in predicted.os.workers] == [0.062, 0.190, 0.199]
    assert predicted.makespan_s == pytest.approx(recorded_os.window_s)
    assert predicted.os.mean_turnaround_s == pytest.approx(recorded_os.mean_turnaround_s)


def test_the_recorded_fcfs_run_is_predicted_under_fcfs(tmp_path):
    trace = tmp_path / "fcfs.trace"
    out = run_cli("--prompt", "a b", "--prompt", "c d", "--prompt", "e f", "--max-new-tokens", "20",
                  "--sim-draft-ms", "3", "--sim-verify-ms", "6", "--quiet", "--no-live", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    svg = tmp_path / "charts"
    result = specsched("whatif", str(trace), "--policy", "fcfs", "--policy", "rr", "--policy", "mlfq",
                       "--svg", str(svg), "--json", str(tmp_path / "w.json"))
    assert result.returncode == 0, result.stderr
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert {"fcfs (recorded)", "fcfs (predicted)", "rr (predicted)", "mlfq (predicted)"} <= set(rows)
    recorded, predicted = (float(rows[k].split("│")[2].split()[0]) for k in ("fcfs (recorded)", "fcfs (predicted)"))
    # the same policy on the same rounds: the makespan comes back (up to the dispatch gap's spread)
    assert predicted == pytest.approx(recorded, rel=0.25)
    assert sorted(p.name for p in svg.iterdir()) == ["fcfs.svg", "mlfq.svg", "rr.svg"]
    # --json: the table's numbers, and each prediction's order of verifications (every round of every sequence)
    table = json.loads((tmp_path / "w.json").read_text())
    assert table["recorded"]["policy"] == "fcfs" and list(table["predicted"]) == ["fcfs", "rr", "mlfq"]
    assert f"{table['predicted']['fcfs']['makespan_s']:.3f}" == rows["fcfs (predicted)"].split("│")[2].split()[0]
    response = table["recorded"]["os_metrics"]["mean_response_s"]
    assert f"{response:.3f} s" == rows["fcfs (recorded)"].split("│")[4].strip()
    record = json.loads(trace.read_text())
    verifications = sum(1 for e in record["events"] if e["role"] == "draft" and e["kind"] == "verify")
    assert all(sorted(p["order"]) == sorted(table["predicted"]["fcfs"]["order"]) and len(p["order"]) == verifications
               for p in table["predicted"].values())


def test_several_recordings_of_one_workload_give_the_median_of_their_predictions(tmp_path):
    flags = ("--prompt", "a b", "--prompt", "c d", "--max-new-tokens", "12", "--sim-draft-ms", "2",
             "--sim-verify-ms", "4", "--quiet", "--no-live")
    traces = [tmp_path / f"{i}.trace" for i in range(3)]
    for t in traces:
        assert run_cli(*flags, "--trace", str(t)).returncode == 0
    each = []
    for t in traces:
        path = tmp_path / f"{t.stem}.json"
        assert specsched("whatif", str(t), "--policy", "rr", "--json", str(path)).returncode == 0
        each.append(json.loads(path.read_text())["predicted"]["rr"])
    out = specsched("whatif", *map(str, traces), "--policy", "rr", "--json", str(tmp_path / "all.json"))
    assert out.returncode == 0, out.stderr
    assert "median of 3 recordings" in out.stdout
    median = json.loads((tmp_path / "all.json").read_text())["median"]["predicted"]["rr"]
    assert median["makespan_s"] == pytest.approx(sorted(p["makespan_s"] for p in each)[1])
    assert median["mean_response_s"] == pytest.approx(sorted(p["os_metrics"]["mean_response_s"] for p in each)[1])
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if "│" in line}
    assert f"{median['makespan_s']:.3f}" in rows["rr (predicted)"]
    # recordings of another workload are refused in one line
    other = tmp_path / "other.trace"
    assert run_cli(*flags[2:], "--prompt", "e f", "--trace", str(other)).returncode == 0
    refused = specsched("whatif", str(traces[0]), str(other), "--policy", "rr")
    assert refused.returncode == 2 and "different sequences or tokens" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


PLUGIN = "from specsched.policies import Policy\nclass {name}(Policy):\n    def pick(self, ready):\n        {body}\n"
RAISES = PLUGIN.format(name="Boom", body="raise RuntimeError('no')")
ANSWER = PLUGIN.format(name="FortyTwo", body="return 42")


@pytest.mark.parametrize("args, message", [
    ([], "name at least one --policy"),
    (["--policy", "rr", "--max-batch", "-1"], "--max-batch must be >= 0"),
    (["--policy", "{dir}/boom.py:Boom"], "raised RuntimeError: no"),
    # as a live run says it (run_queue.checked_pick), not as batching
    (["--policy", "{dir}/answer.py:FortyTwo"], "returned 42 (int), which is not one of the ready drafts"),
    (["--policy", "nosuch"], "unknown policy 'nosuch'"),
])
def test_whatif_refuses_what_it_cannot_answer_in_one_line(tmp_path, args, message):
    (tmp_path / "boom.py").write_text(RAISES)
    (tmp_path / "answer.py").write_text(ANSWER)
    trace = tmp_path / "t.trace"
    assert run_cli("--max-new-tokens", "12", "--quiet", "--no-live", "--trace", str(trace)).returncode == 0
    out = specsched("whatif", str(trace), *(a.format(dir=tmp_path) for a in args))
    assert out.returncode == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_job_arriving_later_is_served_by_its_jobs_priority():
    # job 0 (priority 0) arrives at 0 with 3 rounds; job 1 (priority 1) at 5 ms with one. Drafts take no time,
    # verifications 10 ms. At 10 ms both wait: FCFS serves job 1 (queued since 5 ms) at 10-20; priority serves
    # job 0 to its end first, and job 1 at 30-40
    run = Recorded({0: [Round(0, 0, 0.010, 4)] * 3, 1: [Round(0.005, 0, 0.010, 4)]},
                   jobs={0: JobFacts(job=0, priority=0), 1: JobFacts(job=1, arrival_s=0.005, priority=1)})
    two = RunConfig.of(backend="sim", mode="seed", workers=2, max_new_tokens=12, k=4)
    fcfs, priority = simulate(two, run, "fcfs"), simulate(two, run, "priority")
    assert verified_order(fcfs) == [0, 1, 0, 0] and verified_order(priority) == [0, 0, 0, 1]
    assert [round(w.response_s, 3) for w in fcfs.os.workers] == [0.0, 0.005]
    assert [round(w.response_s, 3) for w in priority.os.workers] == [0.0, 0.025]


def test_a_workloads_policy_sees_its_workers_by_their_ids_in_the_pool():
    # two jobs whose drafts are sent together; the engine gave job 0 pool worker 1 and job 1 pool worker 0.
    # Round-robin takes turns by worker id, as it did in the live run: job 1's first
    run = Recorded({0: [Round(0, 0.001, 0.010, 4)], 1: [Round(0, 0.001, 0.010, 4)]},
                   jobs={0: JobFacts(job=0, worker=1), 1: JobFacts(job=1, worker=0)})
    two = RunConfig.of(backend="sim", mode="seed", workers=2, max_new_tokens=4, k=4)
    assert verified_order(simulate(two, run, "rr")) == [1, 0]
    assert verified_order(simulate(two, Recorded(run.rounds), "rr")) == [0, 1]


def test_a_batching_policy_is_re_simulated_with_the_fitted_cost_of_its_rows():
    # three drafts sent at 1, 2 and 3 ms, each verified alone in 10 ms; a forward costs 10 ms + 2 ms an extra row
    # (b = 0). FCFS: 1-11, 11-21, 21-31. batch: the first alone (1-11: nothing else was sent), then the other two
    # together in 10 + 2 = 12 ms (11-23)
    run = Recorded({s: [Round(0, 0.001 * (s + 1), 0.010, 3)] for s in range(3)}, cost=CostCurve(0.010, 0.0, 0.002))
    three = RunConfig.of(backend="sim", mode="seed", workers=3, max_new_tokens=10, k=4)
    fcfs, batch = simulate(three, run, "fcfs"), simulate(three, run, "batch")
    assert fcfs.makespan_s == pytest.approx(0.031) and verified_order(fcfs) == [0, 1, 2]
    assert batch.makespan_s == pytest.approx(0.023) and verified_order(batch) == [0, -1]
    assert sorted(batch.finished.items()) == [(0, pytest.approx(0.011)), (1, pytest.approx(0.023)),
                                              (2, pytest.approx(0.023))]
    # at most --max-batch drafts a forward: batch with 1 is FCFS
    assert simulate(three, run, "batch", max_batch=1).makespan_s == pytest.approx(0.031)


def test_batch_cost_prices_the_rows_an_fcfs_recording_cannot_show(tmp_path):
    trace = tmp_path / "fcfs.trace"
    assert run_cli("--prompt", "a b", "--prompt", "c d", "--prompt", "e f", "--max-new-tokens", "16",
                   "--sim-draft-ms", "2", "--sim-verify-ms", "6", "--quiet", "--no-live",
                   "--trace", str(trace)).returncode == 0

    def batch_makespan(*extra: str) -> tuple[float, str]:
        out = specsched("whatif", str(trace), "--policy", "batch", "--json", str(tmp_path / "w.json"), *extra)
        assert out.returncode == 0, out.stderr
        return json.loads((tmp_path / "w.json").read_text())["predicted"]["batch"]["makespan_s"], out.stdout

    alone, said = batch_makespan()
    assert "extra batch row costs (c) is taken as 0" in " ".join(said.split())
    run = tmp_path / "batched.json"  # a record of a run that batched: its live fit, 40 ms an extra row
    run.write_text(json.dumps({"cost_curve": [0.006, 0.0, 0.040, 80]}))
    priced, said = batch_makespan("--batch-cost", str(run))
    assert "taken as 0" not in said
    assert json.loads((tmp_path / "w.json").read_text())["forward_cost"] == [0.006, 0.0, 0.040, 80]
    assert priced > alone + 0.040  # at least one batch of two rows paid its 40 ms
    for body, message in (({"status": "ok"}, "no cost_curve"), ({"cost_curve": [1, 2]}, "no cost_curve"),
                          (None, "No such file")):
        path = tmp_path / "c.json"
        path.unlink(missing_ok=True)
        if body is not None:
            path.write_text(json.dumps(body))
        out = specsched("whatif", str(trace), "--policy", "batch", "--batch-cost", str(path))
        assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_a_batch_pays_each_rows_postprocess_in_turn():
    # as above, but 3 of each 10 ms verification is its postprocess (acceptance and resampling, row by row): the
    # batch of two is one 10 - 3 + 2 = 9 ms forward, then 3 + 3 ms of postprocess (11-26 ms)
    run = Recorded({s: [Round(0, 0.001 * (s + 1), 0.010, 3, post_s=0.003)] for s in range(3)},
                   cost=CostCurve(0.010, 0.0, 0.002))
    three = RunConfig.of(backend="sim", mode="seed", workers=3, max_new_tokens=10, k=4)
    assert simulate(three, run, "fcfs").makespan_s == pytest.approx(0.031)
    assert simulate(three, run, "batch").makespan_s == pytest.approx(0.026)


def test_a_draft_sent_less_than_its_transit_before_the_verifiers_read_waits_a_turn():
    # seq 0 sent at 1 ms and verified alone (1-11); seq 1 sent at 2 ms, seq 2 at 10.8 ms; the verifier reads its
    # socket as it starts at 11 ms. Instantly delivered, batch verifies seqs 1 and 2 together (11-23); with the
    # recorded transit of 0.5 ms seq 2 is not there yet (11.3 ms) and waits for the next forward (11-21, 21-31)
    rounds = {0: [Round(0, 0.001, 0.010, 3)], 1: [Round(0, 0.002, 0.010, 3)], 2: [Round(0, 0.0108, 0.010, 3)]}
    cost = CostCurve(0.010, 0.0, 0.002)
    three = RunConfig.of(backend="sim", mode="seed", workers=3, max_new_tokens=10, k=4)
    instant = simulate(three, Recorded(rounds, cost=cost), "batch")
    assert verified_order(instant) == [0, -1] and instant.makespan_s == pytest.approx(0.023)
    dispatch = Dispatch(idle_s=0.001, first_start_s=0.001, transit_s=0.0005)
    late = simulate(three, Recorded(rounds, dispatch, cost=cost), "batch")
    assert verified_order(late) == [0, 1, 2] and late.makespan_s == pytest.approx(0.031)


def test_a_draft_sent_just_before_the_verifier_comes_free_wakes_it_after_its_transit():
    # seq 0 verified 1-11 ms; seq 1's draft, sent at 10.8, is readable at 11.3 (transit 0.5): the verifier is waiting
    # by then, and starts its recorded 1 ms after the sending (11.8), never before the draft is there
    rounds = {0: [Round(0, 0.001, 0.010, 3)], 1: [Round(0, 0.0108, 0.010, 3)]}
    two = RunConfig.of(backend="sim", mode="seed", workers=2, max_new_tokens=10, k=4)
    for transit, second in ((0.0, 0.011), (0.0005, 0.0118)):
        run = Recorded(rounds, Dispatch(idle_s=0.001, first_start_s=0.001, transit_s=transit))
        p = simulate(two, run, "fcfs")
        starts = sorted(e.start for e in p.events if e.role == "verifier" and e.kind == "verify")
        assert starts == [pytest.approx(0.001), pytest.approx(second)]
        (wait,) = [e for e in p.events if e.kind == "queued" and e.seq == 1]
        assert wait.admitted <= wait.end and wait.admitted >= 0.0108 + transit - 1e-12


def test_the_transit_is_measured_from_drafts_that_found_the_verifier_waiting():
    # one sequence, three rounds (ms). The first draft (sent 5, read 5.7) met a verifier still starting: not counted.
    # The next two found it idle since the verification before: read 0.4 and 0.6 ms after their sending, verified
    # 1 ms after it. Transit: the median of 0.4 and 0.6
    ms = 1e-3
    events = [Event(1, "verifier", VERIFIER, "idle", 0, 6 * ms)]
    rounds = ((0, 5, 5.7, 6, 16), (20, 30, 30.4, 31, 41), (50, 60, 60.6, 61, 71))
    for begin, sent, read, start, end in rounds:
        events += [Event(10, "draft", 0, "draft", begin * ms, sent * ms, 0),
                   Event(10, "draft", 0, "queued", sent * ms, start * ms, 0, admitted=read * ms),
                   Event(10, "draft", 0, "verify", start * ms, end * ms, 0),
                   Event(1, "verifier", VERIFIER, "verify", start * ms, end * ms, 0)]
    one = RunConfig.of(backend="sim", mode="seed", workers=1, max_new_tokens=12, k=4)
    dispatch = recorded(one, events, [(end * ms, 0, 4) for *_, end in rounds]).dispatch
    assert dispatch.transit_s == pytest.approx(0.0005) and dispatch.idle_s == pytest.approx(0.001)


def test_a_recorded_batchs_postprocess_is_shared_by_its_rows():
    # two sequences verified together: a 10 ms forward (8 + 2 for the second row), then 4 ms of postprocess for
    # both: each row's share of the postprocess is 2 ms
    ms = 1e-3
    events = [Event(1, "verifier", VERIFIER, "idle", 0, 5 * ms)]
    for seq in (0, 1):
        events += [Event(10 + seq, "draft", seq, "draft", 0, 5 * ms, seq),
                   Event(10 + seq, "draft", seq, "queued", 5 * ms, 5 * ms, seq, admitted=5 * ms),
                   Event(10 + seq, "draft", seq, "verify", 5 * ms, 19 * ms, seq)]
    events += [Event(1, "verifier", VERIFIER, "verify", 5 * ms, 15 * ms, -1),
               Event(1, "verifier", VERIFIER, "resample", 15 * ms, 19 * ms, -1)]
    two = RunConfig.of(backend="sim", mode="seed", workers=2, max_new_tokens=4, k=4, max_batch=0, policy="batch")
    rounds = [recorded(two, events, [(19 * ms, 0, 4), (19 * ms, 1, 4)]).rounds[s][0] for s in (0, 1)]
    assert [r.post_s for r in rounds] == [pytest.approx(0.002)] * 2
    # one forward fits no curve (forward_cost.py needs three): each row's forward is then the whole 10 ms
    assert [r.verify_s for r in rounds] == [pytest.approx(0.012)] * 2


def test_a_replayed_policy_stuck_in_pick_is_stopped_by_the_runs_policy_timeout(tmp_path):
    (tmp_path / "stuck.py").write_text(PLUGIN.format(name="Stuck", body="while True: pass"))
    run = Recorded({0: [Round(0, 0.010, 0.020, 4)], 1: [Round(0, 0.011, 0.020, 5)]})
    config = RunConfig.of(backend="sim", mode="seed", workers=2, prompts=["a", "b"], policy_timeout_s=0.2)
    with pytest.raises(ConfigError, match=r"'.*stuck.py:Stuck': pick did not return within 0.2 s"):
        simulate(config, run, f"{tmp_path}/stuck.py:Stuck")


def test_whatif_needs_a_seed_run_recorded_as_a_trace(tmp_path):
    assert run_cli("--mode", "ar", "--max-new-tokens", "4", "--quiet", "--no-live", "--trace",
                   str(tmp_path / "ar.trace")).returncode == 0
    out = specsched("whatif", str(tmp_path / "ar.trace"), "--policy", "rr")
    assert out.returncode == 2 and "needs a --mode seed run" in out.stderr
    with pytest.raises(ConfigError, match="--step-aside"):
        recorded(RunConfig(backend="sim", step_aside="on"), [], [])


def test_edf_meets_every_deadline_of_a_feasible_workload_where_fcfs_misses_one():
    # three jobs queue at 2, 3 and 4 ms (drafts of 2, 3 and 4 ms); verifications take 10 ms; the last
    # one is due at 25 ms, the others at 100 ms. FCFS: 0 at 2-12, 1 at 12-22, 2 at 22-32: late. EDF
    # serves 2 as soon as the verifier is free at 12 (12-22): every deadline met.
    run = Recorded({0: [Round(0, 0.002, 0.010, 4), Round(0, 0.001, 0.010, 4)],
                    1: [Round(0, 0.003, 0.010, 4)],
                    2: [Round(0, 0.004, 0.010, 4)]},
                   jobs={0: JobFacts(deadline_s=0.100), 1: JobFacts(deadline_s=0.100), 2: JobFacts(deadline_s=0.025)})
    three = RunConfig.of(backend="sim", mode="seed", workers=3, max_new_tokens=10, k=4)
    fcfs, edf = simulate(three, run, "fcfs"), simulate(three, run, "edf")
    assert fcfs.missed == [2] and fcfs.finished[2] == pytest.approx(0.032)
    assert edf.missed == [] and edf.finished[2] == pytest.approx(0.022)
