"""Branch lanes as processes (`--branch-processes`): one OS process per lane, the design card's "one per
branch".

The sequence's draft worker starts N lane processes (`python -m specsched.workers.lane_process ENDPOINT`)
and talks to each over a ZeroMQ PAIR socket in a private directory. Each process owns its lane's window:
per verdict it receives the target's predictions after its lane's tokens (``lane_step``), turns them into
context-cache entries and moves its window on (branch_lanes.py, the same rule), and answers with its new
window and the entries (``lane_state``). `LaneProcesses` is the worker's side, with the interface of
`Lanes`, so a sequence's branches run either way. A lane process dies with its worker (PR_SET_PDEATHSIG,
and a parent check in its wait loop) and exits on ``stop``.

Each PAIR is a PLAIN server with a gatekeeper, as the engine's sockets are (runtime/core/security.py): the
worker makes a secret and writes its lanes' password to each lane's stdin, so no other process can take a
lane's place on its socket.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import zmq

from ..runtime.core.gatekeeper import Gatekeeper
from ..runtime.core.process import die_with_parent, set_title
from ..runtime.core.security import Keys, secure_client, secure_server
from ..runtime.core.transport import private_dir
from ..runtime.core.wire import pack, unpack
from .branch_lanes import GRAM, Lanes

STOP_WAIT_S = 2.0
LANE_USER = "lane"  # the name lanes speak under to their worker's sockets
LANE_TITLE = "specsched: branch lane "  # + the lane's index in its worker: what `ps` shows


class LaneProcesses:
    """N lane processes behind `Lanes`' interface: windows, size, nodes(offset), update(predictions)."""

    def __init__(self, prompt: list[int], n: int, length: int) -> None:
        self.windows = Lanes(prompt, n, length).windows  # the same initialisation as in-process lanes
        self.length = length
        self.ctx = zmq.Context()
        self.dir = private_dir("specsched-lanes-", f"lane-{n}")  # 0700: only this user reaches the sockets
        self.socks, self.procs = [], []
        keys = Keys.for_ipc()  # and only the lanes started here, which read the password from their stdin
        self.gate = Gatekeeper(self.ctx, keys)
        try:  # every lane starts at once; then each gets its window
            for i in range(len(self.windows)):
                sock = self.ctx.socket(zmq.PAIR)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.SNDTIMEO, 100)  # a PAIR send to a lane that is gone would block for ever
                secure_server(sock, keys)
                endpoint = f"ipc://{self.dir}/lane-{i}"
                sock.bind(endpoint)
                self.socks.append(sock)
                proc = subprocess.Popen([sys.executable, "-m", "specsched.workers.lane_process", endpoint,
                                         str(os.getpid())], stdin=subprocess.PIPE)
                proc.stdin.write(keys.as_user(LANE_USER).password.encode() + b"\n")
                proc.stdin.close()
                self.procs.append(proc)
            self.gate.start()
            for i, window in enumerate(self.windows):
                self._send(i, pack("lane_step", {"length": length}, {"window": np.asarray(window, np.int32)}))
        except BaseException:
            self.close()
            raise

    @property
    def size(self) -> int:
        return sum(len(w) for w in self.windows)

    def nodes(self, offset: int) -> tuple[list[int], list[int]]:
        return Lanes.chains(self.windows, offset)

    def update(self, predictions: list[int]) -> list[tuple[int, tuple[int, ...]]]:
        if len(predictions) != self.size:
            raise ValueError(f"{len(predictions)} lane predictions for {self.size} lane tokens")
        at = 0
        for i, w in enumerate(self.windows):  # every lane works at once, then each answer is read
            self._send(i, pack("lane_step", {}, {"predictions": np.asarray(predictions[at:at + len(w)], np.int32)}))
            at += len(w)
        entries = []
        for i, sock in enumerate(self.socks):
            while not sock.poll(100):  # a lane that died would leave the sequence waiting for ever: fail instead
                self._check(i)
            state = unpack(sock.recv_multipart())
            self.windows[i] = state.arrays["window"].tolist()
            keys, grams = state.arrays["keys"].tolist(), state.arrays["grams"].tolist()
            entries += [(int(k), tuple(g)) for k, g in zip(keys, grams)]
        return entries

    def _send(self, i: int, frames: list) -> None:
        while True:
            try:
                return self.socks[i].send_multipart(frames)
            except zmq.Again:
                self._check(i)

    def _check(self, i: int) -> None:
        if self.procs[i].poll() is not None:
            raise RuntimeError(f"branch lane process {i} exited with status {self.procs[i].returncode}")

    def close(self) -> None:
        for sock in self.socks:
            try:
                sock.send_multipart(pack("stop"), zmq.NOBLOCK)
            except zmq.ZMQError:  # that lane is gone already
                pass
        for proc in self.procs:
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.gate.stop()
        self.ctx.destroy(linger=0)
        shutil.rmtree(self.dir, ignore_errors=True)


def main(endpoint: str, parent: int) -> int:
    """A lane process: its window from the first message, then a lane_state for each lane_step, until stop."""
    die_with_parent()  # with the worker
    set_title(f"{LANE_TITLE}{endpoint.rpartition('lane-')[2]}")  # ps, and the live view's process lines
    if os.getppid() != parent:  # the worker died before prctl took effect: nobody is left to serve
        return 0
    password = sys.stdin.readline().strip()  # the worker's, for its lanes alone (never argv: ps shows that)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PAIR)
    sock.setsockopt(zmq.LINGER, 0)
    secure_client(sock, Keys("", "", "", password=password, user=LANE_USER))
    sock.connect(endpoint)
    lane: Lanes | None = None
    try:
        while os.getppid() == parent:
            if not sock.poll(100):
                continue
            msg = unpack(sock.recv_multipart())
            if msg.kind == "stop":
                return 0
            if lane is None:
                lane = Lanes.from_windows([msg.arrays["window"].tolist()], int(msg.fields["length"]))
                continue
            entries = lane.update(msg.arrays["predictions"].tolist())
            keys = np.asarray([k for k, _ in entries], np.int32)
            grams = np.asarray([g for _, g in entries], np.int32).reshape(len(entries), GRAM)
            sock.send_multipart(pack("lane_state", {}, {"window": np.asarray(lane.windows[0], np.int32),
                                                        "keys": keys, "grams": grams}))
        return 0
    finally:
        ctx.destroy(linger=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
