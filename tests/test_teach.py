"""`specsched teach`: exercises are reproducible, and --solve's answers are the hand-worked ones."""

from __future__ import annotations

import json
import re

import pytest
from cli_runs import FAST_FLAGS, run_cli, specsched


def answer(*args: str) -> tuple[str, dict[str, tuple[int, int]]]:
    out = specsched("teach", *args, "--solve")
    assert out.returncode == 0, out.stderr
    order = re.search(r"served in the order ([A-Z ]+);", out.stdout).group(1).split()
    rows = re.findall(r"│\s+([A-Z])\s+│\s+(\d+) ms\s+│\s+(\d+) ms\s+│", out.stdout)
    return " ".join(order), {job: (int(resp), int(turn)) for job, resp, turn in rows}


def test_the_convoy_exercise_matches_the_hand_worked_schedules():
    # A (arrives 0, 6 rounds, drafts 1 ms) B (3 ms, 1 round, drafts 8 ms) C (5 ms, 1 round, 8 ms); a
    # verification takes 10 ms. FCFS: A 1-11, B 11-21, then A (queued at 12) before C (queued at 13):
    # A 21-31, C 31-41, A 41-51, 52-62, 63-73, 74-84.
    order, jobs = answer("--exercise", "convoy")
    assert order == "A B A C A A A A"
    assert jobs == {"A": (0, 84), "B": (0, 18), "C": (18, 36)}
    # SJF: at 21 C (4 tokens in all) goes before A (24): C 21-31, then A 31-41, 42-52, ..., 75-85
    order, jobs = answer("--exercise", "convoy", "--policy", "sjf")
    assert order == "A B C A A A A A"
    assert jobs == {"A": (0, 85), "B": (0, 18), "C": (8, 26)}


def test_the_arrivals_exercise_matches_the_hand_worked_schedules():
    # A (0 ms, 4 rounds of 4 tokens, drafts 1 ms), B (25 ms, 2 rounds), C (26 ms, 1 round); 10 ms a verification.
    # A: 1-11, 12-22, 23-33; B queued at 26, C at 27, A's last draft at 34. FCFS: B 33-43, C 43-53, A 53-63,
    # B 63-73. SJF (whole size 4 < 8 < 16): C 33-43, B 43-53, A 53-63, B 63-73. SRTF (left: C 4, then A 4 < B 8):
    # C 33-43, A 43-53, B 53-63 and 64-74 - the long job, nearly done, overtakes the fresh one
    order, jobs = answer("--exercise", "arrivals")
    assert order == "A A A B C A B" and jobs == {"A": (0, 63), "B": (7, 48), "C": (16, 27)}
    order, jobs = answer("--exercise", "arrivals", "--policy", "sjf")
    assert order == "A A A C B A B" and jobs == {"A": (0, 63), "B": (17, 48), "C": (6, 17)}
    order, jobs = answer("--exercise", "arrivals", "--policy", "srtf")
    assert order == "A A A C A B B" and jobs == {"A": (0, 53), "B": (27, 49), "C": (6, 17)}


def test_jobs_arriving_as_a_poisson_process_are_seeded():
    first = specsched("teach", "--seed", "2", "--jobs", "4", "--arrivals", "poisson:50")
    again = specsched("teach", "--seed", "2", "--jobs", "4", "--arrivals", "poisson:50")
    assert first.returncode == 0 and first.stdout == again.stdout
    arrivals = [int(a) for a in re.findall(r"│\s+[A-Z]\s+│\s+(\d+) ms", first.stdout)]
    assert len(arrivals) == 4 and arrivals[0] == 0 and arrivals == sorted(arrivals)
    # a slower process spreads the same draws wider
    slower = specsched("teach", "--seed", "2", "--jobs", "4", "--arrivals", "poisson:5")
    assert [int(a) for a in re.findall(r"│\s+[A-Z]\s+│\s+(\d+) ms", slower.stdout)][-1] > arrivals[-1]


def test_a_seeded_exercise_is_the_same_every_time_and_seeds_differ():
    first = specsched("teach", "--seed", "7", "--jobs", "4", "--policy", "mlfq")
    again = specsched("teach", "--seed", "7", "--jobs", "4", "--policy", "mlfq")
    other = specsched("teach", "--seed", "8", "--jobs", "4", "--policy", "mlfq")
    assert first.returncode == 0 and first.stdout == again.stdout and first.stdout != other.stdout
    assert "--solve" in first.stdout and "Answer" not in first.stdout  # the question only


@pytest.mark.parametrize("args, message", [
    (["--jobs", "9"], "--jobs must be in 2..8"),
    (["--policy", "nosuch"], "unknown policy 'nosuch'"),
    (["--seed", "-1"], "--seed must be >= 0"),
    (["--exercise", "convoy", "--jobs", "4"], "--jobs draws a random exercise; --exercise convoy is a fixed one"),
    (["--exercise", "convoy", "--seed", "3"], "--seed draws a random exercise"),
    (["--exercise", "convoy", "--arrivals", "poisson:5"], "--arrivals draws a random exercise"),
    (["--arrivals", "uniform:5"], "give poisson:RATE with RATE > 0"),
    (["--trace", "nosuch.json", "--seed", "1"], "--seed makes an exercise; --trace makes one of a recorded run"),
])
def test_bad_input_gets_one_line(args, message):
    out = specsched("teach", *args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_predict_then_reveal_from_a_recorded_run(tmp_path):
    trace = tmp_path / "fcfs.trace"
    assert run_cli("--prompt", "a b", "--prompt", "c d", "--prompt", "e f", *FAST_FLAGS, "--max-new-tokens", "16",
                   "--quiet", "--no-live", "--trace", str(trace)).returncode == 0
    question = specsched("teach", "--trace", str(trace), "--policy", "srtf")
    assert question.returncode == 0, question.stderr
    # the run's jobs and what its own policy did with them, then the question about srtf: no answer yet
    recorded = re.search(r"Under fcfs, as recorded: served in the order ([A-Z ]+);", question.stdout).group(1).split()
    assert set(recorded) == {"A", "B", "C"} and "Question" in question.stdout and "Answer" not in question.stdout
    verifications = sum(1 for e in json.loads(trace.read_text())["events"]
                        if e["role"] == "draft" and e["kind"] == "verify")
    assert len(recorded) == verifications
    solved = specsched("teach", "--trace", str(trace), "--policy", "srtf", "--solve")
    predicted = re.search(r"Answer \(whatif's prediction from this trace, srtf\): served in the order ([A-Z ]+);",
                          solved.stdout).group(1).split()
    assert sorted(predicted) == sorted(recorded)  # every round of every job, in srtf's order
    refused = specsched("teach", "--trace", str(trace))
    assert refused.returncode == 2 and "name the policy to ask about: --policy P" in refused.stderr


def test_a_batch_cost_prices_the_answers_batches(tmp_path):
    trace = tmp_path / "fcfs.trace"
    assert run_cli("--prompt", "a b", "--prompt", "c d", "--prompt", "e f", *FAST_FLAGS, "--max-new-tokens", "16",
                   "--quiet", "--no-live", "--trace", str(trace)).returncode == 0
    run = tmp_path / "batched.json"  # a record of a run that batched: its live fit, 40 ms an extra row
    run.write_text(json.dumps({"cost_curve": [0.006, 0.0, 0.040, 80]}))

    said: dict[bool, str] = {}

    def done_ms(*extra: str) -> int:
        out = specsched("teach", "--trace", str(trace), "--policy", "batch", "--solve", *extra)
        assert out.returncode == 0, out.stderr
        said[bool(extra)] = " ".join(out.stdout.split())
        answer = out.stdout[out.stdout.index("Answer"):]
        return int(re.search(r"everything done at (\d+) ms", answer).group(1))

    assert done_ms("--batch-cost", str(run)) >= done_ms() + 40  # at least one batch of two rows paid its 40 ms
    assert "extra batch row costs (c) is taken as 0" in said[False]  # as whatif says it, unpriced
    assert "taken as 0" not in said[True]
    alone = specsched("teach", "--seed", "1", "--batch-cost", str(run))
    assert alone.returncode == 2 and "give it with --trace TRACE" in alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1
