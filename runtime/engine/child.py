"""What every child process runs: ``serve(spec)``, called by the zygote right after it forked the child.

The spec is the engine's configuration as JSON (no pickle, even at start-up); the zygote (zygote_main.py)
is a fresh interpreter, so nothing of the engine's threads or sockets is inherited. Each loads its model once
and then serves the engine until told to stop: the verifier takes jobs, a draft worker assignments.
The engine owns Ctrl-C: children run in their own session, ignore SIGINT, and die with the engine
(PR_SET_PDEATHSIG plus a parent check in every wait loop, which also covers the start-up race).
``ps`` and ``top`` show each one by role (``specsched: verifier``, ``specsched: draft 3 (job 2)``).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback

import zmq

from ...scheduler.serve import serve as serve_verifier
from ...workers.draft_worker import DraftWorker
from ..backends.backend import get_backend
from ..core.config import DrafterKind, RunConfig
from ..core.gatekeeper import Gatekeeper
from ..core.process import die_with_parent, set_title
from ..core.security import Keys
from ..core.transport import Endpoints, Telemetry, connect_control, end_context, process_name
from .heartbeat import Heartbeat


def serve(spec: dict) -> int:
    die_with_parent()  # with the zygote, which dies with the engine
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ppid = spec["ppid"]

    def parent_alive() -> bool:
        return os.getppid() == ppid

    if not parent_alive():
        return 1
    role, worker = spec["role"], int(spec.get("worker", -1))
    set_title("specsched: verifier" if role == "verifier" else f"specsched: draft {worker}")
    return run(spec, parent_alive)


def run(spec: dict, parent_alive, model=None) -> int:
    """A child's life once it knows its place: connect, serve until told to stop, say why if it fails.
    Also what a worker on another host runs once it has joined (remote.py), with the draft `model` it
    loaded to join."""
    role, worker = spec["role"], int(spec.get("worker", -1))
    config = RunConfig.from_dict(spec["config"])
    keys = Keys.from_dict(spec["keys"]) if spec.get("keys") else None
    endpoints = Endpoints(**spec["endpoints"])
    ctx = zmq.Context()
    telemetry = Telemetry(ctx, endpoints.telemetry, keys)
    control = connect_control(ctx, endpoints.control, process_name(role, worker), keys)
    heartbeat = Heartbeat(ctx, endpoints.telemetry, role, worker, keys)  # heartbeat.py
    # the verifier's run-queue socket is a PLAIN (ipc) or CURVE (tcp) server: its own gatekeeper admits the run
    gate = Gatekeeper(ctx, keys, report_to=endpoints.telemetry) if role == "verifier" and keys else None
    code = 0
    try:
        _dispatch(spec, config, ctx, control, telemetry, parent_alive, keys, gate, model)
    except Exception as exc:
        traceback.print_exc()  # into this child's log file
        where = "verifier" if role == "verifier" else f"draft worker {worker}"
        telemetry.send("error", {"role": role, "worker": worker, "message": f"{where}: {error_line(exc)}"})
        code = 1
    finally:
        if spec.get("remote"):  # the engine did not fork it, so no zygote tells the engine it has gone
            telemetry.send("bye", {"code": code})
        heartbeat.stop()
        if gate is not None:
            gate.stop()
        control.close()
        telemetry.close()
        end_context(ctx)
    return code


def _dispatch(spec: dict, config: RunConfig, ctx: zmq.Context, control: zmq.Socket, telemetry: Telemetry,
              parent_alive, keys: Keys | None, gate: Gatekeeper | None, model) -> None:
    backend = get_backend(config)
    endpoints = Endpoints(**spec["endpoints"])
    if spec["role"] == "verifier":
        target = backend.target()
        target.warm_up()  # before ready: a job's first verification then costs what the others do
        serve_verifier(target, ctx, endpoints.bind(endpoints.verify), control, telemetry, parent_alive,
              set_threads=target.set_threads, keys=keys, gate=gate, placed=placed(target, config))
    else:
        worker = int(spec["worker"])
        # an engine of Self-Draft jobs (--drafter branches) drafts without a model: its workers load one only
        # if a later job asks for it (DraftWorker.model); the others load theirs before they say ready
        if model is None and config.drafter != DrafterKind.BRANCHES:
            model = backend.draft()
        if model is not None:
            model.warm_up()  # before ready: a job's first draft then costs what the others do
        draft = DraftWorker.connect(model, worker, ctx, endpoints.verify, telemetry, parent_alive, keys,
                                    load=backend.draft, vocab=backend.vocabulary("draft")["size"])
        draft.placed = placed(model, config)
        draft.retitle = lambda job: set_title(f"specsched: draft {worker} " + ("(parked)" if job is None
                                                                               else f"(job {job})"))
        draft.serve(control)


def placed(model, config: RunConfig) -> dict:
    """What a child tells the engine with ``ready``: the device its model is on (where it will be, if not
    loaded yet), and the --device it was given (so a record shows that the flag reached every process)."""
    return {"device": model.device if model is not None else config.model_device, "asked": config.device}


def error_line(exc: BaseException) -> str:
    """The exception as one line; a GPU that ran out of memory is said so plainly, with torch's numbers."""
    text = " ".join(str(exc).split())
    if _out_of_gpu_memory(exc):
        return f"out of GPU memory ({text})" if text else "out of GPU memory"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _out_of_gpu_memory(exc: BaseException) -> bool:
    torch = sys.modules.get("torch")  # a sim child never imported it, and cannot have run out of GPU memory
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return oom is not None and isinstance(exc, oom)
