"""The wire format: one msgpack header frame plus one raw frame per array. No pickle anywhere.

A message is ``[header, array_0, array_1, ...]``. The header is a msgpack map::

    {"v": PROTOCOL_VERSION, "kind": "draft", ...fields, "arrays": [[name, dtype, shape], ...]}

and frame ``i + 1`` holds the bytes of array ``i`` (C order). Arrays are sent zero-copy
(``copy=False``) and received as ``np.frombuffer`` views over the ZeroMQ frame.

``unpack`` checks everything a peer could get wrong - version, kind, dtype, shape against the byte
count - and raises ``ProtocolError``; receivers count those and carry on, never crash.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

PROTOCOL_VERSION = 1

# Every message kind the runtime speaks. Unknown kinds are rejected.
KINDS = frozenset({
    # the run queue (verifier's ROUTER <-> workers' DEALERs)
    "draft",     # worker -> verifier: a draft to verify (runtime/core/messages.py)
    "verdict",   # verifier -> worker: what was accepted
    "hello",     # worker -> verifier: I am connected (each second until welcomed, before the worker says ready)
    "welcome",   # verifier -> worker: your connection works; drafts will reach the run queue
    "beam_draft",  # beam worker -> verifier: its slot's tree of a dsbd forest (runtime/core/beam_messages.py)
    "beam_task",   # verifier -> beam worker: the beam it drafts from next, or leave (done, or past the width)
    "beam_join",   # beam worker -> verifier: I take this vacant slot (the engine sent me); its task comes back
    "beam_resume",  # restarted beam worker -> verifier: where does my slot stand? its task comes back
    "resume",    # restarted worker -> verifier: where does my sequence stand? (runtime/core/resume.py)
    "resumed",   # verifier -> restarted worker: its verified context, round, done
    # control (engine's ROUTER -> each child's DEALER)
    "job",       # engine -> verifier: a job's settings and sequences (with their owners)
    "cancel",    # engine -> verifier: forget a job
    "assign",    # engine -> worker: draft these sequences of a job
    "stop",      # engine -> child: exit
    "resync",    # engine -> worker: the verifier was restarted; resume your sequences under this epoch
    # telemetry (every child's PUSH -> engine's PULL)
    "ready",     # child -> engine: my model is loaded, I take work
    "job_ack",   # verifier -> engine: the job is known; its drafts may come
    "idle",      # worker -> engine: my assignment is done
    "job_done",  # verifier -> engine: every sequence of a job is done, with the job's counters
    "job_failed",  # verifier -> engine: a job ended early (its policy failed), one line, and its counters so far
    "events",    # any -> engine: timeline events
    "commit",    # verifier -> engine: tokens now final for a sequence (a beam sequence's: and its beams, beam_state.py)
    "beam_want",  # verifier -> engine: a dsbd sequence widened; send a worker for this slot
    "beat",      # any child -> engine: still here (runtime/engine/heartbeat.py)
    "error",     # any -> engine: a fatal error, one line
    "refused",   # verifier -> engine: handshakes its gatekeeper refused so far (runtime/core/gatekeeper.py)
    # a worker on another host joining (runtime/engine/joining.py), over the engine's control socket
    "join",      # worker -> engine: I would serve; what do you run?
    "config",    # engine -> worker: the engine's settings and its target's vocabulary
    "refused_worker",  # engine -> worker: not admitted, and why (one line)
    "bye",       # remote worker -> engine: I leave, with my exit status
    # a draft worker and its lane processes (--branch-processes, workers/lane_process.py), over PAIR sockets
    "lane_step",   # worker -> lane: its window (first), then the target's predictions after its lane tokens
    "lane_state",  # lane -> worker: its new window and the context-cache entries it made
})

# Only plain numeric dtypes may travel: nothing that needs an object constructor.
DTYPES = frozenset({"<i4", "<i8", "<f2", "<f4", "<f8", "|u1", "|b1"})


class ProtocolError(ValueError):
    """A frame sequence that is not a valid specsched message."""


# What reading a hostile message's contents can raise (a field of the wrong type, an integer out of range,
# arrays that do not fit): a receiver counts any of these as a refused message, never fails on it.
REFUSED = (ProtocolError, KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError)


@dataclass(slots=True)
class Message:
    kind: str
    fields: dict[str, Any] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def pack(kind: str, fields: dict[str, Any] | None = None,
         arrays: dict[str, np.ndarray] | None = None) -> list[Any]:
    """Build the frames of one message (header first)."""
    if kind not in KINDS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    arrays = arrays or {}
    frames: list[Any] = []
    layout = []
    for name, array in arrays.items():
        array = np.ascontiguousarray(array)
        if array.dtype.str not in DTYPES:
            raise ProtocolError(f"array {name!r} has unsupported dtype {array.dtype}")
        layout.append([name, array.dtype.str, list(array.shape)])
        frames.append(memoryview(array).cast("B") if array.size else b"")
    header = {"v": PROTOCOL_VERSION, "kind": kind, **(fields or {}), "arrays": layout}
    return [msgpack.packb(header, use_bin_type=True), *frames]


def unpack(frames: list[Any]) -> Message:
    """Parse and validate the frames of one message. Raises ProtocolError."""
    if not frames:
        raise ProtocolError("empty message")
    try:
        header = msgpack.unpackb(_buffer(frames[0]), raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for garbage
        raise ProtocolError(f"header is not msgpack: {type(exc).__name__}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a map")
    if header.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {header.get('v')!r}, expected {PROTOCOL_VERSION}")
    kind = header.pop("kind", None)
    if kind not in KINDS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    layout = header.pop("arrays", [])
    header.pop("v")
    if not isinstance(layout, list) or len(layout) != len(frames) - 1:
        raise ProtocolError(f"{kind}: header announces {len(layout) if isinstance(layout, list) else '?'}"
                            f" arrays but {len(frames) - 1} frames follow")
    arrays = {}
    for entry, frame in zip(layout, frames[1:]):
        arrays.update([_array(kind, entry, frame)])
    return Message(kind, header, arrays)


def _array(kind: str, entry: Any, frame: Any) -> tuple[str, np.ndarray]:
    if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)):
        raise ProtocolError(f"{kind}: malformed array entry {entry!r}")
    name, dtype, shape = entry
    if dtype not in DTYPES:
        raise ProtocolError(f"{kind}: array {name!r} has unsupported dtype {dtype!r}")
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise ProtocolError(f"{kind}: array {name!r} has malformed shape {shape!r}")
    buf = _buffer(frame)
    # Python integers: numpy's int64 product wraps around ([2**32, 2**32] -> 0 bytes, then reshape failed)
    expected = math.prod(shape) * np.dtype(dtype).itemsize
    if len(buf) != expected:
        raise ProtocolError(f"{kind}: array {name!r} has {len(buf)} bytes, shape needs {expected}")
    return name, np.frombuffer(buf, dtype=dtype).reshape(shape)


def _buffer(frame: Any) -> memoryview | bytes:
    # zmq.Frame (copy=False) exposes .buffer; bytes and memoryview are used as they are.
    return getattr(frame, "buffer", frame)
