"""Beam modes through the real runtime (verifier and beam-worker processes, ZeroMQ): `--mode beam` is beam
search at temperature 0, `--mode dsbd` gives exactly the beams of beam search too, and sampled dsbd gives
exactly the beams of the in-process loop whose law tests/test_beams_decode.py checks (same streams)."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from cli_runs import run_cli, stderr_lines
from helpers import draft_model, greedy_reference, run_ok, sim_config, target_model, words
from rich.console import Console

from specsched.runtime.apps.commands.export import chrome_trace
from specsched.runtime.apps.run.trace import marks_of
from specsched.runtime.apps.view.gantt import Gantt
from specsched.runtime.apps.view.monitor import Monitor
from specsched.runtime.backends.sim import EOS
from specsched.runtime.core.sampling import SamplingParams
from specsched.scheduler.beam_decode import beam_decode, dsbd_decode
from specsched.scheduler.beam_jobs import width_rule

VOCAB = 16
PROMPTS = [(5, 7), (3, 9, 2)]
WIDTH, STEPS = 3, 8


def run_beams(mode: str, **kw):
    return run_ok(sim_config(**{"mode": mode, "prompts": [words(VOCAB, p) for p in PROMPTS], "sim_vocab": VOCAB,
                                "beams": WIDTH, "max_new_tokens": STEPS, **kw}))


def best(tokens: list[list[int]], logprobs) -> list[int]:
    """The most likely beam, cut after its end of sequence (what the record's text is)."""
    return cut(tokens[int(np.argmax(logprobs))])


def cut(tokens: list[int]) -> list[int]:
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens


def check(record, reference) -> None:
    """Every beam (as the record gives it: cut after an end of sequence), its log-probability, the text."""
    for i, want in enumerate(reference):
        got = record.collected.beams[str(i)]
        assert got["tokens"] == [cut(b) for b in want.tokens]
        assert np.allclose(got["logprobs"], want.logprobs)
        assert record.sequences[i].tokens == best(want.tokens, want.logprobs)


def test_beam_mode_is_beam_search():
    record = run_beams("beam")
    check(record, [beam_decode(target_model(VOCAB), list(p), SamplingParams(0.0), WIDTH, STEPS) for p in PROMPTS])


@pytest.mark.parametrize("agreement", [0.9, 0.3])
def test_greedy_dsbd_in_processes_is_beam_search(agreement):
    record = run_beams("dsbd", sim_agreement=agreement, gamma=3)
    check(record, [beam_decode(target_model(VOCAB), list(p), SamplingParams(0.0), WIDTH, STEPS) for p in PROMPTS])
    assert record.metrics.accepted > 0  # the draft's layers were used, not only the target's steps
    # a fixed width: one worker per beam, from the first step to the last
    assert {w: kinds for w, kinds in marks_by_worker(record).items()} == {w: ["fork", "exit"] for w in range(6)}


def test_sampled_dsbd_in_processes_gives_the_in_process_loops_beams():
    params = SamplingParams(1.0)
    record = run_beams("dsbd", temperature=1.0, seed=11, gamma=2, draft_beams=4, sim_agreement=0.7)
    reference = [dsbd_decode(target_model(VOCAB), draft_model(VOCAB, 0.7), list(p), params, WIDTH, beams=4,
                             gamma=2, steps=STEPS, seed=11, sequence=i)
                 for i, p in enumerate(PROMPTS)]
    check(record, reference)


def test_a_dynamic_width_in_processes_gives_the_in_process_loops_beams():
    params = SamplingParams(1.0)
    record = run_beams("dsbd", temperature=1.0, seed=5, gamma=2, draft_beams=4, sim_agreement=0.8,
                       beam_threshold=0.5, min_beams=1)
    width = width_rule(record.config)
    reference = [dsbd_decode(target_model(VOCAB), draft_model(VOCAB, 0.8), list(p), params, width, beams=4,
                             gamma=2, steps=STEPS, seed=5, sequence=i)
                 for i, p in enumerate(PROMPTS)]
    check(record, reference)


def marks_by_worker(record) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for _, worker, kind in sorted(record.collected.marks):
        out.setdefault(worker, []).append(kind)
    return out


def test_beam_workers_exit_their_slots_when_the_width_narrows_and_fork_into_them_when_it_widens(tmp_path):
    record = run_beams("dsbd", temperature=1.0, seed=1, gamma=2, draft_beams=4, sim_agreement=0.8,
                       beam_threshold=0.5, min_beams=1, max_new_tokens=40)
    assert record.status == "ok" and all(len(s.tokens) == 40 for s in record.sequences)
    marks = marks_by_worker(record)
    assert sorted(marks) == list(range(len(PROMPTS) * WIDTH))  # the job's pool: one worker per beam
    for kinds in marks.values():  # each worker: fork, exit, fork, exit, ... - never in two slots at once
        assert kinds == ["fork", "exit"] * (len(kinds) // 2)
    assert any(len(kinds) > 2 for kinds in marks.values())  # the width changed: some worker came back
    snapshot_text = gantt_text(record)
    assert "+" in snapshot_text and "†" in snapshot_text and "forks into a beam slot" in snapshot_text
    trace = chrome_trace(record.collected.events, marks=record.collected.marks)
    assert sum(e["ph"] == "i" for e in trace["traceEvents"]) == len(record.collected.marks)
    path = tmp_path / "run.json"
    record.write_json(path)
    assert marks_of(json.loads(path.read_text())) == record.collected.marks


def gantt_text(record) -> str:
    monitor = Monitor(record.config)
    monitor.feed(record.collected)
    snapshot = monitor.snapshot(record.collected, max(e.end for e in record.collected.events), final=True)
    console = Console(width=140, file=io.StringIO(), color_system=None)
    console.print(Gantt(snapshot))
    return console.file.getvalue()


@pytest.mark.parametrize("args, message", [
    (["--beams", "0"], "--beams must be in 1..64"),
    (["--gamma", "0"], "--gamma must be in 1..16"),
    (["--min-beams", "9"], "--min-beams must be in 1..--beams"),
    (["--beam-threshold", "1.5", "--temperature", "1"], "--beam-threshold must be in [0, 1]"),
    (["--beam-threshold", "0.5"], "needs sampling"),
    (["--lockstep"], "--lockstep, --tree and --k-config do not apply"),
])
def test_bad_beam_flags_are_one_line_and_exit_2(args, message):
    out = run_cli("--mode", "dsbd", *args)
    assert out.returncode == 2
    (line,) = stderr_lines(out.stderr)
    assert line.startswith("specsched: error: ") and message in line


def test_beam_input_best_grows_every_step_from_the_most_likely_beam_only():
    # greedy with one input beam: each step's best cell extends the best beam - that is greedy decoding
    record = run_beams("beam", beam_input="best")
    for i, p in enumerate(PROMPTS):
        assert record.sequences[i].tokens == greedy_reference(p, VOCAB, STEPS)
    # dsbd keeps only the best beam between rounds (a round spans 1..gamma + 1 steps), as §3.4 does per
    # iteration: not the same as pruning every step, and not beam search either
    dsbd = run_beams("dsbd", beam_input="best")
    assert len(dsbd.collected.processes) == 1 + len(PROMPTS)  # one input beam: one worker per sequence
    assert all(len(b) == 1 or len(b) == WIDTH for b in [dsbd.collected.beams[str(i)]["tokens"] for i in (0, 1)])
    assert all(s.finished and 0 < len(s.tokens) <= STEPS for s in dsbd.sequences)

