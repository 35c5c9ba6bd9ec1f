"""Where the live view goes: a Rich Live display on a terminal, plain progress lines anywhere else
(a pipe, a log file, CI), nothing with --no-live."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from cli_runs import PLAIN_PROMPT
from rich.console import Console

from specsched.runtime.apps.view.live import PROGRESS_EVERY_S, LiveView, ProgressLines, choose_view, progress_line
from specsched.runtime.apps.view.monitor import Monitor
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.events import Event
from specsched.runtime.engine.collected import Collected

CONFIG = RunConfig(backend="sim", workers=2, max_new_tokens=8)
EVENTS = [Event(1, "verifier", -1, "verify", 2.0, 3.0, 0), Event(2, "draft", 0, "draft", 0.0, 2.0, 0),
          Event(2, "draft", 0, "verify", 2.0, 3.0, 0), Event(3, "draft", 1, "draft", 0.0, 2.0, 1),
          Event(3, "draft", 1, "queued", 2.0, 3.0, 1)]
PROGRESS = re.compile(r"^\[ +\d+\.\d s\] tokens \d+/\d+ · [\d.]+ tok/s · α ")


def test_the_terminal_decides_the_view(monkeypatch):
    monitor = Monitor(CONFIG)
    assert isinstance(choose_view(Console(file=io.StringIO(), force_terminal=True), monitor), LiveView)
    assert isinstance(choose_view(Console(file=io.StringIO(), force_terminal=False), monitor), ProgressLines)
    # a terminal that cannot redraw in place (TERM=dumb) would see the live view only once the run ended
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(choose_view(Console(file=io.StringIO(), force_terminal=True), monitor), ProgressLines)
    assert choose_view(Console(file=io.StringIO(), force_terminal=True), monitor, enabled=False) is None


def test_progress_line():
    collected = Collected(events=EVENTS, started=-1.0, commits=[(3.0, 0, 4)])
    monitor = Monitor(CONFIG)
    monitor.feed(collected)
    # 4 tokens in the 3 s since the first event; alpha estimated: (4 tokens - 1 draft) / 4 drafted
    assert progress_line(monitor.snapshot(collected, 4.0)) == \
        "[    5.0 s] tokens 4/16 · 1.3 tok/s · α 0.75 · verifier busy 33 % · queue mean 0.33 · done 0/2"


def test_progress_lines_are_plain_and_end_on_the_whole_run():
    out = io.StringIO()
    collected = Collected(started=0.0)
    with ProgressLines(Monitor(CONFIG), Console(file=out, width=200), every=0.0) as view:
        for e in EVENTS:
            collected.events.append(e)
            view.update(collected)
        collected.tokens, collected.done = {0: [1, 2, 3], 1: [4, 5]}, {0, 1}
    lines = out.getvalue().splitlines()
    # one line per update, then the final one, which counts the finished texts
    assert len(lines) == len(EVENTS) + 1 == view.frames and all(PROGRESS.match(ln) for ln in lines)
    assert " tokens 0/16 " in lines[-2] and " tokens 5/16 " in lines[-1] and lines[-1].endswith("done 2/2")
    assert "\x1b" not in out.getvalue()


def test_progress_lines_print_a_final_line_even_before_the_first_interval():
    out = io.StringIO()
    # a line an hour: the update comes before the first interval even on a stalled machine
    with ProgressLines(Monitor(CONFIG), Console(file=out, width=200), every=3600.0) as view:
        view.update(Collected(events=list(EVENTS), started=0.0, done={0, 1}))
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and PROGRESS.match(lines[0]) and lines[0].endswith("done 2/2")


def test_progress_lines_print_nothing_for_a_run_that_never_reported_or_when_told_not_to():
    out = io.StringIO()
    with ProgressLines(Monitor(CONFIG), Console(file=out, width=200)):
        pass
    with ProgressLines(Monitor(CONFIG), Console(file=out, width=200), every=3600.0, final=False) as view:
        view.update(Collected(events=list(EVENTS), started=0.0))
    assert out.getvalue() == ""
    # a caller with its own summary of each run (transient) gets no final line
    quiet = choose_view(Console(file=out, force_terminal=False), Monitor(CONFIG), transient=True)
    assert isinstance(quiet, ProgressLines) and not quiet.final


def test_live_view_redraws_in_place_and_ends_on_the_whole_run():
    out = io.StringIO()
    collected = Collected(events=list(EVENTS), started=0.0, done={0, 1})
    with LiveView(Monitor(CONFIG), Console(file=out, width=80, height=30, force_terminal=True)) as view:
        view.update(collected)
    text = out.getvalue()
    assert view.frames == 2                                   # the first frame, then the final chart
    assert "\x1b[" in text and "verifier" in text and "finished" in text
    assert view.cpu_s > 0


def cli(*args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "specsched", "run", "--prompt", PLAIN_PROMPT,
               "--workers", "2", "--max-new-tokens", "24",
               "--backend", "sim", "--sim-draft-ms", "5", "--sim-verify-ms", "40", "--quiet", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_piped_run_prints_progress_lines_and_no_escape_codes():
    out = cli()
    assert out.returncode == 0, out.stderr
    assert "\x1b[" not in out.stdout
    lines = [ln for ln in out.stdout.splitlines() if PROGRESS.match(ln)]
    # a line every PROGRESS_EVERY_S while it runs (none for a run this short), and always the final one: every
    # token of both sequences (the sim target's greedy text of this prompt does not stop early)
    assert lines and all("/48 ·" in ln for ln in lines)
    assert " tokens 48/48 · " in lines[-1] and lines[-1].endswith("done 2/2")
    assert "watching (view CPU / run CPU)" in out.stdout


def test_no_live_prints_no_progress():
    out = cli("--no-live")
    assert out.returncode == 0, out.stderr
    assert not [ln for ln in out.stdout.splitlines() if PROGRESS.match(ln)]
    assert "status" in out.stdout and "watching" not in out.stdout


def test_a_piped_tree_prints_a_line_per_phase_not_a_line_a_second():
    # 5 phases of about a second each on a sim verifier of 100 ms a forward: a line a second printed 5 or more
    phase_line = re.compile(r"^gsm8k · (level \d/2|answer) · [a-z ]+: \d+ tokens in [\d.]+ s ")
    out = subprocess.run([sys.executable, "-m", "specsched", "run", "--backend", "sim", "--sim-verify-ms", "100",
                          "--steps", "2", "--thought-tokens", "24", "--eval-tokens", "4", "--answer-tokens", "8"],
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len([ln for ln in lines if phase_line.match(ln)]) == 5
    # a progress line only once a phase has run half a minute (none here, unless the machine stalls)
    stamps = [float(m.group(1)) for ln in lines if (m := re.match(r"^\[ *([\d.]+) s\] ", ln))]
    assert PROGRESS_EVERY_S >= 30 and all(stamp >= 30 for stamp in stamps), stamps
