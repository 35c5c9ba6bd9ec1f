"""The command line as a user meets it: bad input costs one clear line and a non-zero exit (no
traceback), `python -m specsched` and the checkout launcher `bin/specsched` both run, and `--json`
writes the documented record.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from cli_runs import REPO, assert_one_error_line, read_json, run_cli, specsched, stderr_lines
from helpers import greedy_reference, words

from specsched.runtime.backends.sim import EOS, SimTokenizer
from specsched.runtime.cli import _sigint_enabled

FAST_FLAGS = ["--backend", "sim", "--sim-draft-ms", "1", "--sim-verify-ms", "2"]


@pytest.fixture
def policy_files(tmp_path):
    (tmp_path / "empty.py").write_text("X = 1\n")
    (tmp_path / "named_boom.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Boom(Policy):
            name = "boom"

            def pick(self, ready):
                raise RuntimeError("the scheduler exploded")
    """))
    (tmp_path / "exploding.py").write_text(textwrap.dedent("""
        from specsched.policies import Policy

        class Exploding(Policy):
            def pick(self, ready):
                raise ZeroDivisionError("no more picks")
    """))
    return tmp_path


@pytest.mark.parametrize("flags, fragments", [
    (["--policy", "lotto"], ["unknown policy 'lotto'"]),
    (["--policy", "{tmp}/missing.py:Lottery"], ["policy file not found", "missing.py"]),
    (["--policy", "{tmp}/empty.py:Lottery"], ["'Lottery' not found", "empty.py"]),
    (["--policy", "no_such_module_xyz:Lottery"], ["no_such_module_xyz"]),
    (["--k", "0"], ["--k must be in 1..64, got 0"]),
    (["--workers", "0"], ["--workers must be at least 1, got 0"]),
    (["--workers", "-1"], ["--workers must be at least 1"]),
    (["--mode", "turbo"], ["unknown --mode 'turbo'"]),
    (["--backend", "gpu"], ["unknown --backend 'gpu'"]),
    (["--temperature", "-1"], ["--temperature"]),
    (["--workers", "3", "--policy", "priority", "--priorities", "1,2"], ["--priorities"]),
    (["--workers", "3", "--prompt", "a", "--prompt", "b"], ["2 prompts but --workers 3"]),
    (["--backend", "hf", "--sim-agreement", "0.5"], ["applies to --backend sim only", "--backend hf"]),
    (["--lookup", "1"], ["--lookup must be 0 (off) or at least 2"]),
    (["--min-confidence", "1.5"], ["--min-confidence must be in [0, 1)"]),
    (["--mode", "ar", "--lockstep"], ["--lockstep needs draft workers", "--mode ar"]),
    (["--seed", "-1"], ["--seed must be >= 0, got -1"]),
    (["--temperature", "nan"], ["--temperature must be a finite number"]),
    (["--prompt", " "], ["a --prompt is empty"]),
    (["--json", "{tmp}/no/such/folder/run.json"], ["--json", "does not exist"]),
    (["--json", "{tmp}"], ["--json", "is a folder"]),
    (["--trace", "{tmp}/sub/"], ["--trace", "is a folder"]),
    (["--workers", "abc"], ["--workers: invalid int value: 'abc'", "--help"]),
    (["--k-config", "2,,1"], ["--k-config", "'2,,1'"]),
    (["--sim-draft-ms", "-1"], ["--sim-draft-ms must be a number >= 0"]),
    (["--sim-verify-ms", "nan"], ["--sim-verify-ms must be a number >= 0"]),
    (["--target", "tiny"], ["--target applies to --backend hf or llamacpp"]),
    (["--dtype", "bf16"], ["--dtype applies to --backend hf or llamacpp"]),
    (["--verifier-threads", "-1"], ["--verifier-threads must be >= 0"]),
    (["--prompt", "x", "--task", "creative"], ["--prompt and --task are two workloads"]),
    (["--prompt", "x", "--thoughts", "2"], ["--thoughts applies to a Tree-of-Thoughts run"]),
    (["--task", "gsm8k", "--thoughts", "2", "--workers", "5"], ["--thoughts 2 and --workers 5 disagree"]),
    (["--task", "gsm8k", "--thoughts", "0"], ["--thoughts must be at least 1, got 0"]),
    (["--max-new-tokens", "99999999999999999999"], ["--max-new-tokens must be in 1..1,000,000"]),
    (["--k", "65"], ["--k must be in 1..64, got 65"]),
    (["--k-config", "64,64,64"], ["--k-config 64,64,64 drafts 266304 tokens a round; at most 1024"]),
    (["--sim-vocab", "100000000000"], ["--sim-vocab must be in 4..262,144"]),
    (["--workers", "65"], ["the job needs 65 draft workers (--mode seed); this engine runs at most 64"]),
    (["--task", "gsm8k", "--thoughts", "65"], ["the job needs 65 draft workers"]),
    (["--raw-prompt"], ["--raw-prompt applies to --backend hf or llamacpp"]),
    (["--json", ""], ["--json is empty; give a file name"]),
    (["--join-timeout", "nan"], ["--join-timeout must be > 0 seconds, got nan"]),
    (["--jobs", "3"], ["--jobs applies to --arrivals"]),
    (["--arrivals", "poisson:1", "--jobs", "100000000"], ["--jobs must be in 1..10,000"]),
], ids=lambda x: " ".join(x) if isinstance(x, list) and x and x[0].startswith("--") else None)
def test_bad_input_gets_one_clear_line_and_exit_2(policy_files, flags, fragments):
    flags = [f.format(tmp=policy_files) for f in flags]
    result = run_cli("--max-new-tokens", "4", *FAST_FLAGS, *flags)  # the last value of a flag wins
    assert_one_error_line(result, 2, *fragments)
    assert result.stdout == ""  # refused before anything ran


def test_a_policy_that_raises_stops_the_run_with_one_line_naming_it(policy_files):
    result = run_cli("--policy", f"{policy_files}/named_boom.py:Boom", "--workers", "2",
                     "--max-new-tokens", "8", *FAST_FLAGS)
    assert_one_error_line(result, 1, "'boom'", "the scheduler exploded")


def test_a_policy_without_a_name_attribute_is_named_by_its_class_or_spec(policy_files):
    result = run_cli("--policy", f"{policy_files}/exploding.py:Exploding", "--workers", "2",
                     "--max-new-tokens", "8", *FAST_FLAGS)
    line = assert_one_error_line(result, 1, "no more picks")
    assert "Exploding" in line


VOCAB = 64
PROMPTS = [(5, 7), (1, 48)]  # the second ends early at EOS under greedy decoding


@pytest.mark.parametrize("launcher", ["python -m specsched", "bin/specsched"])
def test_both_launchers_run_and_write_the_json_record(tmp_path, launcher):
    if launcher == "bin/specsched":
        assert (REPO / "bin" / "specsched").is_file(), "bin/specsched, the checkout launcher, is missing"
        command = [sys.executable, str(REPO / "bin" / "specsched"), "run"]
    else:
        command = [sys.executable, "-m", "specsched", "run"]
    out = tmp_path / "run.json"
    prompt_args = [a for p in PROMPTS for a in ("--prompt", words(VOCAB, p))]
    result = subprocess.run([*command, *prompt_args, "--max-new-tokens", "12", "--k", "3", "--json", str(out),
                             *FAST_FLAGS], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert stderr_lines(result.stderr) == []
    expected = [greedy_reference(p, VOCAB, 12) for p in PROMPTS]
    tok = SimTokenizer(VOCAB)
    # the generated texts are printed, then the summary
    for tokens in expected:
        assert tok.decode(tokens) in result.stdout
    assert "acceptance rate" in result.stdout and "tokens/s" in result.stdout

    record = read_json(out)
    assert {"config", "sequences", "metrics", "events"} <= set(record)
    assert record["config"]["max_new_tokens"] == 12 and record["config"]["k"] == 3
    assert record["config"]["mode"] == "seed" and record["config"]["policy"] == "fcfs"
    made_by = record["provenance"]  # what produced the record (the hf test checks the models' hashes)
    assert made_by["models"] == {"backend": "sim", "target": None, "draft": None}
    assert made_by["software"]["versions"]["specsched"] and made_by["machine"]["cores"] == os.cpu_count()
    assert made_by["threads"]["children"] == {"verifier": max(1, (os.cpu_count() or 1) - 2), "draft-0": 1,
                                              "draft-1": 1}

    seqs = record["sequences"]
    assert [s["id"] for s in seqs] == [0, 1] and [s["worker"] for s in seqs] == [0, 1]
    assert [s["prompt"] for s in seqs] == [words(VOCAB, p) for p in PROMPTS]
    assert [s["tokens"] for s in seqs] == expected
    assert expected[1][-1] == EOS and len(expected[0]) == 12
    assert [s["text"] for s in seqs] == [tok.decode(t) for t in expected]

    m = record["metrics"]
    for key in ("wall_s", "tokens_per_s", "acceptance_rate", "mean_tokens_per_verify", "verifier_busy"):
        assert isinstance(m[key], float), key
    n_tokens = sum(len(t) for t in expected)
    assert m["wall_s"] > 0 and m["tokens_per_s"] == pytest.approx(n_tokens / m["wall_s"])
    assert 0 <= m["acceptance_rate"] <= 1 and 0 < m["verifier_busy"] <= 1
    assert m["mean_tokens_per_verify"] >= 1

    events = record["events"]
    assert events
    for e in events:
        assert {"pid", "role", "worker", "kind", "start", "end"} <= set(e)
        assert e["role"] in ("verifier", "draft")
        assert e["kind"] in ("draft", "queued", "verify", "resample", "idle")
        assert e["start"] <= e["end"]
        assert (e["worker"] == -1) == (e["role"] == "verifier")
    # one verifier process and one process per draft worker, none of them the CLI itself
    pids = {(e["role"], e["worker"]): e["pid"] for e in events}
    assert {w for r, w in pids if r == "draft"} == {0, 1}
    assert len(set(pids.values())) == 3
    assert {e["kind"] for e in events if e["role"] == "draft"} >= {"draft", "queued", "verify"}


def test_a_piped_summary_keeps_every_table_row_on_one_line():
    """Through a pipe Rich would assume 80 columns and wrap cells ("0.252" above " s"); a log keeps rows whole."""
    env = {**os.environ, "COLUMNS": "80"}  # shells export their terminal's width; a pipe has none
    result = specsched("run", "--prompt", words(VOCAB, PROMPTS[0]), "--workers", "3", "--max-new-tokens", "6",
                       "--quiet", *FAST_FLAGS, env=env)
    assert result.returncode == 0, result.stderr
    rows = [ln for ln in result.stdout.splitlines() if re.match(r"│ (w\d+|mean) +│ +\d", ln)]
    assert len(rows) == 4, result.stdout
    assert all(re.match(r"│ (w\d|mean) +│ +\d+\.\d{3} s │ +\d+\.\d{3} s │ +\d+\.\d{3} s │", ln) for ln in rows), rows
    assert "verifications" in result.stdout and "longest wait" in result.stdout  # headers not cut either


def test_quiet_prints_only_the_summary(tmp_path):
    result = run_cli("--prompt", words(VOCAB, PROMPTS[0]), "--workers", "1", "--max-new-tokens", "6", "--quiet",
                     *FAST_FLAGS)
    assert result.returncode == 0, result.stderr
    assert SimTokenizer(VOCAB).decode(greedy_reference(PROMPTS[0], VOCAB, 6)) not in result.stdout
    assert "tokens/s" in result.stdout


def test_the_cli_takes_sigint_back_while_it_runs_and_leaves_other_handlers_alone():
    # started with SIGINT ignored (a background job of a script), Ctrl-C still interrupts the CLI;
    # the lifecycle tests send the signal to a real run
    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with _sigint_enabled():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN   # put back for an in-process caller
        signal.signal(signal.SIGINT, own)
        with _sigint_enabled():
            assert signal.getsignal(signal.SIGINT) is own
        assert signal.getsignal(signal.SIGINT) is own
    finally:
        signal.signal(signal.SIGINT, previous)


def test_export_refuses_to_overwrite_its_trace_or_draw_an_absurd_width(tmp_path):
    trace = tmp_path / "run.trace.json"
    run_ok = run_cli("--max-new-tokens", "4", *FAST_FLAGS, "--trace", str(trace))
    assert run_ok.returncode == 0, run_ok.stderr
    before = trace.read_bytes()
    same = specsched("export", str(trace), "--svg", str(trace))
    assert_one_error_line(same, 2, "would overwrite the trace it reads")
    wide = specsched("export", str(trace), "--svg", str(tmp_path / "o.svg"), "--width", "100000000")
    assert_one_error_line(wide, 2, "--width must be in")
    assert trace.read_bytes() == before and not (tmp_path / "o.svg").exists()
    fine = specsched("export", str(trace), "--svg", str(tmp_path / "o.svg"))
    assert fine.returncode == 0 and (tmp_path / "o.svg").read_text().startswith("<svg")


def test_ctrl_c_while_models_load_still_writes_an_interrupted_record(tmp_path, monkeypatch, capsys):
    from specsched.runtime import app
    from specsched.runtime.cli import main

    def interrupted_while_loading(config):  # the engine checks the models and loads the tokenizer first
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "Engine", interrupted_while_loading)
    out = tmp_path / "run.json"
    argv = ["run", "--backend", "sim", "--prompt", "a b", "--workers", "2", "--json", str(out), "--no-live"]
    assert main(argv) == 130
    record = read_json(out)
    assert record["status"] == "interrupted" and "before any process started" in record["error"]
    assert [s["tokens"] for s in record["sequences"]] == [[], []]
    assert "interrupted" in capsys.readouterr().err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A recorded run's trace, and a copy of it without its config (one run for every case below)."""
    folder = tmp_path_factory.mktemp("recorded")
    trace, damaged = folder / "run.trace.json", folder / "damaged.json"
    assert run_cli("--max-new-tokens", "4", *FAST_FLAGS, "--trace", str(trace)).returncode == 0
    data = read_json(trace)
    del data["config"]
    damaged.write_text(json.dumps(data))
    return {"trace": trace, "damaged": damaged}


@pytest.mark.parametrize("command, fragments", [
    (["export", "{trace}", "--reliability", "{tmp}/afile/r.svg"], ["--reliability", "folder", "does not exist"]),
    (["export", "{trace}", "--chrome", ""], ["--chrome is empty"]),
    (["export", "{damaged}", "--svg", "{tmp}/o.svg"], ["damaged.json: not a specsched record", "'config'"]),
    (["replay", "{damaged}", "--final"], ["damaged.json: not a specsched record", "'config'"]),
    (["whatif", "{damaged}", "--policy", "fcfs"], ["damaged.json: not a specsched record", "'config'"]),
    (["whatif", "{trace}", "--policy", "fcfs", "--svg", "{tmp}/afile"], ["--svg", "is a file; give a folder"]),
], ids=lambda x: " ".join(x[:1] + x[2:]) if isinstance(x, list) and x[0] in ("export", "replay", "whatif") else None)
def test_watching_a_run_refuses_bad_files_and_outputs_in_one_line(recorded, tmp_path, command, fragments):
    (tmp_path / "afile").write_text("")
    paths = {**recorded, "tmp": tmp_path}
    result = specsched(*(a.format(**paths) for a in command))
    assert_one_error_line(result, 2, *fragments)


def test_the_checkout_launcher_says_what_to_install_on_a_python_without_the_dependencies():
    # -S: no site-packages, so rich, torch and the rest cannot be imported
    result = subprocess.run([sys.executable, "-S", str(REPO / "bin" / "specsched"), "run", "--help"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and result.stdout == ""
    (line,) = stderr_lines(result.stderr)
    assert line.startswith("specsched: error: ") and "is not installed" in line and "pip install -e" in line


def test_compare_checks_its_chart_folder_before_running_any_policy(tmp_path):
    (tmp_path / "afile").write_text("")
    result = specsched("compare", "--backend", "sim", "--prompt", "a b", "--max-new-tokens", "2",
                        "--policies", "fcfs,rr", "--svg", str(tmp_path / "afile" / "charts"))
    assert_one_error_line(result, 2, "--svg", "cannot create this folder")
    assert "running policy" not in result.stdout


def test_an_existing_writable_output_file_is_accepted_in_a_folder_the_user_cannot_write(tmp_path, monkeypatch):
    """Like --json /dev/null for a normal user: the file is writable, its folder is not."""
    import argparse
    from pathlib import Path

    import specsched.runtime.output_paths as outputs

    target = tmp_path / "run.json"
    target.write_text("")
    monkeypatch.setattr(outputs.os, "access", lambda path, mode: Path(path) == target)
    outputs.check_outputs(argparse.Namespace(json=str(target)))  # no error
    with pytest.raises(outputs.ConfigError, match="is not writable"):
        outputs.check_outputs(argparse.Namespace(json=str(tmp_path / "new.json")))
