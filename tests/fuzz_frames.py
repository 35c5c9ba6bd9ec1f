"""A seeded mutation fuzzer of specsched's wire: frame sequences that no part of the runtime may accept.

Each junk message starts from a valid message of a kind a peer could send and breaks it one way -
truncated, bytes flipped, wrong protocol version, unknown kind, arrays that do not match their header
(missing, extra, oversized, wrong dtype), a sampled draft whose point-mass mask does not fit its q,
fields of the wrong type or out of range, a round or epoch
that is not the sequence's, a worker it does not come from (forged identity) - or is plain random
bytes. None is a ``hello`` (which any peer may send and gets answered): every message this yields
must be rejected and counted.
"""

from __future__ import annotations

import random

import msgpack
import numpy as np

from specsched.runtime.core.wire import PROTOCOL_VERSION, pack

VERIFIER_KINDS = ("draft", "beam_draft", "resume", "beam_join", "beam_resume", "verdict", "job", "commit")
TELEMETRY_KINDS = ("commit", "events", "idle", "job_ack", "job_done", "job_failed", "beam_want", "beat", "error")
CONTROL_KINDS = ("ready", "bye", "refused", "error", "idle", "job_failed")  # none is a join or a hello


def _valid(kind: str, rng: random.Random, seqs: list[int]) -> list:
    """A well-formed message of `kind` about a real sequence, from a worker that is not its owner."""
    seq, n = rng.choice(seqs), rng.randint(0, 6)
    tokens = np.array([rng.randrange(16) for _ in range(n)], np.int32)
    parents = np.arange(-1, n - 1, dtype=np.int32)
    if kind == "draft":
        return pack("draft", {"seq": seq, "worker": rng.randrange(8), "round": rng.randrange(1000, 2000),
                              "sent_at": 0.0, "draft_s": 0.0, "epoch": rng.randrange(100, 200)},
                    {"tokens": tokens, "parents": parents})
    if kind == "beam_draft":
        return pack("beam_draft", {"seq": seq, "worker": 1, "slot": rng.randrange(4), "round": 999},
                    {"tokens": tokens, "parents": parents, "layer_sizes": np.array([n], np.int32)})
    if kind in ("resume", "beam_join", "beam_resume"):
        return pack(kind, {"seq": seq, "worker": rng.randrange(8), "epoch": 0, "slot": 0, "want": 1})
    if kind == "commit":
        return pack("commit", {"seq": seq, "worker": 0, "done": False, "pid": rng.randrange(10**6, 2 * 10**6)},
                    {"tokens": tokens})
    if kind == "events":
        row = [rng.randrange(10**6, 2 * 10**6), "draft", 0, "draft", 0.0, 1.0, seq, -1]
        return pack("events", {"rows": [row], "pid": row[0]})
    return pack(kind, {"job": rng.randrange(3), "seq": seq, "worker": rng.randrange(8), "slot": 0, "counters": {},
                       "message": "forged", "role": "draft", "pid": rng.randrange(10**6, 2 * 10**6)})


def _misfit_point_masses(rng: random.Random, seqs: list[int]) -> list:
    """A sampled draft whose point-mass mask (runtime/core/draft_q.py) does not fit: longer than its candidates,
    not bool, a byte that is no bool, or more candidates left dense than q has rows."""
    n = rng.randint(1, 6)
    point = rng.choice([np.ones(n + 1, bool), np.ones(n, np.int32), np.full(n, 2, np.uint8).view(bool),
                        np.zeros(n, bool)])
    return pack("draft", {"seq": rng.choice(seqs), "worker": rng.randrange(8), "round": 0, "epoch": 0},
                {"tokens": np.zeros(n, np.int32), "parents": np.arange(-1, n - 1, dtype=np.int32),
                 "q": np.zeros((0, 16), np.float32), "point": point})


def junk(rng: random.Random, kinds: tuple[str, ...], seqs: list[int]) -> list[bytes]:
    """One message that must be rejected (see the module's docstring)."""
    frames = [bytes(f) for f in _valid(rng.choice(kinds), rng, seqs)]
    how = rng.randrange(11)
    header = msgpack.unpackb(frames[0], raw=False)
    if how == 0:                                   # truncated
        i = rng.randrange(len(frames))
        frames[i] = frames[i][:rng.randrange(len(frames[i]))] if frames[i] else b"\x00"
        if i > 0 and not frames[i]:
            frames[i] = b"\x01\x02\x03"
        if i == 0:
            frames = [frames[0]]
    elif how == 1:                                 # bytes flipped in the header, until it no longer parses
        b = bytearray(frames[0])
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        frames[0] = bytes(b) if bytes(b) != frames[0] else b"\xc1"
        header = None
    elif how == 2:                                 # another protocol version
        header["v"] = PROTOCOL_VERSION + rng.randint(1, 100)
    elif how == 3:                                 # an unknown kind
        header["kind"] = rng.choice(["drafts", "", "hello!", "x" * 300, 7])
    elif how == 4:                                 # an array frame too long for its header (oversized)
        frames.append(bytes(rng.randrange(1, 1 << 16)))
        header["arrays"] = header.get("arrays", []) + [["tokens", "<i4", [1]]]
    elif how == 5:                                 # an unsupported dtype, or a shape that does not fit
        header["arrays"] = [[a[0], rng.choice(["|O", "<U4", "<f2"]), a[2]] for a in header.get("arrays", [])] \
            or [["tokens", "<i4", [2**62, 4]]]
        if len(frames) == 1:
            frames.append(b"")
    elif how == 6:                                 # fields of the wrong type or out of range
        for key in [k for k in header if k not in ("v", "kind", "arrays")]:
            header[key] = rng.choice([None, "x", [], {"a": 1}, -1, 2**63, float("inf"), float("nan")])
        if len(header) <= 3:
            header["kind"] = "no such kind"
    elif how == 7:                                 # frames missing
        frames = frames[:1]
        header["arrays"] = header.get("arrays", []) + [["q", "<f4", [3, 3]]]
    elif how == 8:                                 # random bytes
        return [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))) for _ in range(rng.randint(1, 3))]
    elif how == 10:                                # point masses that do not fit the draft's q
        return [bytes(f) for f in _misfit_point_masses(rng, seqs)]
    # how == 9: the valid message as it is: a round, epoch, worker or process that is not the sequence's
    if header is not None:
        frames[0] = msgpack.packb(header, use_bin_type=True)
    return frames
