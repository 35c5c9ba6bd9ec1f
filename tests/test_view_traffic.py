"""The live view of an engine's traffic (`specsched serve`): jobs coming and going on the rows of the pool's
draft processes, rendered on a capture console (fixed width, no colour).

The fixed traffic is small enough to check by hand, on a pool of three draft workers: job 0 (one sequence)
runs on pool worker 1 and drafts 0-2 s; job 1 (two sequences) arrives at 1 s on pool workers 2 and 0, in that
order, so its sequence 1 is drafted by pool worker 0. The verifier is idle until 2 s (a stretch both jobs'
records hold), then verifies job 0 (2-3 s), job 1's sequence 1 (3-4 s) and its sequence 0 (4-5 s).
"""

from __future__ import annotations

import os
import re
import threading

import httpx
from cli_runs import FAST_FLAGS, specsched
from serving import PROMPT, served
from test_view_gantt import render

from specsched.runtime.apps.view.dashboard import Dashboard
from specsched.runtime.apps.view.gantt import Gantt
from specsched.runtime.apps.view.traffic import Traffic, TrafficMonitor
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.events import VERIFIER, Event
from specsched.runtime.engine.collected import Collected

CONFIG = RunConfig(backend="sim", max_new_tokens=8)


def ev(worker: int, kind: str, start: float, end: float, seq: int = -1, job: int = -1) -> Event:
    role = "verifier" if worker == VERIFIER else "draft"
    return Event(100 if worker == VERIFIER else 200 + worker, role, worker, kind, float(start), float(end),
                 worker if seq < 0 and worker >= 0 else seq, job)


class FakeJob:
    """What the view reads of a job: its own record so far, its pool workers, whether it has ended."""

    def __init__(self, workers: list[int], events: list[Event], commits: list, ended: bool = True) -> None:
        self.workers, self.ended = workers, ended
        self.collected = Collected(events=events, commits=commits, counters={"drafted": 8, "accepted": 4})

    def done(self) -> bool:
        return self.ended


class FakeEngine:
    def __init__(self, states: dict[str, tuple[str, int | None]]) -> None:
        self.processes = [{"name": n, "pid": 10 + i, "role": "verifier" if n == "verifier" else "draft",
                           "state": state, "job": job} for i, (n, (state, job)) in enumerate(states.items())]


def fixed_traffic(second_running: bool = False) -> tuple[Traffic, TrafficMonitor]:
    # each job's events in its own ids: job 1's worker 0 is pool worker 2, its worker 1 pool worker 0
    first = FakeJob([1], [ev(VERIFIER, "idle", 0, 2), ev(0, "draft", 0, 2, 0), ev(0, "verify", 2, 3, 0),
                          ev(VERIFIER, "verify", 2, 3, 0, job=0)], [(3.0, 0, 4)])
    second = FakeJob([2, 0], [ev(VERIFIER, "idle", 1, 2), ev(1, "draft", 1, 2, 1), ev(1, "queued", 2, 3, 1),
                              ev(1, "verify", 3, 4, 1), ev(0, "draft", 1, 3, 0), ev(0, "queued", 3, 4, 0),
                              ev(0, "verify", 4, 5, 0), ev(VERIFIER, "verify", 3, 4, 1, job=1),
                              ev(VERIFIER, "verify", 4, 5, 0, job=1)], [(4.0, 1, 3), (5.0, 0, 2)],
                     ended=not second_running)
    busy = ("drafting", 1) if second_running else ("parked", None)
    engine = FakeEngine({"verifier": ("ready", None), "draft-0": busy, "draft-1": ("parked", None),
                         "draft-2": busy})
    traffic = Traffic(engine)
    traffic.collected.started = 0.0
    monitor = TrafficMonitor(traffic, CONFIG)
    one_prompt, two = (RunConfig(backend="sim", max_new_tokens=8, workers=n) for n in (1, 2))
    traffic.watch(first, one_prompt)
    traffic.watch(second, two)
    monitor.feed(traffic.look(now=5.0))
    return traffic, monitor


def test_jobs_come_and_go_on_the_rows_of_the_pools_draft_processes():
    traffic, monitor = fixed_traffic()
    snapshot = monitor.snapshot(traffic.collected, 5.0, columns=10, final=True)
    # 29 columns: 9 for the labels, 20 cells of 0.25 s; the verifier names each draft by its pool worker,
    # and ▸ marks where a job begins on a row
    assert render(Gantt(snapshot, legend=False), 29) == (
        "verifier ········111100002222\n"
        "draft 0  ····▸▒▒▒░░░░████····\n"
        "draft 1  ▸▒▒▒▒▒▒▒████········\n"
        "draft 2  ····▸▒▒▒▒▒▒▒░░░░████\n"
        "queue    00000000111111110000\n"
        "         0.00 s        5.00 s\n"
    )
    assert snapshot.tokens_by_worker == {0: 3, 1: 4, 2: 2} and snapshot.tokens == 9
    assert (snapshot.done, snapshot.sequences, snapshot.tokens_max) == (3, 3, 24)
    assert snapshot.alpha == 0.5 and snapshot.alpha_exact  # the ended jobs' own counters
    assert snapshot.mark_kinds == ("job",)


def test_the_title_counts_the_jobs_and_a_drafting_worker_says_for_which():
    traffic, monitor = fixed_traffic(second_running=True)
    text = render(Dashboard(monitor.snapshot(traffic.collected, 5.0, columns=10)), 100).splitlines()
    assert text[0].startswith("specsched · serve · 2 jobs, 1 running · seed · policy fcfs · backend sim · running")
    processes = text[text.index(next(line for line in text if line.startswith("process"))) + 1:]
    assert [line.split()[:5] for line in processes if line.startswith("draft")] == [
        ["draft", "0", "job", "1", "3"], ["draft", "1", "parked", "4", "0.000"], ["draft", "2", "job", "1", "2"]]
    assert "tokens 9/24 · 1.8 tok/s · α 0.500 · sequences done 1/3" in text


def test_a_server_that_runs_for_hours_keeps_only_what_a_window_can_show():
    engine = FakeEngine({"verifier": ("ready", None), "draft-0": ("parked", None)})
    traffic = Traffic(engine)
    traffic.collected.started = 0.0
    monitor = TrafficMonitor(traffic, CONFIG)
    for hour_part in range(600):  # a job every 6 s for an hour, each a draft and a verification
        t = 6.0 * hour_part
        job = FakeJob([0], [ev(0, "draft", t, t + 1, 0), ev(0, "verify", t + 1, t + 2, 0),
                            ev(VERIFIER, "verify", t + 1, t + 2, 0, job=hour_part)], [(t + 2, 0, 3)])
        traffic.watch(job, CONFIG)
        monitor.feed(traffic.look(now=t + 3))
        monitor.snapshot(traffic.collected, t + 3)
    held = sum(len(row.events) for row in monitor.timeline.rows(-1e9, 1e9, {}))
    assert held <= 3 * 11  # about a minute of it (the widest window), not the hour's 1,800 events
    assert monitor.timeline.verifications == 600 and monitor.tokens == 1800  # the totals keep everything
    assert traffic.running == 0 and len(traffic.collected.marks) <= 2 * 20


def test_a_served_requests_traffic_is_shown_on_its_workers_rows():
    with served(prestart=2) as s:
        traffic = Traffic(s.engine)
        s.app.on_job = traffic.watch
        monitor = TrafficMonitor(traffic, s.app.jobs.defaults)
        answers = []

        def ask(n: int) -> None:
            answers.append(httpx.post(s.url + "/v1/completions", json={"model": "sim", "prompt": PROMPT, "n": n,
                                                                       "max_tokens": 8}, timeout=120).json())

        clients = [threading.Thread(target=ask, args=(n,)) for n in (1, 2)]
        for c in clients:
            c.start()
        while any(c.is_alive() for c in clients):
            monitor.feed(traffic.look())
            clients[0].join(0.05)
        for c in clients:
            c.join()
        monitor.feed(traffic.look())
        snapshot = monitor.snapshot(traffic.collected, 0.0, final=True)
        pool = {int(p["name"].removeprefix("draft-")) for p in s.engine.processes if p["role"] == "draft"}
    # the rows are the pool's draft processes (two started before any request, a third if both overlapped),
    # credited with the tokens the requests were sent; each of the three sequences began on a row of its own
    assert sorted(a["usage"]["completion_tokens"] for a in answers) == [8, 16]
    assert [r.label for r in snapshot.rows] == ["verifier", *(f"draft {w}" for w in sorted(pool))]
    assert snapshot.tokens == 24 and sum(snapshot.tokens_by_worker.values()) == 24
    assert set(snapshot.tokens_by_worker) == pool
    assert snapshot.title.startswith("serve · 2 jobs, 0 running")
    assert sum(m[2] == "job" for m in traffic.collected.marks) == 3


def test_a_workload_on_a_terminal_shows_its_jobs_coming_and_going_and_ends_on_the_whole_run():
    # TTY_INTERACTIVE=1: Rich treats the pipe as a terminal that redraws in place (what a user's terminal is)
    out = specsched("run", "--arrivals", "poisson:8", "--jobs", "3", "--prompt", "kaka lomi", *FAST_FLAGS,
                    "--max-new-tokens", "8", env={**os.environ, "TTY_INTERACTIVE": "1"})
    assert out.returncode == 0, out.stderr
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.stdout)
    last = shown[shown.rindex("specsched · workload"):]
    assert last.startswith("specsched · workload · 3 jobs, 0 running · seed · policy fcfs · backend sim · finished")
    rows = {line[:9].strip(): line[9:] for line in last.splitlines() if re.match(r"(verifier|draft \d+) +[▒░█·▸0-9]+$",
                                                                                      line.rstrip())}
    assert sum(row.count("▸") for name, row in rows.items() if name != "verifier") == 3  # each job's start, kept
    assert "sequences done 3/3" in last and "job 2" in shown.split("jobs · policy fcfs")[-1]  # then the table
