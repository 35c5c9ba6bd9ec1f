"""The command line as a user meets it when a run goes ahead: `python -m specsched` and the checkout
launcher `bin/specsched` both run (the launcher says what to install on a Python without the
dependencies), `--json` writes the documented record, the summary keeps its rows whole through a pipe,
and Ctrl-C is taken back and still leaves a record. Bad input is tested in test_cli_bad_input.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from cli_runs import FAST_FLAGS, REPO, read_json, run_cli, specsched, stderr_lines
from helpers import greedy_reference, words

from specsched.runtime.backends.sim import EOS, SimTokenizer
from specsched.runtime.engine.collected import Interrupted
from specsched.runtime.engine.stopping import STOPPING_LINE, StopSignals, handles_stops, stop_signals

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


def test_a_locale_that_is_not_utf_8_gets_the_output_not_a_traceback():
    # an ASCII locale (LANG=C without Python's UTF-8 mode): the · α │ of the output had ended a run, and
    # --help, in UnicodeEncodeError; they print as '?'
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="C", PYTHONUTF8="0")
    for args in (["run", "--prompt", words(VOCAB, PROMPTS[0]), "--max-new-tokens", "6", *FAST_FLAGS], ["--help"]):
        result = subprocess.run([sys.executable, "-m", "specsched", *args], capture_output=True, env=env,
                                timeout=120, stdin=subprocess.DEVNULL)
        assert result.returncode == 0 and b"Traceback" not in result.stderr, result.stderr.decode(errors="replace")
        assert result.stdout.isascii() and (b"tokens/s" in result.stdout or b"usage:" in result.stdout)


def test_quiet_prints_only_the_summary(tmp_path):
    result = run_cli("--prompt", words(VOCAB, PROMPTS[0]), "--workers", "1", "--max-new-tokens", "6", "--quiet",
                     *FAST_FLAGS)
    assert result.returncode == 0, result.stderr
    assert SimTokenizer(VOCAB).decode(greedy_reference(PROMPTS[0], VOCAB, 6)) not in result.stdout
    assert "tokens/s" in result.stdout


def test_the_cli_takes_sigint_and_sigterm_while_it_runs_and_puts_the_handlers_back():
    # started with SIGINT ignored (a background job of a script), Ctrl-C still interrupts the CLI; an
    # in-process caller gets its own handlers back. The lifecycle tests send the signals to a real run.
    def own(signum, frame):
        pass

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, own)
    try:
        with stop_signals():
            assert isinstance(signal.getsignal(signal.SIGINT), StopSignals) and handles_stops()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is own
        assert not handles_stops()
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


@pytest.mark.parametrize("signum, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Interrupted)])
def test_the_first_signal_stops_the_run_the_second_only_says_so_the_third_abandons_it(signum, raised, capsys):
    handler = StopSignals()
    with pytest.raises(raised):
        handler(signum, None)
    handler(signal.SIGINT, None)  # while the run stops: one line, and the teardown goes on
    assert capsys.readouterr().err == STOPPING_LINE + "\n"
    with pytest.raises(KeyboardInterrupt):
        handler(signal.SIGINT, None)


def test_ctrl_c_while_models_load_still_writes_an_interrupted_record(tmp_path, monkeypatch, capsys):
    from specsched.runtime.apps.cli import main
    from specsched.runtime.apps.run import app

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


def test_the_checkout_launcher_says_what_to_install_on_a_python_without_the_dependencies():
    # -S: no site-packages, so rich, torch and the rest cannot be imported
    result = subprocess.run([sys.executable, "-S", str(REPO / "bin" / "specsched"), "run", "--help"],
                            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert result.returncode == 1 and result.stdout == ""
    (line,) = stderr_lines(result.stderr)
    assert line.startswith("specsched: error: ") and "is not installed" in line and "pip install -e" in line
