"""Shared helpers for the core test suite: fast sim runs, exact sim references, CLI runs
(the chi-square statistics are in chi2.py).

Everything here works on the sim backend, whose next-token distributions are exact functions of the
context, so a test can compute the true answer (greedy tokens, or the probability of any output)
without running the runtime at all and compare the runtime's output against it.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import psutil
from rich.console import Console

from specsched.runtime.app import RunRecord, run
from specsched.runtime.backends.backend import get_backend
from specsched.runtime.backends.sim import EOS, SimBackend, SimModel, SimTokenizer
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.sampling import SamplingParams, distribution
from specsched.runtime.core.wire import unpack
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier
from specsched.workers.draft_worker import DraftWorker

REPO = Path(__file__).resolve().parents[1]

# Small simulated forward costs: fast runs that still interleave drafts and verifications.
FAST = {"sim_draft_ms": 1.0, "sim_verify_ms": 2.0}


def sim_config(**overrides) -> RunConfig:
    return RunConfig(**{"backend": "sim", **FAST, **overrides})


def run_ok(config: RunConfig) -> RunRecord:
    """One in-process run (the supervisor and its child processes); it must succeed."""
    record = run(config)
    assert record.status == "ok", f"run {record.status}: {record.error}"
    return record


def outputs(record: RunRecord) -> list[list[int]]:
    return [s.tokens for s in record.sequences]


# -- exact references from the sim models ---------------------------------------------------------

def target_model(vocab: int) -> SimModel:
    return SimModel(vocab, SimBackend.MODEL_SEED, 1.0, 0.0, draft=False)


def draft_model(vocab: int, agreement: float) -> SimModel:
    return SimModel(vocab, SimBackend.MODEL_SEED, agreement, 0.0, draft=True)


def words(vocab: int, tokens: Iterable[int]) -> str:
    """A prompt text that the sim tokenizer encodes to exactly ``tokens``."""
    tok = SimTokenizer(vocab)
    text = " ".join(tok.words[t] for t in tokens)
    assert tok.encode(text) == list(tokens)
    return text


def greedy_reference(prompt: Sequence[int], vocab: int, max_new: int) -> list[int]:
    """Plain greedy decoding of the target, one argmax at a time: what every mode must produce."""
    model, context, out = target_model(vocab), list(prompt), []
    while len(out) < max_new:
        t = int(model.logits_for(context).argmax())
        out.append(t)
        context.append(t)
        if t == EOS:
            break
    return out


def outcome_probabilities(model: SimModel, prompt: Sequence[int], length: int,
                          params: SamplingParams) -> dict[tuple[int, ...], float]:
    """Exact probability of every possible output of ``length`` new tokens (ending early at EOS)."""
    probs: dict[tuple[int, ...], float] = {}

    def grow(context: list[int], out: tuple[int, ...], mass: float) -> None:
        if len(out) == length or (out and out[-1] == EOS):
            probs[out] = probs.get(out, 0.0) + mass
            return
        p = distribution(model.logits_for(context)[None], params)[0].astype(np.float64)
        p /= p.sum()
        for t in np.flatnonzero(p):
            grow(context + [int(t)], out + (int(t),), mass * p[t])

    grow(list(prompt), (), 1.0)
    return probs


def transition_table(model: SimModel, vocab: int, params: SamplingParams) -> dict[tuple[int, int], np.ndarray]:
    """p(next | last two tokens) for every two-token context (the sim models are order-2 Markov)."""
    table = {}
    for a, b in itertools.product(range(vocab), repeat=2):
        p = distribution(model.logits_for([a, b])[None], params)[0].astype(np.float64)
        table[(a, b)] = p / p.sum()
    return table


# -- decoding in process ---------------------------------------------------------------------------

class _NoTelemetry:
    def send(self, *args, **kwargs):
        pass

    def events(self, rows):
        pass


class _LoopbackSocket:
    """Stands in for a worker's DEALER: every draft sent is verified at once by an in-process Verifier."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self.reply: list | None = None

    def send_multipart(self, frames, copy=True) -> None:
        draft = Draft.from_message(unpack([bytes(f) for f in frames]))
        self.verifier.admit(draft, b"w0", time.monotonic())
        (reply,) = self.verifier.verify(self.verifier.queue.pick())
        self.reply = reply.verdict.to_frames()

    def poll(self, timeout=None) -> bool:
        return self.reply is not None

    def recv_multipart(self, copy=True) -> list[bytes]:
        frames, self.reply = [bytes(f) for f in self.reply], None
        return frames


def decode_in_process(config: RunConfig, prompt: list[int], seq: int) -> list[int]:
    """One sequence through the real DraftWorker and the real Verifier, without processes or sockets.

    Same per-sequence RNG streams as the runtime (keyed by the seed and the sequence's index in its job),
    so the output equals that of `sd` and `seed` runs.
    """
    config = replace(config, mode="sd", workers=seq + 1, prompts=[], sim_draft_ms=0.0, sim_verify_ms=0.0)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), _NoTelemetry())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[seq, seq, 0, list(prompt)]]}, verifier.target))
    worker = DraftWorker(backend.draft(), 0, _LoopbackSocket(verifier), _NoTelemetry())
    worker.run_sequence(config, seq, seq, list(prompt))
    return verifier.seqs[seq].generated


# -- the command line -------------------------------------------------------------------------------

PLAIN_PROMPT = "Write three short steps to make a cup of tea."


def cli_command(*args: str) -> list[str]:
    """`specsched run ARGS`; plain decoding of one shared prompt unless ARGS choose prompts or a --task
    (without a prompt, `run` builds a Tree-of-Thoughts tree)."""
    plain = [] if {"--prompt", "--task"} & set(args) else ["--prompt", PLAIN_PROMPT]
    sim = [] if "--backend" in args else ["--backend", "sim"]  # the CLI's default is the real pair (hf)
    return [sys.executable, "-m", "specsched", "run", *plain, *sim, *args]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cli_command(*args), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def specsched(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """`python -m specsched ARGS` as a user runs it (any subcommand); kwargs go to subprocess.run (env, cwd)."""
    return subprocess.run([sys.executable, "-m", "specsched", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, **kwargs)


def stderr_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.strip()]


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def kill_one(rows: list[dict], rng, killed: set[int]) -> bool:
    """SIGKILL one of `rows` (the engine's process-table rows) at random, remembering its pid in `killed`;
    False when it had exited on its own meanwhile."""
    pid = rng.choice(rows)["pid"]
    killed.add(pid)
    try:
        psutil.Process(pid).kill()
        return True
    except psutil.NoSuchProcess:
        return False


def kill_the_verifier_once_it_commits(engine, job, *, timeout_s: float = 60) -> None:
    """SIGKILL the engine's verifier as soon as `job`'s first sequence has committed a token."""
    deadline = time.monotonic() + timeout_s
    while not job.collected.tokens.get(0):
        assert time.monotonic() < deadline, f"nothing committed in {timeout_s} s"
        time.sleep(0.01)
    psutil.Process(next(p["pid"] for p in engine.processes if p["name"] == "verifier")).kill()


def _still_running(p: psutil.Process) -> bool:
    # is_running() also compares the start time, so a recycled pid does not count as a survivor.
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class Watched:
    """A CLI process started in the background, with every descendant it ever had recorded.

    ``sigint_ignored``: start it with SIGINT ignored, as a shell without job control starts a
    background job (``specsched run ... &`` in a script)."""

    def __init__(self, *args: str, sigint_ignored: bool = False) -> None:
        self.proc = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True,
                                     preexec_fn=_ignore_sigint if sigint_ignored else None)
        self.seen: dict[int, psutil.Process] = {}
        self.stdout = self.stderr = ""

    def poll_children(self) -> int:
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                self.seen.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        return len(self.seen)

    def wait_for_children(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.poll_children() < n:
            assert self.proc.poll() is None, f"exited early ({self.proc.returncode}): {self.finish()[1]}"
            assert time.monotonic() < deadline, f"saw {len(self.seen)} of {n} child processes"
            time.sleep(0.01)

    def watch_until_exit(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.poll_children()
            assert time.monotonic() < deadline, "the CLI did not exit"
            time.sleep(0.01)

    def signal(self, signum: int = signal.SIGINT) -> None:
        os.kill(self.proc.pid, signum)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        self.stdout, self.stderr = out, err
        return self.proc.returncode, out, err

    def survivors(self, grace: float = 10) -> list[psutil.Process]:
        """Children recorded while the CLI ran that still exist after it exited (a few seconds' grace)."""
        _, alive = psutil.wait_procs(list(self.seen.values()), timeout=grace)
        return [p for p in alive if _still_running(p)]

    def kill_all(self) -> None:
        for p in [*self.seen.values()]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        self.proc.kill()
        self.proc.wait()


def assert_one_error_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    lines = stderr_lines(result.stderr)
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("specsched: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def bench_args(*argv: str) -> argparse.Namespace:
    """`specsched bench ARGV` as the CLI parses it."""
    from specsched.runtime.bench.cli import add_bench_parser

    parser = argparse.ArgumentParser(prog="specsched")
    add_bench_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["bench", *argv])


def render_text(renderable, width: int = 160) -> str:
    """A Rich renderable as plain text at a fixed width (no colour), as a user's terminal shows it."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()
