"""Memory under a flood: 1,000,000 junk frames at a live verifier, its resident memory sampled throughout.

    python benchmarks/wire_flood.py [--frames N] [--json PATH]

A sim run (4 sequences × --tokens, long enough to outlast the flood) on one engine; a DEALER with an
identity no worker has sends N junk messages (tests/fuzz_frames.py) as fast as ZeroMQ takes them: its
send blocks at the high-water mark (1,000 messages queued per pipe, ZeroMQ's default) instead of
queueing without bound, so the verifier reads the flood at its own pace. The verifier's RSS is sampled
every 0.2 s; the flooded run's output must equal the same run undisturbed, and its record must count
every junk message as rejected.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path

import psutil
import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_frames import VERIFIER_KINDS, junk  # noqa: E402
from helpers import sim_config, words  # noqa: E402

from specsched.runtime.engine.engine import Engine  # noqa: E402
from specsched.runtime.engine.provenance import provenance  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--tokens", type=int, default=2000, help="per sequence: the run must outlast the flood")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    config = sim_config(sim_vocab=16, sim_draft_ms=5, sim_verify_ms=8)
    prompts = [words(16, (i + 1, i + 3)) for i in range(4)]
    rng = random.Random(1)
    pool = [junk(rng, VERIFIER_KINDS, list(range(4))) for _ in range(4096)]  # re-sent in turn: cheap to send
    with Engine(config) as e:
        undisturbed = e.generate(prompts, max_new_tokens=args.tokens)
        job = e.submit(prompts, max_new_tokens=args.tokens)
        while not job.collected.tokens:
            time.sleep(0.01)
        verifier = psutil.Process(next(p["pid"] for p in e.processes if p["name"] == "verifier"))
        samples, done = [], threading.Event()

        def sample() -> None:
            while not done.wait(0.2):
                samples.append(verifier.memory_info().rss)

        rss0 = verifier.memory_info().rss
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"flood")
        sock.connect(e.endpoints["verify"])
        t0 = time.monotonic()
        for n in range(args.frames):
            sock.send_multipart(pool[n % len(pool)])
        sent_s = time.monotonic() - t0
        sock.close(linger=-1)
        ctx.term()
        flooded_during_run = not job.done()
        record = job.result(timeout=600)
        done.set()
        sampler.join()
    out = {"frames": args.frames, "send_s": sent_s, "frames_per_s": args.frames / sent_s,
           "verifier_rss_before_mib": rss0 / 2**20, "verifier_rss_max_mib": max(samples) / 2**20,
           "verifier_rss_after_mib": samples[-1] / 2**20, "rejected_messages": record.metrics.rejected_messages,
           "flood_ended_before_the_run": flooded_during_run, "status": record.status,
           "output_unchanged": [s.tokens for s in record.sequences] == [s.tokens for s in undisturbed.sequences],
           "provenance": provenance(config, {})}
    print(json.dumps({k: v for k, v in out.items() if k != "provenance"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
