"""`--trace PATH` records a run; `specsched replay` plays it back and recomputes its metrics from the
recorded events with the function a live run uses, which must give the recorded numbers exactly."""

from __future__ import annotations

import json
import random
from contextlib import redirect_stdout
from io import StringIO

import pytest
from cli_runs import PLAIN_PROMPT

from specsched.runtime.apps.cli import main
from specsched.runtime.apps.run.trace import ReplayClock, TraceError, load_trace, replay

OLD_KEYS = {"status", "error", "config", "sequences", "metrics", "counters", "events"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    trace, record = root / "run.trace.json", root / "run.json"
    out = StringIO()
    with redirect_stdout(out):
        code = main(["run", "--prompt", PLAIN_PROMPT,
               "--workers", "3", "--max-new-tokens", "16", "--backend", "sim", "--sim-draft-ms", "1",
                     "--sim-verify-ms", "3", "--seed", "5", "--trace", str(trace), "--json", str(record)])
    assert code == 0
    return trace, record, out.getvalue()


def test_run_prints_and_stores_os_metrics(recorded):
    _, record, stdout = recorded
    assert "scheduling, the OS way" in stdout and "Jain's index" in stdout and "starvation" in stdout
    data = json.loads(record.read_text())
    assert OLD_KEYS <= data.keys() and {"os_metrics", "view"} <= data.keys()
    os_metrics = data["os_metrics"]
    assert [w["worker"] for w in os_metrics["workers"]] == [0, 1, 2]
    committed = sum(len(s["tokens"]) for s in data["sequences"])  # what the run's record says it emitted
    assert sum(w["tokens"] for w in os_metrics["workers"]) == data["metrics"]["tokens"] == committed > 0
    assert os_metrics["utilisation"] == data["metrics"]["verifier_busy"]
    assert data["view"]["kind"] == "lines"          # stdout was not a terminal


def test_replay_reproduces_the_recorded_metrics_exactly(recorded, tmp_path):
    path, _, _ = recorded
    data = json.loads(path.read_text())
    again = load_trace(path).record.to_json()
    assert again["metrics"] == data["metrics"] and again["os_metrics"] == data["os_metrics"]
    # the events' order in the file does not matter either: sums are exactly rounded
    random.Random(1).shuffle(data["events"])
    shuffled = tmp_path / "shuffled.json"
    shuffled.write_text(json.dumps(data))
    trace = load_trace(shuffled)
    assert trace.reproduced() and trace.record.to_json()["metrics"] == data["metrics"]


def test_replay_hands_over_the_run_as_it_happened(recorded):
    trace = load_trace(recorded[0])
    rec = trace.record.collected

    class SteppedClock:     # the supervisor's start, then each tenth of the events by end time, then the end
        def __init__(self, start: float, end: float) -> None:
            # Steps at event quantiles, not at even times: on a busy machine process start-up can take
            # most of the run, which left every event inside one even step.
            ends = sorted(e.end for e in rec.events)
            self.end = end
            self.times = iter([start, *(ends[len(ends) * i // 10] for i in range(1, 10)), end])

        def __call__(self) -> float:
            self.now = next(self.times, self.end)
            return self.now

    clock, seen = SteppedClock(rec.started, ReplayClock(trace).end), []

    def update(feed):
        assert all(e.end <= clock.now for e in feed.events)        # an event once it has ended
        assert all(t <= clock.now for t, _, _ in feed.commits)
        seen.append((len(feed.events), sum(n for _, _, n in feed.commits)))

    replay(trace, update, clock, sleep=lambda s: None)
    assert seen == sorted(seen) and len(set(seen)) > 2
    assert seen[-1] == (len(rec.events), sum(len(t) for t in rec.tokens.values()))


def test_replay_command(recorded):
    out = StringIO()
    with redirect_stdout(out):
        assert main(["replay", str(recorded[0]), "--final"]) == 0
        assert main(["replay", str(recorded[0]), "--speed", "1000"]) == 0
    text = out.getvalue()
    assert text.count("✓ metrics recomputed from the trace's events equal the recorded ones") == 2
    assert "verifier" in text and "draft 2" in text and "\x1b[" not in text


def test_a_plain_record_is_not_a_trace(recorded):
    with pytest.raises(TraceError, match="record one with `specsched run --trace PATH`"):
        load_trace(recorded[1])


def test_an_event_that_ends_before_it_starts_is_refused(recorded, tmp_path):
    data = json.loads(recorded[0].read_text())
    data["events"][3]["end"] = data["events"][3]["start"] - 1.0
    damaged = tmp_path / "damaged.trace.json"
    damaged.write_text(json.dumps(data))
    with pytest.raises(TraceError, match="event 3 .* ends at .* before it starts"):
        load_trace(damaged)
