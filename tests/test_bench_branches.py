"""`specsched bench` with Self-Draft: the branches arms, the N:L sweep and its plot (Self-Draft's Fig. 5/6).

One tiny sweep runs end to end on the sim backend (module fixture); the plot's geometry is checked on
synthetic sweep points whose values are known.
"""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET

import pytest
from cli_runs import bench_args
from rich.console import Console

from specsched.runtime.apps.bench import plot, runner
from specsched.runtime.apps.bench.arms import BRANCH_ARMS, RUNTIME_ARMS, runtime_config, shared
from specsched.runtime.apps.bench.bench_commands import settings_from_args
from specsched.runtime.apps.bench.measure import ArmResult, Sample, compare_with_baseline
from specsched.runtime.apps.bench.runner import run_bench
from specsched.runtime.apps.bench.sweep import BranchShape, SweepPoint, label, parse_values, point_config
from specsched.runtime.apps.bench.tables import print_report
from specsched.runtime.apps.cli import handler
from specsched.runtime.core.config import ConfigError, RunConfig

SVG = "{http://www.w3.org/2000/svg}"
VALUES = "1,2:4,6"   # N in {1, 2} x L in {4, 6}: two lines of two points each


def test_branch_arms_set_their_drafter_and_every_other_arm_drafts_with_the_model():
    base = RunConfig.of(backend="sim", workers=3, drafter="branches", branches=4, branch_length=8)
    assert BRANCH_ARMS == ("branches", "branches-commit", "branches-draft", "branches-procs")
    expected = {"branches": ("branches", "fcfs"), "branches-commit": ("branches", "commit-first"),
                "branches-draft": ("both", "fcfs"), "branches-procs": ("branches", "fcfs"),
                "prompt-lookup": ("branches", "fcfs")}
    for name in RUNTIME_ARMS:
        config = runtime_config(name, base)  # "ar" with the base's drafter would be refused: no draft workers
        assert (config.drafter, config.policy) == expected.get(name, ("model", config.policy)), name
        assert config.lanes.processes == (name == "branches-procs"), name
        assert (config.lanes.count, config.lanes.length) == ((0 if name == "prompt-lookup" else 4), 8), name
    assert runtime_config("branches", base).mode == "seed"
    assert "drafter" not in shared(base) and shared(base)["branch_length"] == 8


def test_branches_values_are_n_l_pairs_or_their_grid():
    assert parse_values("branches", "2:4; 4:6") == [(2, 4), (4, 6)]
    assert parse_values("branches", "1,2:4,6") == [(1, 4), (1, 6), (2, 4), (2, 6)]
    assert parse_values("branches", " 0:4 ;") == [(0, 4)]                  # N = 0: the caches only
    assert [label(v) for v in parse_values("branches", None)] == ["2:4", "2:6", "2:8", "4:4", "4:6", "4:8"]
    assert label((2, 2, 1)) == "2,2,1"                                     # tree shapes keep their commas
    config = point_config(RunConfig(backend="sim", workers=3), "branches", BranchShape(4, 8), n_prompts=None,
                          task=None)
    assert (config.lanes.count, config.lanes.length, config.n_sequences) == (4, 8, 3)


@pytest.mark.parametrize("values, message", [
    ("2:3", "bad value 2:3; give N:L pairs"),         # L below 4: a lane yields no 4-gram
    ("65:6", "bad value 65:6"),
    ("x", "cannot read 'x'"),
    ("2:4, 4:6", "cannot read '2:4, 4:6'"),           # pairs are separated by ';'
    ("2", "cannot read '2'"),
    (";", "no values"),
])
def test_bad_branches_values_are_one_config_error(values, message):
    with pytest.raises(ConfigError, match=message) as error:
        settings_from_args(bench_args("--sweep", "branches", "--values", values))
    assert "\n" not in str(error.value)


def test_the_branches_sweep_measures_ar_and_self_draft_unless_told_otherwise():
    assert settings_from_args(bench_args("--smoke", "--sweep", "branches")).arms == ["ar", "branches"]
    assert settings_from_args(bench_args("--smoke", "--sweep", "k")).arms == ["ar", "sd", "seed-fcfs"]
    chosen = settings_from_args(bench_args("--smoke", "--sweep", "branches", "--arms", "branches-draft,branches"))
    assert chosen.arms == ["ar", "branches", "branches-draft"]
    fixed = settings_from_args(bench_args("--smoke", "--branches", "3", "--branch-length", "5")).base
    assert (fixed.lanes.count, fixed.lanes.length) == (3, 5)


@pytest.fixture(scope="module")
def sweep():
    return run_bench(settings_from_args(bench_args("--smoke", "--warmup", "0", "--sweep", "branches",
                                                   "--values", VALUES)))


def test_a_sim_sweep_over_n_and_l_reports_tokens_per_forward(sweep):
    assert sweep.sweep_axis == "branches" and [label(p.value) for p in sweep.sweep] == ["1:4", "1:6", "2:4", "2:6"]
    for point in sweep.sweep:
        assert (point.config.lanes.count, point.config.lanes.length) == point.value
        ar, branches = point.arms
        assert (ar.name, branches.name) == ("ar", "branches") and ar.median("mean_tokens_per_verify") == 1
        assert branches.outputs_match_ar is True and branches.median("mean_tokens_per_verify") >= 1
    out = io.StringIO()
    print_report(sweep, Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert "sweep over branches" in text and "tok/ver" in text
    assert [line.split()[:2] for line in text.splitlines() if line.startswith("2:6")] == [["2:6", "ar"],
                                                                                          ["2:6", "branches"]]
    data = sweep.to_json()["sweep"]
    assert [p["value"] for p in data["points"]] == [[1, 4], [1, 6], [2, 4], [2, 6]]
    assert [(p["config"]["branches"], p["config"]["branch_length"]) for p in data["points"]] == [
        (1, 4), (1, 6), (2, 4), (2, 6)]


def test_the_sweep_command_writes_one_line_per_n_in_both_panels(sweep, monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "run_bench", lambda *a, **k: sweep)
    args = bench_args("--smoke", "--sweep", "branches", "--values", VALUES, "--plots", str(tmp_path),
                      "--json", str(tmp_path / "b.json"))
    out = io.StringIO()
    assert handler(args.func)(args, Console(file=out, width=120, color_system=None)) == 0
    assert f"wrote {tmp_path / 'branches_sweep.svg'}" in out.getvalue()
    assert json.loads((tmp_path / "b.json").read_text())["sweep"]["axis"] == "branches"
    root = ET.fromstring((tmp_path / "branches_sweep.svg").read_text())
    panels = root.findall(f"{SVG}g")
    assert len(panels) == 2
    for panel, metric in zip(panels, ("mean_tokens_per_verify", "speedup_vs_ar")):
        assert len(panel.findall(f"{SVG}polyline")) == 2                    # N = 1 and N = 2
        texts = [t.text for t in panel.findall(f"{SVG}text")]
        assert "N = 1" in texts and "N = 2" in texts and "branch length L (tokens per lane)" in texts
        titles = [t.text for t in panel.iter(f"{SVG}title")]
        for point in sweep.sweep:
            arm = point.arm("branches")
            y = arm.median(metric) if metric != "speedup_vs_ar" else arm.speedup_vs_ar
            assert f"N = {point.value.lanes}: ({point.value.length}, {plot._num(y)})" in titles


def point(lanes: int, length: int, **per_forward: float) -> SweepPoint:
    """A sweep point: ar at 10 tokens/s, each named arm at 10 x its tokens per forward."""
    arms = [ArmResult("ar", "", [Sample(10.0, 1.0, [], mean_tokens_per_verify=1.0)])]
    arms += [ArmResult(name, "", [Sample(10.0 * t, 1.0, [], mean_tokens_per_verify=t)])
             for name, t in per_forward.items()]
    compare_with_baseline(arms, greedy=False)
    return SweepPoint(BranchShape(lanes, length), RunConfig(backend="sim"), arms)


def test_the_branches_plot_draws_l_across_and_a_line_per_n():
    points = [point(2, 4, branches=1.2), point(2, 8, branches=1.6), point(4, 4, branches=1.5),
              point(4, 8, branches=2.0)]
    root = ET.fromstring(plot.branches_sweep(points))
    assert root.get("width") == str(2 * plot.WIDTH)
    tokens, speedup = root.findall(f"{SVG}g")
    assert [t.text for t in tokens.iter(f"{SVG}title")] == ["N = 2: (4, 1.2)", "N = 2: (8, 1.6)",
                                                            "N = 4: (4, 1.5)", "N = 4: (8, 2)"]
    assert [t.text for t in speedup.iter(f"{SVG}title")] == ["N = 2: (4, 1.2)", "N = 2: (8, 1.6)",
                                                             "N = 4: (4, 1.5)", "N = 4: (8, 2)"]
    circles = tokens.findall(f"{SVG}circle")
    xs, ys = [float(c.get("cx")) for c in circles], [float(c.get("cy")) for c in circles]
    assert xs[0] == xs[2] < xs[1] == xs[3]                # the same L, the same place across
    assert ys[3] < ys[1] < ys[2] < ys[0]                  # more tokens per forward is drawn higher


def test_several_self_draft_arms_get_a_line_per_arm_and_n():
    root = ET.fromstring(plot.branches_sweep([point(2, 4, branches=1.2, **{"branches-commit": 1.3}),
                                              point(2, 6, branches=1.4, **{"branches-commit": 1.5})]))
    panel = root.find(f"{SVG}g")
    assert len(panel.findall(f"{SVG}polyline")) == 2
    assert {"branches N = 2", "branches-commit N = 2"} <= {t.text for t in panel.findall(f"{SVG}text")}
