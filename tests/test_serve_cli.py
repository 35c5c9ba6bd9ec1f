"""`specsched serve` as a user starts it: bad flags are one line and status 2; a server started on a free
port answers, and Ctrl-C or SIGTERM stops it with 130 or 143, as every command, leaving no process."""

import os
import re
import signal
import socket

import httpx
import pytest
from cli_runs import FAST_FLAGS, assert_one_error_line, specsched
from process_watch import WatchedCommand


@pytest.mark.parametrize("flags, fragment", [
    (["--port", "70000"], "--port must be in 0..65535"),
    (["--prompt", "hi"], "serve takes no --prompt"),
    (["--workers", "2"], "serve takes no --workers"),
    (["--max-n", "0"], "--max-n must be at least 1"),
    (["--max-tokens-limit", "0"], "--max-tokens-limit must be at least 1"),
    (["--api-key", " "], "--api-key is empty"),
    (["--prestart", "-1"], "--prestart must be in"),
    (["--policy", "nosuch"], "nosuch"),
    (["--host", "no.such.host.invalid"], "--host no.such.host.invalid"),
])
def test_bad_flags_are_one_line_and_status_2(flags, fragment):
    assert_one_error_line(specsched("serve", "--backend", "sim", *flags), 2, fragment)


def test_a_taken_port_is_one_line_before_any_model_loads():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert_one_error_line(specsched("serve", "--backend", "sim", "--port", str(port)), 2, "cannot listen on")


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"])
def test_a_server_answers_and_a_signal_stops_it_leaving_no_process(signum, code):
    with WatchedCommand("serve", *FAST_FLAGS, "--port", "0", "--prestart", "2") as w:
        w.wait_for_line("serving ")
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", "".join(w.out)).group(1)
        w.wait_for_children(3)  # the verifier and two draft workers
        answer = httpx.post(url + "/v1/completions", json={"model": "sim", "prompt": "kaka lomi", "max_tokens": 4},
                            timeout=120).json()
        assert answer["usage"]["completion_tokens"] == 4
        w.signal(signum)
        w.watch_until_exit()
        status, out, err = w.finish()
        assert status == code, err
        assert "completion" in out and "stopping (" in out  # one line per request, then the stop
        assert "\x1b[" not in out and "verifier " not in out  # not a terminal: the log alone, no live view
        assert [line for line in err.splitlines() if line.strip()] == [
            f"specsched: error: interrupted{' (SIGTERM)' if signum == signal.SIGTERM else ''}"]
        assert w.survivors() == []


def test_on_a_terminal_the_server_shows_its_traffic_live_with_its_log_above():
    # TTY_INTERACTIVE=1: Rich treats the pipe as a terminal that redraws in place (what a user's terminal is)
    env = {**os.environ, "TTY_INTERACTIVE": "1", "COLUMNS": "100"}
    with WatchedCommand("serve", *FAST_FLAGS, "--port", "0", "--prestart", "2", env=env) as w:
        w.wait_for_line("serving ")
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", "".join(w.out)).group(1)
        for n in (1, 2):
            httpx.post(url + "/v1/completions", json={"model": "sim", "prompt": "kaka lomi", "max_tokens": 8, "n": n},
                       timeout=120).raise_for_status()
        w.signal(signal.SIGINT)
        w.watch_until_exit()
        status, out, err = w.finish()
    assert status == 130, err
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)
    assert "specsched · serve · 2 jobs, " in shown  # its frames, the last one the traffic the stop found
    rows = [line.split()[:2] for line in shown.splitlines() if re.match(r"(verifier|draft \d+) +[▒░█×·▸ 0-9]", line)]
    assert ["verifier"] in [r[:1] for r in rows] and ["draft", "0"] in rows and ["draft", "1"] in rows
    assert "▸ a job begins on it" in shown
    assert shown.count("completion job") == 2  # the log's lines, above the view
