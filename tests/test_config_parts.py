"""A RunConfig is the run's own settings and seven parts, each checking itself; outside the code every setting
keeps its flag's flat name (records, workloads, `Engine` keywords, `RunConfig.of`)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specsched.runtime.core.config import PARTS, SETTINGS, RunConfig, known_settings
from specsched.runtime.core.config_parts import BeamShape, BranchLanes, DraftShape, Network, SimSettings, Supervision
from specsched.runtime.core.kinds import ConfigError
from specsched.runtime.core.sampling import SamplingParams

GOLDEN = Path(__file__).parent / "golden" / "records.json"


def test_flat_settings_land_in_their_parts_and_come_back_flat():
    c = RunConfig.of(backend="sim", sim_verify_ms=3.0, temperature=0.7, top_p=0.9, beams=2, k_config=[2, 1],
                     branches=0, heartbeat_timeout_s=4.0, transport="tcp")
    assert c.sim == SimSettings(verify_ms=3.0) and c.beam.width == 2 and c.shape.widths == (2, 1)
    assert c.sampling == SamplingParams(0.7, top_p=0.9) and c.lanes.count == 0
    assert c.supervision.heartbeat_timeout_s == 4.0 and c.network.transport == "tcp"
    flat = c.to_dict()
    assert flat["sim_verify_ms"] == 3.0 and flat["beams"] == 2 and flat["top_p"] == 0.9
    assert RunConfig.from_dict(flat).replace(lookup=None) == c   # to_dict writes the lookup the drafters used
    assert c.replace(sim_draft_ms=0.0).sim == SimSettings(draft_ms=0.0, verify_ms=3.0)   # the rest kept
    assert c.sim.draft_ms == 2.0                                                       # c itself unchanged


def test_a_record_keeps_the_flat_names_it_always_had():
    """Records written before the parts existed are read as they are, and new ones have the same keys."""
    old = json.loads(GOLDEN.read_text())
    config = next(iter(old.values()))["config"]
    assert set(config) == set(RunConfig().to_dict()) == known_settings()
    assert RunConfig.from_dict(config).to_dict() == config


def test_every_part_setting_has_one_flat_name_and_one_home():
    leaves = [(part, leaf) for part, leaf in SETTINGS.values()]
    assert len(leaves) == len(set(leaves))                                       # no two names for one field
    for part, cls in PARTS.items():
        names = {f.name for f in dataclasses.fields(cls)}
        assert {leaf for p, leaf in leaves if p == part} == names, part         # every field reachable


@pytest.mark.parametrize("make, message", [
    (lambda: SimSettings(vocab=2), "--sim-vocab must be in 4..262,144, got 2"),
    (lambda: Supervision(verdict_timeout_s=0), "--verdict-timeout must be in (0, 3600] seconds, got 0"),
    (lambda: DraftShape(tree="pct", k_config=[2]), "--tree pct shapes the tree itself: drop --k-config"),
    (lambda: BranchLanes(length=3), "--branch-length must be in 4..64, got 3"),
    (lambda: Network(listen="0.0.0.0:5555"), "--listen needs --transport tcp"),
    (lambda: BeamShape(width=2, min_width=3), "--min-beams must be in 1..--beams, got 3"),
    (lambda: SamplingParams(float("nan")), "--temperature must be a finite number, got nan"),
    (lambda: RunConfig.of(sim_vocab="64"), "sim_vocab must be an int, got '64' (str)"),
    (lambda: RunConfig.of(beams=True), "beams must be an int, got True (bool)"),
    (lambda: RunConfig.of(temperature=0, beam_threshold=0.5), "--beam-threshold (a dynamic width) needs sampling"),
    (lambda: RunConfig.of(mode="ar", drafter="branches"), "--drafter branches needs draft workers"),
    (lambda: RunConfig.of(sim_vocabulary=64), "unknown setting 'sim_vocabulary'"),
    (lambda: RunConfig(sim={"vocab": 64}), "sim must be a SimSettings, got {'vocab': 64} (dict)"),
])
def test_each_part_refuses_its_own_bad_values_in_one_line_naming_the_flag(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert message in str(err.value) and "\n" not in str(err.value)


# One non-default value for every flag of a part (sim's on sim, Self-Draft's with its drafter): each must reach
# the config's flat form under its own name.
PART_FLAGS = {
    "--k": ("k", 3), "--no-replacement": ("replacement", False), "--lookup": ("lookup", 3),
    "--min-confidence": ("min_confidence", 0.25), "--branches": ("branches", 2),
    "--branch-length": ("branch_length", 5),
    "--corpus-cache": ("corpus_cache", "off"), "--branch-processes": ("branch_processes", True),
    "--sim-vocab": ("sim_vocab", 80), "--sim-agreement": ("sim_agreement", 0.5),
    "--sim-draft-ms": ("sim_draft_ms", 1.5),
    "--sim-verify-ms": ("sim_verify_ms", 7.0), "--max-restarts": ("max_restarts", 2),
    "--restart-period": ("restart_period_s", 6.0), "--heartbeat-timeout": ("heartbeat_timeout_s", 9.0),
    "--policy-timeout": ("policy_timeout_s", 8.0), "--verdict-timeout": ("verdict_timeout_s", 7.0),
    "--transport": ("transport", "tcp"), "--temperature": ("temperature", 0.5), "--top-k": ("top_k", 9),
    "--top-p": ("top_p", 0.8), "--coupling": ("coupling", "gumbel"), "--beams": ("beams", 3),
    "--draft-beams": ("draft_beams", 5), "--gamma": ("gamma", 2), "--beam-threshold": ("beam_threshold", 0.3),
    "--min-beams": ("min_beams", 2), "--beam-input": ("beam_input", "best"),
}


def test_every_flag_of_a_part_reaches_the_config():
    from specsched.runtime.apps.cli import build_parser
    from specsched.runtime.apps.run.flag_config import config_from_args

    argv = ["run", "--backend", "sim", "--drafter", "both", "--prompt", "a"]
    for flag, (_, value) in PART_FLAGS.items():
        argv += [flag] if isinstance(value, bool) else [flag, str(value)]
    flat = config_from_args(build_parser().parse_args(argv)).to_dict()
    assert {name: flat[name] for name, _ in PART_FLAGS.values()} == dict(PART_FLAGS.values())
    pct = build_parser().parse_args(["run", "--backend", "sim", "--tree", "pct", "--pct-top-k", "3", "--pct-depth", "4",
                                     "--pct-floor", "0.1"])
    assert config_from_args(pct).shape == DraftShape(tree="pct", pct_top_k=3, pct_depth=4, pct_floor=0.1)
