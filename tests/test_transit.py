"""Starvation is judged on the verifier's own stamps: a draft delayed on its way to the run queue (a worker
descheduled between stamping and sending, under a CPU overload) is not bypassed by what the verifier served
before it could see the draft."""

from __future__ import annotations

import time
from dataclasses import replace

from helpers import sim_config
from loopback_decode import LoopbackSocket

from specsched.runtime.backends.backend import get_backend
from specsched.runtime.core.events import VERIFIER, Event
from specsched.runtime.engine.osmetrics import measure
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier
from specsched.workers.draft_worker import DraftWorker

TRANSIT_S = 0.05


class SlowWire(LoopbackSocket):
    """The loopback socket, with every draft `TRANSIT_S` on its way before the verifier reads it."""

    def send_multipart(self, frames, copy=True) -> None:
        time.sleep(TRANSIT_S)
        super().send_multipart(frames, copy)


class KeptEvents:
    def __init__(self) -> None:
        self.rows: list[list] = []

    def send(self, *args, **kwargs) -> None:
        pass

    def events(self, rows: list[list]) -> None:
        self.rows += rows


def test_a_drafts_wait_in_the_run_queue_starts_at_the_verifiers_stamp_not_its_sending():
    config = sim_config().replace(mode="sd", workers=1, prompts=[], max_new_tokens=12, sim_draft_ms=0.0,
                                  sim_verify_ms=0.0)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), KeptEvents())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[0, 0, 0, [5, 7, 9]]]}, verifier.target))
    kept = KeptEvents()
    DraftWorker(backend.draft(), 0, SlowWire(verifier), kept).run_sequence(config, 0, 0, [5, 7, 9])
    waits = [e for e in map(Event.from_row, kept.rows) if e.kind == "queued"]
    assert waits and all(e.admitted is not None and e.admitted - e.start >= TRANSIT_S for e in waits)
    # the stamp survives the wire format and a record's JSON
    assert all(Event.from_row(e.to_row()) == e and "admitted" in e.to_json() for e in waits)


def test_a_draft_delayed_in_transit_under_fcfs_is_not_starved():
    # The repro: FCFS, 4 workers (bound 2 (4 - 1) = 6). Worker 3 sends its draft at 0 but the verifier
    # reads it only at 7.5 s; meanwhile workers 0-2 are served 7 times in turn, from 0.5 s. Counted from the
    # sending, its wait was bypassed 7 times (> 6: "STARVATION"); in the run queue, from 7.5 s, by nobody.
    events, t = [], 0.5
    for worker in [0, 1, 2, 0, 1, 2, 0]:
        events += [Event(10 + worker, "draft", worker, "queued", t, t, worker, admitted=t),
                   Event(10 + worker, "draft", worker, "verify", t, t + 1, worker),
                   Event(1, "verifier", VERIFIER, "verify", t, t + 1, worker)]
        t += 1
    events += [Event(13, "draft", 3, "queued", 0.0, t, 3, admitted=t),
               Event(13, "draft", 3, "verify", t, t + 1, 3), Event(1, "verifier", VERIFIER, "verify", t, t + 1, 3)]
    m = measure(events, {w: 4 for w in range(4)})
    assert not m.starved and m.max_bypassed == 0 and m.starvation_bound == 6
    assert m.max_wait_s == 7.5 and m.max_wait_worker == 3   # what the worker waited still counts as its wait
    # without the verifier's stamp (a record from before it was kept) the wait counts from the sending
    unstamped = [replace(e, admitted=None) for e in events]
    assert measure(unstamped, {w: 4 for w in range(4)}).max_bypassed == 7

