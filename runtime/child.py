"""Entry point of every child process: ``python -m specsched.runtime.child`` with a JSON spec on stdin.

Children are fresh interpreters (spawn semantics: nothing inherited, CUDA-safe) and receive their
configuration as JSON, so no pickle is involved even at start-up. The supervisor owns Ctrl-C:
children run in their own session, ignore SIGINT, and die with the supervisor (PR_SET_PDEATHSIG
plus a parent check in every wait loop, which also covers the start-up race).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import asdict

import zmq

from specsched.runtime.config import RunConfig
from specsched.runtime.transport import Telemetry
from specsched.workers.backend import get_backend


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    spec = json.load(sys.stdin)
    ppid = spec["ppid"]

    def parent_alive() -> bool:
        return os.getppid() == ppid

    if not parent_alive():
        return 1
    config = RunConfig.from_dict(spec["config"])
    ctx = zmq.Context()
    telemetry = Telemetry(ctx, spec["endpoints"]["telemetry"])
    role, worker = spec["role"], spec.get("worker", -1)
    code = 0
    try:
        _dispatch(spec, config, ctx, telemetry, parent_alive)
    except Exception as exc:
        traceback.print_exc()  # into this child's log file
        where = "verifier" if role == "verifier" else f"draft worker {worker}"
        telemetry.send("error", {"role": role, "worker": worker,
                                 "message": f"{where}: {_one_line(exc)}"})
        code = 1
    finally:
        telemetry.close()
        ctx.term()
    return code


def _dispatch(spec: dict, config: RunConfig, ctx: zmq.Context, telemetry: Telemetry, parent_alive) -> None:
    backend = get_backend(config)
    endpoint = spec["endpoints"]["verify"]
    sequences = [(int(s), [int(t) for t in p]) for s, p in spec["sequences"]]
    if spec["role"] == "verifier":
        target = backend.target()
        if config.mode in ("ar", "parallel"):
            from specsched.scheduler.target_only import serve_target_only
            counters = serve_target_only(config, target, sequences, telemetry, parent_alive)
        else:
            from specsched.scheduler.verifier import serve
            counters = serve(config, target, ctx, endpoint, telemetry, spec["n_workers"], parent_alive)
        telemetry.send("stats", {"counters": asdict(counters)})
    else:
        from specsched.workers.draft_worker import serve as serve_worker
        serve_worker(config, backend.draft(), spec["worker"], sequences, ctx, endpoint, telemetry,
                     parent_alive)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def die_with_parent() -> None:
    """preexec_fn: ask Linux to SIGKILL this child when the process that spawned it dies."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the parent check in every wait loop still ends the child


if __name__ == "__main__":
    sys.exit(main())
