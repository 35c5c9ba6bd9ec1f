"""The golden record: for fixed seeds on sim, the run's JSON record - what a user reads in it, less what
depends on the clock (times, rates, events, provenance) - equals the one stored in tests/golden/. A
refactoring that changes behaviour changes a token, a counter or a calibration bin, and fails here.
Regenerate after an intended change with `SPECSCHED_GOLDEN=write pytest tests/test_golden_record.py`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import sim_config

from specsched.runtime.engine.engine import Engine

GOLDEN = Path(__file__).parent / "golden" / "records.json"
PROMPTS = ["a b c", "d e f", "g h i"]
CASES = {  # --lockstep: each pick sees every live sequence's draft, so the counters do not depend on timing
    "seed-greedy": dict(),
    "seed-sampled": dict(temperature=0.8),
    "seed-gumbel": dict(temperature=0.8, coupling="gumbel"),
    "seed-batch": dict(max_batch=3),
    "pct-tree": dict(tree="pct", temperature=0.6, coupling="gumbel"),
    "k-config": dict(k_config=[2, 2, 1]),
    "sd": dict(mode="sd"),
    "dsbd": dict(mode="dsbd", beams=2, temperature=0.7, lockstep=False),  # rounds: in step already
    "ar": dict(mode="ar", temperature=0.8, lockstep=False),
}
SHAPED_BY_TIME = {"pct-tree"}  # PCT shapes its trees from measured times: only its text is fixed (coupled)
KEPT_METRICS = ("acceptance_rate", "mean_tokens_per_verify", "tokens", "verifications", "drafted", "accepted",
                "rejected_messages")


def stable(data: dict) -> dict:
    """The record less what depends on the clock."""
    return {"status": data["status"], "error": data["error"], "config": data["config"],
            "sequences": data["sequences"], "counters": data["counters"],
            "metrics": {k: data["metrics"][k] for k in KEPT_METRICS if k in data["metrics"]},
            "calibration": {k: v for k, v in (data.get("calibration") or {}).items() if k != "confidence"},
            "beams": data.get("beams"), "rejected_telemetry": data["rejected_telemetry"]}


def records() -> dict:
    out = {}
    with Engine(sim_config(sim_vocab=48, sim_draft_ms=1, sim_verify_ms=2, workers=3)) as e:
        for name, settings in CASES.items():
            record = e.generate(PROMPTS, **{"max_new_tokens": 40, "seed": 7, "lockstep": True, **settings})
            data = stable(record.to_json())
            out[name] = json.loads(json.dumps({"sequences": data["sequences"]} if name in SHAPED_BY_TIME else data))
    return out


def test_the_record_of_fixed_seed_runs_is_the_golden_one():
    got = records()
    if os.environ.get("SPECSCHED_GOLDEN") == "write":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip(f"wrote {GOLDEN}")
    want = json.loads(GOLDEN.read_text())
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name
