"""Branch lanes at work: one forward reads lanes and candidates as separate forwards would, the cache keeps
no lane token, and lanes as processes (--branch-processes) compute what lanes in the worker compute."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from fp32 import assert_close

from specsched.runtime.core.sampling import SamplingParams, stream
from specsched.scheduler.layout import lane_predictions, lay_out, settle
from specsched.workers.branch_cache import candidate_tree
from specsched.workers.branch_lanes import Lanes
from tests.tiny_hf import make_pair

SHAPE = dict(layers=2, width=128)  # the tiny models' longest reduction: see tests/fp32.py


# -- one forward: lanes and candidates ------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    from specsched.runtime.backends.hf_model import HFModel

    return HFModel(str(make_pair(tmp_path_factory.mktemp("tiny"))[0]), "fp32")


def test_lanes_and_candidates_in_one_forward_read_as_separate_forwards(tiny_target):
    """The block-diagonal mask: each lane sees the context and its own earlier tokens only, the candidate
    tree its ancestors only; so every row equals the row of a forward of that lane (or tree) alone."""
    model, context = tiny_target, [2, 3, 4, 5, 6, 7]
    cand_tokens, cand_parents = candidate_tree([(8, 9, 10), (8, 11), (12, 13)], depth=4)
    lanes = Lanes(context, n=2, length=6)
    lane_tokens, lane_parents = lanes.nodes(len(cand_tokens))
    tokens = np.asarray(cand_tokens + lane_tokens, np.int32)
    parents = np.asarray(cand_parents + lane_parents, np.int32)
    cache = model.new_cache()
    layout = lay_out(model, cache, context, tokens, parents)
    rows = model.forward(cache, layout.tokens, layout.parents)[layout.unread:]

    def alone(seq: list[int]) -> np.ndarray:  # a plain forward of context + seq: its last |seq| rows
        return model.forward(model.new_cache(), context + seq)[len(context):]

    for node in range(len(tokens)):
        path, j = [], node
        while j >= 0:
            path.append(int(tokens[j]))
            j = int(parents[j])
        assert_close(rows[node], alone(path[::-1])[-1], **SHAPE)
    predictions = lane_predictions(layout, model.forward(model.new_cache(), layout.tokens, layout.parents,
                                                         first_row=layout.first_row), len(tokens), len(lane_tokens))
    assert predictions.tolist() == [int(rows[len(cand_tokens) + j].argmax()) for j in range(len(lane_tokens))]


def test_after_a_verdict_the_cache_keeps_the_accepted_candidates_and_no_lane_token(tiny_target):
    model, context = tiny_target, [2, 3, 4, 5, 6, 7]
    first = int(model.forward(model.new_cache(), context)[-1].argmax())
    second = int(model.forward(model.new_cache(), context + [first])[-1].argmax())
    cand_tokens, cand_parents = candidate_tree([(9, 9), (first, second, 9)], depth=3)  # the target's own chain
    lane_tokens, lane_parents = Lanes(context, n=2, length=6).nodes(len(cand_tokens))
    tokens = np.asarray(cand_tokens + lane_tokens, np.int32)
    parents = np.asarray(cand_parents + lane_parents, np.int32)
    cache = model.new_cache()
    layout = lay_out(model, cache, context, tokens, parents)
    rows = model.forward(cache, layout.tokens, layout.parents, first_row=layout.first_row)
    outcome = settle(model, cache, layout, rows, tokens, parents, None, SamplingParams(), stream(0, 0, "verify"),
                     lanes=len(lane_tokens))
    assert outcome.tokens[:2] == [first, second] and outcome.accepted >= 2
    assert len(cache) == layout.base + outcome.accepted  # the accepted candidates only: no lane token is kept


# -- lanes as processes (--branch-processes) ------------------------------------------------------------
def _alive(procs: list) -> list:
    return [p for p in procs if p.is_running() and p.status() != "zombie"]


def test_lane_processes_compute_what_lanes_in_the_worker_compute_and_leave_nothing_behind():
    from specsched.workers.lane_process import LaneProcesses

    prompt = list(range(100, 140))
    apart, together = LaneProcesses(prompt, 3, 6), Lanes(prompt, 3, 6)
    try:
        assert len(apart.procs) == 3 and apart.nodes(2) == together.nodes(2)
        rng = np.random.default_rng(0)
        for _ in range(10):
            predictions = rng.integers(0, 50, together.size).tolist()
            assert apart.update(predictions) == together.update(predictions)
            assert apart.windows == together.windows
    finally:
        apart.close()
    assert all(p.poll() is not None for p in apart.procs)
    short = LaneProcesses([7, 8], 2, 6)  # windows too short for a 4-gram: no entries, yet the lanes move on
    try:
        assert short.windows == [[7, 8], [7]]
        assert short.update([1, 2, 3]) == [] and short.windows == [[7, 8, 2], [7, 3]]
    finally:
        short.close()


def _worker_with_two_lanes() -> subprocess.Popen:
    """A process standing for a draft worker: it starts two lane processes, then sleeps (killed by the test)."""
    worker = subprocess.Popen([sys.executable, "-c", "from specsched.workers.lane_process import LaneProcesses\n"
                               "import time\nLaneProcesses(list(range(40)), 2, 6)\nprint('up', flush=True)\n"
                               "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "up"
    return worker


def test_lane_processes_die_with_their_worker():
    worker = _worker_with_two_lanes()
    lanes = psutil.Process(worker.pid).children()
    assert len(lanes) == 2
    worker.kill()  # SIGKILL: no clean-up code runs in the worker
    worker.wait()
    deadline = time.monotonic() + 10
    while _alive(lanes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(lanes)


def test_the_live_view_gives_each_lane_process_a_line_under_its_worker():
    from rendering import render_text

    from specsched.runtime.apps.view.dashboard import Dashboard
    from specsched.runtime.apps.view.monitor import Monitor
    from specsched.runtime.apps.view.usage import UsageSampler, lane_processes
    from specsched.runtime.core.config import RunConfig
    from specsched.runtime.engine.collected import Collected

    worker = _worker_with_two_lanes()
    try:
        deadline = time.monotonic() + 30
        while len(lane_processes({"draft-0": worker.pid})) < 2:  # each names itself once it has started
            assert time.monotonic() < deadline
            time.sleep(0.05)
        pids = {p.pid for p in psutil.Process(worker.pid).children()}
        lanes = lane_processes({"draft-0": worker.pid, "verifier": os.getpid()})
        assert sorted(lanes) == ["draft-0 lane 0", "draft-0 lane 1"] and set(lanes.values()) == pids
        usage = UsageSampler(lanes=True).sample({"draft-0": worker.pid})
        assert {u.name for u in usage} == {"supervisor", "draft-0", "draft-0 lane 0", "draft-0 lane 1"}
        assert {u.name for u in UsageSampler().sample({"draft-0": worker.pid})} == {"supervisor", "draft-0"}
        snap = Monitor(RunConfig(backend="sim", prompts=["x"], workers=1)).snapshot(Collected(), 0.0)
        lines = render_text(Dashboard(dataclasses.replace(snap, usage=usage))).splitlines()
        table = next(i for i, line in enumerate(lines) if line.startswith("process"))  # below the Gantt chart
        at = next(i for i, line in enumerate(lines) if i > table and line.startswith("draft 0"))
        assert [line.split()[:3] for line in lines[at + 1:at + 3]] == [
            ["└", "lane", "0"], ["└", "lane", "1"]]
        assert {int(line.split()[3]) for line in lines[at + 1:at + 3]} == pids
    finally:
        worker.kill()
        worker.wait()
