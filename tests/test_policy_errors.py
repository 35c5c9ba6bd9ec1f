"""A user-written policy that is malformed, exits, returns nonsense or raises: one line that names the
policy and the cause, never a traceback or a silent exit. Bad input (a policy that cannot even be
loaded, a bad --policies list) exits 2; a run the policy breaks exits 1."""

from __future__ import annotations

import os
import subprocess
import textwrap

import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, read_json, run_cli, specsched, stderr_lines

FAST = [*FAST_FLAGS, "--workers", "2", "--max-new-tokens", "6"]


@pytest.fixture
def policies(tmp_path):
    (tmp_path / "exits.py").write_text("raise SystemExit(5)\n")
    (tmp_path / "answer.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class FortyTwo(Policy):
            name = "forty-two"

            def pick(self, ready):
                return 42
    """))
    (tmp_path / "third.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Third(Policy):
            calls = 0

            def pick(self, ready):
                self.calls += 1
                if self.calls == 3:
                    raise RuntimeError("third call")
                return ready[0]
    """))
    (tmp_path / "pol.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Boom(Policy):
            def pick(self, ready):
                raise RuntimeError("kaboom")
    """))
    return tmp_path


def compare_cli(*args: str) -> subprocess.CompletedProcess:
    wide = {**os.environ, "COLUMNS": "400"}   # tmp_path names are long: keep each one on one line
    return specsched("compare", "--prompt", "x", *FAST, *args, env=wide)


def test_an_empty_module_part_is_bad_input():
    result = run_cli("--policy", ":Boom", *FAST)
    assert_one_error_line(result, 2, "':Boom'", "module part before ':' is empty")


def test_a_policy_file_that_exits_on_import_is_bad_input_naming_the_file(policies):
    result = run_cli("--policy", f"{policies}/exits.py:X", *FAST)
    assert_one_error_line(result, 2, f"{policies}/exits.py", "SystemExit: 5")


def test_a_pick_that_returns_something_else_names_the_policy_and_the_contract(policies):
    result = run_cli("--policy", f"{policies}/answer.py:FortyTwo", *FAST)
    assert_one_error_line(result, 1, "'forty-two'", "returned 42 (int)", "must return a ReadyDraft")


def test_a_run_its_policy_failed_keeps_what_the_verifier_counted(policies, tmp_path):
    # two verifications ran before the third pick raised: the record and the summary keep their counts
    result = run_cli("--policy", f"{policies}/third.py:Third", *FAST, "--max-new-tokens", "30", "--prompt", "a",
                     "--prompt", "b", "--no-live", "--json", str(tmp_path / "r.json"))
    assert_one_error_line(result, 1, "raised RuntimeError: third call")
    record = read_json(tmp_path / "r.json")
    counters, committed = record["counters"], sum(len(s["tokens"]) for s in record["sequences"])
    assert record["status"] == "failed" and counters["verifications"] == 2 and counters["committed"] == committed > 0
    assert record["metrics"]["mean_tokens_per_verify"] == committed / 2
    summary = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in result.stdout.splitlines()
               if line.count("│") == 3}
    assert summary["mean tokens / verification"] == f"{committed / 2:.2f}"
    assert summary["acceptance rate α"] == f"{counters['accepted'] / counters['drafted']:.3f}"


def test_compare_shows_why_a_policy_failed_on_stderr(policies):
    spec = f"{policies}/pol.py:Boom"
    result = compare_cli("--policies", f"fcfs,{spec}")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("specsched: error: "), result.stderr
    assert spec in lines[0] and "RuntimeError: kaboom" in lines[0]
    assert f"run failed under {spec}: texts cannot be compared" in result.stdout
    assert "💥" not in result.stdout   # ":Boom:" printed as text, not as an emoji code


@pytest.mark.parametrize("names, fragment", [
    ("fcfs,,rr", "has an empty name"),
    ("fcfs,rr,fcfs", "names fcfs more than once"),
])
def test_compare_refuses_an_empty_or_repeated_policy_name(names, fragment):
    result = compare_cli("--policies", names)
    assert_one_error_line(result, 2, fragment)
    assert "running policy" not in result.stdout   # refused before anything ran
