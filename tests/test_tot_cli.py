"""`specsched run --task ...` as a user runs it: the tree printed and in --json, bad input in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from cli_runs import assert_one_error_line

from specsched.runtime.apps.cli import build_parser
from specsched.runtime.apps.run.app import run
from specsched.runtime.apps.run.flag_config import config_from_args
from specsched.runtime.apps.tot.blocksworld_task import Blocksworld
from specsched.runtime.apps.tot.gsm8k import Gsm8k
from specsched.runtime.apps.tot.search import SearchConfig, search
from specsched.runtime.apps.tot.task import Problem
from specsched.runtime.apps.tot.tot_cli import TREE_SAMPLING, tree_sampling
from specsched.runtime.apps.tot.tot_commands import about_the_model
from specsched.runtime.core.config import RunConfig
from specsched.runtime.models.registry import PRESETS

SIM = ["--backend", "sim", "--sim-draft-ms", "0.5", "--sim-verify-ms", "2", "--no-live"]


def specsched(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsched", "run", *args], capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def test_blocksworld_tree_with_json(tmp_path):
    out = tmp_path / "tree.json"
    result = specsched("--task", "blocksworld", "--steps", "2", "--thoughts", "2", "--breadth", "2",
                       "--problem", "1", "--json", str(out), *SIM)
    assert result.returncode == 0, result.stderr
    assert "blocksworld" in result.stdout and "answer:" in result.stdout and "thought generation" in result.stdout
    data = json.loads(out.read_text())
    (tree,) = data["trees"]
    assert tree["status"] == "ok" and tree["task"] == "blocksworld"
    assert data["search"]["thoughts"] == 2
    assert {k: data["config"][k] for k in TREE_SAMPLING} == TREE_SAMPLING  # a tree samples by default
    # 2 thoughts from the root, then 2 from each of the 2 kept states
    assert [n["level"] for n in tree["nodes"]].count(2) == 4
    problem = Problem(**tree["problem"])  # the plan went through the validator
    assert tree["correct"] is Blocksworld().correct(problem, tree["answer"]) and tree["correct"] is not None
    assert tree["per_phase"]["state evaluation"]["runs"] == 2
    assert tree["per_phase"]["answer"]["runs"] == 0  # the plan is the answer: no final generation


def test_without_a_prompt_run_builds_a_gsm8k_tree():
    result = specsched("--steps", "1", "--thoughts", "2", "--thought-tokens", "8", "--eval-tokens", "4",
                       "--answer-tokens", "4", *SIM)
    assert result.returncode == 0, result.stderr
    assert "gsm8k" in result.stdout and "(gold 34)" in result.stdout
    # said before the tree: how it is sampled, and the paper's setting one flag away
    assert result.stdout.startswith("Thoughts sampled at T = 0.85, top-p 0.9 (the SEED paper's T = 1: --temperature 1)")


@pytest.mark.parametrize("flags, sampling", [
    ([], TREE_SAMPLING),
    (["--temperature", "1"], {"temperature": 1.0, "top_k": 0, "top_p": 1.0}),   # the paper's: no cut-off
    (["--top-p", "0.8"], {"temperature": 1.0, "top_k": 0, "top_p": 0.8}),       # a cut-off alone: at the paper's T
    (["--temperature", "0"], {"temperature": 0.0, "top_k": 0, "top_p": 1.0}),   # greedy
])
def test_a_tree_samples_as_it_reads_best_and_the_papers_setting_is_one_flag_away(flags, sampling):
    args = build_parser().parse_args(["run", *flags])
    config = (config_from_args(args)).replace(**tree_sampling(args))
    assert {k: config.to_dict()[k] for k in sampling} == sampling


def test_before_the_tree_the_default_pair_says_what_it_can_do():
    note = about_the_model(RunConfig.of(**TREE_SAMPLING))
    assert note.startswith("Thoughts sampled at T = 0.85, top-p 0.9") and "SmolLM2-135M-Instruct is a small" in note
    assert about_the_model(RunConfig.of(temperature=1.0)) == "Thoughts sampled at T = 1.\n" + PRESETS["smollm2"].limits
    assert about_the_model(RunConfig.of(backend="sim", temperature=1.0)) == "Thoughts sampled at T = 1."


def test_bad_tot_input_is_one_line_and_exit_2(tmp_path):
    assert_one_error_line(specsched("--task", "game24", *SIM), 2, "unknown task 'game24'")
    assert_one_error_line(specsched("--breadth", "0", *SIM), 2, "--breadth must be at least 1")
    assert_one_error_line(specsched("--problem", "99", *SIM), 2, "--problem 99 is out of range")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 3"}\nnot json\n')
    assert_one_error_line(specsched("--data", str(bad), *SIM), 2, "bad.jsonl:2")


def test_ctrl_c_between_phases_keeps_the_tree_built_so_far():
    calls = []

    def run_phase(config: RunConfig, label: str):
        calls.append(label)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run(config)

    base = RunConfig.of(backend="sim", sim_draft_ms=0.5, sim_verify_ms=2.0, temperature=1.0)
    cfg = SearchConfig(thoughts=2, thought_tokens=6, eval_tokens=3)
    tree = search(Gsm8k(), Gsm8k().samples()[0], base, cfg, run_phase)
    assert tree.status == "interrupted" and "Ctrl-C" in tree.error
    assert len(tree.phases) == 2 and len(tree.nodes) == 3  # level 1 generated and evaluated
    assert all(n.score is not None for n in tree.nodes[1:])
