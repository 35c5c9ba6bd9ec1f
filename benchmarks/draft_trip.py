"""One draft's trip, measured: every file of the package whose code runs while one draft goes from the
worker's drafter to the verifier and its verdict comes back, in the order each is first entered, with the
functions called there (docs/architecture.md quotes it).

The real DraftWorker and the real Verifier in one process (sim backend, one sequence, `sd`), a loopback in
place of the ZeroMQ sockets: the worker's frames are unpacked, admitted (`Verifier.admit`) and verified by
`Verifier.step` at once, and the verdict's frames go back to the worker. The trip is traced with
`sys.setprofile` in the steady state: from the moment the worker has read its first verdict (it takes the
verdict in, drafts the next round, sends it) until it has read the second. Left out: the verifier
process's loop around `step` (scheduler/serve.py: the socket, `_drain_drafts`, the reply) and what the
engine does with the commits afterwards (the record).

    python benchmarks/draft_trip.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specsched.runtime.backends.backend import get_backend
from specsched.runtime.core.config import RunConfig
from specsched.runtime.core.messages import Draft
from specsched.runtime.core.wire import unpack
from specsched.scheduler.jobs import JobState
from specsched.scheduler.verifier import Verifier
from specsched.workers.draft_worker import DraftWorker

PACKAGE = ("runtime", "scheduler", "workers", "policies")


class Quiet:
    """Telemetry that goes nowhere."""

    def send(self, *args, **kwargs) -> None:
        pass

    def events(self, rows) -> None:
        pass


class Trace:
    """Files (relative to the checkout, in the order first entered) -> the functions called in each."""

    def __init__(self) -> None:
        self.on = False
        self.files: dict[str, list[str]] = {}

    def __call__(self, frame, event, arg) -> None:
        if event != "call" or not self.on:
            return
        parts = Path(frame.f_code.co_filename).resolve().parts
        top = next((i for i, p in enumerate(parts) if p in PACKAGE), None)
        if top is None or "site-packages" in parts[:top]:
            return
        names = self.files.setdefault("/".join(parts[top:]), [])
        if frame.f_code.co_name not in names and not frame.f_code.co_name.startswith("<"):
            names.append(frame.f_code.co_name)


class Loopback:
    """The worker's DEALER: a draft is admitted and verified at once; the trace runs from the first verdict
    read to the second."""

    def __init__(self, verifier: Verifier, trace: Trace) -> None:
        self.verifier, self.trace, self.reply, self.read = verifier, trace, None, 0

    def send_multipart(self, frames, copy=True) -> None:
        self.verifier.admit(Draft.from_message(unpack([bytes(f) for f in frames])), b"w0", time.monotonic())
        (reply,) = self.verifier.step(time.monotonic())
        self.reply = reply.verdict.to_frames()

    def poll(self, timeout=None) -> bool:
        return self.reply is not None

    def recv_multipart(self, copy=True) -> list[bytes]:
        frames, self.reply = [bytes(f) for f in self.reply], None
        self.read += 1
        self.trace.on = self.read == 1
        return frames


def trip() -> dict[str, list[str]]:
    config = RunConfig.of(backend="sim", mode="sd", workers=1, sim_draft_ms=0.0, sim_verify_ms=0.0, max_new_tokens=8)
    backend = get_backend(config)
    verifier = Verifier(backend.target(), Quiet())
    verifier.add_job(JobState.from_message({"job": 0, "config": config.to_dict(),
                                            "sequences": [[0, 0, 0, [1, 2, 3]]]}, verifier.target))
    trace = Trace()
    worker = DraftWorker(backend.draft(), 0, Loopback(verifier, trace), Quiet())
    sys.setprofile(trace)
    try:
        worker.run_sequence(config, 0, 0, [1, 2, 3])
    finally:
        sys.setprofile(None)
    return trace.files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="a numbered list, as docs/architecture.md shows it")
    markdown = ap.parse_args().markdown
    files = trip()
    for i, (path, names) in enumerate(files.items(), 1):
        shown = ", ".join(f"`{n}`" if markdown else n for n in names)
        print(f"{i}. `{path}`: {shown}" if markdown else f"{i:3d}  {path:42s} {shown}")
    print(f"\n{len(files)} files, {sum(map(len, files.values()))} functions")


if __name__ == "__main__":
    main()
