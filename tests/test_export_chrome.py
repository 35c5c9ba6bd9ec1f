"""`specsched export --chrome`: the Chrome Trace Event Format that Perfetto and chrome://tracing open.

Checked: the required fields, integer microsecond timestamps, one named track per process, spans
that nest properly on every track, and the run-queue depth as a counter track.
"""

from __future__ import annotations

import json
from collections import defaultdict
from contextlib import redirect_stdout
from io import StringIO

import pytest
from cli_runs import PLAIN_PROMPT

from specsched.runtime.apps.cli import main
from specsched.runtime.apps.commands.export import chrome_trace
from specsched.runtime.core.events import VERIFIER, Event


def ev(worker: int, kind: str, start: float, end: float) -> Event:
    role = "verifier" if worker == VERIFIER else "draft"
    return Event(100 + worker, role, worker, kind, 10.0 + start, 10.0 + end, max(worker, 0))


# two workers, one round each: worker 1's draft waits 1 s while worker 0's is verified
ROUND = [ev(-1, "idle", 0, 2), ev(-1, "verify", 2, 3), ev(-1, "verify", 3, 3.5), ev(-1, "resample", 3.5, 4),
         ev(0, "draft", 0, 2), ev(0, "verify", 2, 3), ev(1, "draft", 0, 2), ev(1, "queued", 2, 3),
         ev(1, "verify", 3, 4)]


def spans_nest(doc: dict) -> None:
    """Every two complete events on one track are disjoint or one contains the other."""
    tracks = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        open_ends: list[int] = []
        for a, b in sorted(spans, key=lambda s: (s[0], -s[1])):
            while open_ends and open_ends[-1] <= a:
                open_ends.pop()
            assert not open_ends or b <= open_ends[-1], f"[{a}, {b}) overlaps one ending at {open_ends[-1]}"
            open_ends.append(b)


def test_fixed_timeline():
    doc = json.loads(json.dumps(chrome_trace(ROUND, names={99: "verifier", 100: "draft worker 0"})))
    assert doc["displayTimeUnit"] == "ms"
    complete = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(ROUND)
    for e in complete:
        assert {"name", "cat", "ph", "ts", "dur", "pid", "tid"} <= e.keys()
        assert isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0
    # microseconds from the first event (t = 10 s)
    assert [(e["ts"], e["dur"]) for e in complete if e["pid"] == 101] == \
        [(0, 2_000_000), (2_000_000, 1_000_000), (3_000_000, 1_000_000)]
    meta = {(e["name"], e["pid"]): e["args"] for e in doc["traceEvents"] if e["ph"] == "M"}
    assert {pid: a["name"] for (name, pid), a in meta.items() if name == "process_name"} == \
        {99: "verifier", 100: "draft worker 0", 101: "draft worker 1"}
    assert {pid: a["sort_index"] for (name, pid), a in meta.items() if name == "process_sort_index"} == \
        {99: 0, 100: 1, 101: 2}
    counter = [(e["ts"], e["args"]["depth"]) for e in doc["traceEvents"] if e["ph"] == "C"]
    assert counter == [(0, 0), (2_000_000, 1), (3_000_000, 0)]
    assert all(e["pid"] == 99 and e["name"] == "run queue" for e in doc["traceEvents"] if e["ph"] == "C")
    spans_nest(doc)
    assert doc["otherData"]["clipped_events"] == 0


def test_a_partial_overlap_is_trimmed_so_spans_nest():
    events = [ev(0, "draft", 0, 2), ev(0, "queued", 1, 3), ev(0, "verify", 0.5, 1.5)]
    doc = chrome_trace(events)
    spans_nest(doc)
    spans = sorted((e["ts"], e["dur"], e["name"]) for e in doc["traceEvents"] if e["ph"] == "X")
    # verify lies inside draft and is kept; queued started inside draft but ended after it
    assert spans == [(0, 2_000_000, "draft"), (500_000, 1_000_000, "verify"),
                     (2_000_000, 1_000_000, "queued")]
    assert doc["otherData"]["clipped_events"] == 1


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    path = tmp_path_factory.mktemp("export") / "run.trace.json"
    with redirect_stdout(StringIO()):
        code = main(["run", "--prompt", PLAIN_PROMPT,
               "--workers", "3", "--max-new-tokens", "12", "--backend", "sim", "--sim-draft-ms", "1",
                     "--sim-verify-ms", "2", "--trace", str(path), "--quiet", "--no-live"])
    assert code == 0
    return path


def test_export_of_a_real_run(recorded, tmp_path):
    chrome, svg = tmp_path / "trace.json", tmp_path / "gantt.svg"
    with redirect_stdout(StringIO()):
        assert main(["export", str(recorded), "--chrome", str(chrome), "--svg", str(svg)]) == 0
    doc = json.loads(chrome.read_text())
    pids = json.loads(recorded.read_text())["trace"]["processes"]
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    workers = {pids[f"draft-{w}"]: f"draft worker {w}" for w in (0, 1, 2)}
    assert names == {pids["verifier"]: "verifier", **workers}
    spans_nest(doc)
    assert doc["otherData"]["clipped_events"] == 0
    depths = [e["args"]["depth"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert min(depths) == 0 and max(depths) >= 1 and depths[-1] == 0 and max(depths) <= 3
    text = svg.read_text()
    assert text.startswith("<svg") and "verifier" in text and "draft" in text
