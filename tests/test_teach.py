"""`specsched teach`: exercises are reproducible, and --solve's answers are the hand-worked ones."""

from __future__ import annotations

import re

import pytest
from cli_runs import specsched


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
])
def test_bad_input_gets_one_line(args, message):
    out = specsched("teach", *args)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
