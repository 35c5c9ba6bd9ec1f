"""The Gantt chart and the live dashboard, rendered on a capture console: fixed width, no colour.

The timeline is small enough to check by hand: two workers, two rounds each; drafting takes 2 s,
a verification 1 s. Worker 1's first draft waits 1 s behind worker 0's, and the verifier is idle
while both draft (0-2 s) and once more while worker 1 drafts its second round (4-5 s).
"""

from __future__ import annotations

import io

from rich.console import Console
from rich.style import Style

from specsched.runtime.apps.view.dashboard import Dashboard
from specsched.runtime.apps.view.gantt import GLYPHS, STYLES, Gantt
from specsched.runtime.apps.view.monitor import Monitor
from specsched.runtime.apps.view.usage import Usage
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.events import VERIFIER, Event
from specsched.runtime.engine.collected import Collected


def ev(worker: int, kind: str, start: float, end: float, seq: int | None = None) -> Event:
    role = "verifier" if worker == VERIFIER else "draft"
    return Event(100 + worker, role, worker, kind, float(start), float(end), worker if seq is None else seq)


TWO_ROUNDS = [
    ev(-1, "idle", 0, 2), ev(-1, "verify", 2, 3, 0), ev(-1, "verify", 3, 4, 1), ev(-1, "idle", 4, 5),
    ev(-1, "verify", 5, 6, 0), ev(-1, "verify", 6, 7, 1),
    ev(0, "draft", 0, 2), ev(0, "verify", 2, 3), ev(0, "draft", 3, 5), ev(0, "verify", 5, 6),
    ev(1, "draft", 0, 2), ev(1, "queued", 2, 3), ev(1, "verify", 3, 4), ev(1, "draft", 4, 6),
    ev(1, "verify", 6, 7),
]
CONFIG = RunConfig(backend="sim", workers=2, max_new_tokens=8)


def finished_run() -> Collected:
    return Collected(events=list(TWO_ROUNDS), done={0, 1}, started=-1.0, tokens={0: [5] * 8, 1: [5] * 8},
                     counters={"drafted": 16, "accepted": 12}, commits=[(3.0, 0, 4), (4.0, 1, 4)])


def render(renderable, width: int) -> str:
    out = io.StringIO()
    Console(width=width, file=out, color_system=None, legacy_windows=False).print(renderable)
    return out.getvalue()


def test_final_gantt_of_a_fixed_timeline():
    collected = finished_run()
    monitor = Monitor(CONFIG)
    monitor.feed(collected)
    # 37 columns: 9 for the labels, 28 cells of 0.25 s over the 7 s run
    text = render(Gantt(monitor.snapshot(collected, 7.0, final=True)), 37)
    assert text == (
        "verifier ········00001111····00001111\n"
        "draft 0  ▒▒▒▒▒▒▒▒████▒▒▒▒▒▒▒▒████····\n"
        "draft 1  ▒▒▒▒▒▒▒▒░░░░████▒▒▒▒▒▒▒▒████\n"
        "queue    0000000011110000000000000000\n"
        "         0.00 s     3.50 s     7.00 s\n"
        "▒ draft  ░ queued  █ verify  × \n"
        "resample  · idle  0 verifying worker \n"
        "0's draft  2 drafts in the run queue\n"
    )


def test_live_gantt_leaves_what_is_not_reported_yet_blank():
    # at t = 4.5 worker 1 has reported only its first draft and wait (it sends them with the verdict)
    collected = Collected(events=[e for e in TWO_ROUNDS if e.end <= 3 or (e.worker != 1 and e.end <= 4.5)],
                          started=-1.0)
    monitor = Monitor(CONFIG)
    monitor.feed(collected)
    snapshot = monitor.snapshot(collected, 4.5, columns=28)
    # the window fits ~2 cells per verification (1 s): 28 cells of 0.5 s, filled from the left
    assert (snapshot.start, snapshot.end) == (0.0, 14.0)
    assert render(Gantt(snapshot, legend=False), 37) == (
        "verifier ····0011                    \n"
        "draft 0  ▒▒▒▒██                      \n"
        "draft 1  ▒▒▒▒░░                      \n"
        "queue    000011                      \n"
        "         0.00 s     7.00 s    14.00 s\n"
    )


def test_dashboard_frame():
    class FixedUsage:
        def sample(self, processes, now=None):
            return (Usage("verifier", 11, 97.0, 300 * 2**20), Usage("draft-0", 12, 12.0, 80 * 2**20),
                    Usage("draft-1", 13, 14.0, 81 * 2**20), Usage("supervisor", 10, 1.0, 60 * 2**20))

    collected = finished_run()
    collected.states = {"verifier": "ready", "draft-0": "parked", "draft-1": "drafting"}  # the engine's table
    monitor = Monitor(CONFIG, FixedUsage())
    monitor.feed(collected)
    text = render(Dashboard(monitor.snapshot(collected, 7.0, final=True)), 72)
    assert text.splitlines()[0] == "specsched · seed · policy fcfs · backend sim · finished · elapsed 8.0 s"
    assert text.splitlines()[-7:] == [
        "tokens 16/16 · 2.3 tok/s · α 0.750 · sequences done 2/2",
        "verifier busy 57.1 % · 4 verifications · run queue mean 0.14",
        "process          pid     state  tokens   waiting   CPU %       RSS",
        "verifier          11     ready      16                97   300 MiB",
        "draft 0           12    parked       8   0.000 s      12    80 MiB",
        "draft 1           13  drafting       8   1.000 s      14    81 MiB",
        "supervisor        10                                   1    60 MiB",
    ]


def test_every_state_keeps_its_own_colour():
    collected = finished_run()
    monitor = Monitor(CONFIG)
    monitor.feed(collected)
    console = Console(width=37, file=io.StringIO(), color_system="truecolor", force_terminal=True)
    segments = list(console.render(Gantt(monitor.snapshot(collected, 7.0, final=True), legend=False)))
    styles = {state: Style.parse(STYLES[state]) for state in ("draft", "queued", "verify", "idle")}
    seen = set()
    for seg in segments:
        for state, style in styles.items():
            if seg.text and set(seg.text) == {GLYPHS[state]}:
                assert seg.style == style, (state, seg)
                seen.add(state)
    assert seen == {"draft", "queued", "verify", "idle"}
    assert len(set(STYLES.values())) == len(STYLES)   # no two states share a colour


def test_many_workers_are_cut_to_fit():
    events = [ev(w, "draft", 0, 1) for w in range(20)] + [ev(-1, "idle", 0, 1)]
    config = RunConfig(backend="sim", workers=20)
    collected = Collected(events=events, started=0.0)
    monitor = Monitor(config)
    monitor.feed(collected)
    snapshot = monitor.snapshot(collected, 1.0, final=True)
    lines = render(Gantt(snapshot, legend=False, max_rows=5), 40).splitlines()
    assert [ln.split()[0] + (" " + ln.split()[1] if ln.startswith("draft") else "") for ln in lines[:5]] == \
        ["verifier", "draft 0", "draft 1", "draft 2", "draft 3"]
    assert lines[5].strip() == "… 16 more draft workers"
    assert lines[6].startswith("queue")
