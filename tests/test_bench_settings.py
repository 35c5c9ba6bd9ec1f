"""`specsched bench`'s settings: its flags read into one workload and a list of arms (bad input is one
ConfigError before any run), and a sweep giving each point its own workload. The runs themselves are in
test_bench.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from cli_runs import bench_args

from specsched.runtime.apps.bench import plot
from specsched.runtime.apps.bench.arms import ARM_NAMES, parse_arms
from specsched.runtime.apps.bench.bench_commands import settings_from_args
from specsched.runtime.apps.bench.measure import ArmResult, Sample, compare_with_baseline
from specsched.runtime.apps.bench.sweep import parse_values, point_config, run_sweep
from specsched.runtime.core.config import ConfigError, RunConfig


@pytest.mark.parametrize("argv, message", [
    (["--arms", "seed-fcfs,warp"], "unknown arm 'warp'"),
    (["--workers", "3", "--prompts", "2"], "--prompts 2 with 3 thoughts"),
    (["--repeats", "0"], "--repeats must be at least 1"),
    (["--smoke", "--backend", "hf"], "--smoke runs on the sim backend"),
    (["--values", "1,2"], "--values needs --sweep"),
    (["--sweep", "n", "--values", "0,2"], "bad value"),
    (["--sweep", "k-config", "--values", "2,x"], "cannot read"),
    (["--task", "gsm8k", "--backend", "sim"], "need real models"),
    (["--prompts", "0"], "--prompts must be at least 1, got 0"),
    (["--arms", ","], "--arms is empty"),
    (["--sweep", "coupling"], "--sweep coupling needs --temperature > 0"),
    (["--sweep", "coupling", "--temperature", "1", "--values", "residual,maximal"], "bad value"),
    (["--sweep", "k", "--values", ""], "bad value"),
    (["--backend", "sim", "--target", "tiny"], r"--target applies to --backend hf or llamacpp \(this run uses"),
    (["--smoke", "--max-new-tokens", "99999999999999999999"], "--max-new-tokens must be in 1..1,000,000"),
    (["--smoke", "--corpus-cache", "/nonexistent/c.npz"], "--corpus-cache /nonexistent/c.npz: no such file"),
    (["--smoke", "--corpus-cache", __file__], "is not a corpus cache"),
    (["--smoke", "--corpus-cache", __file__, "--arms", "sd,prompt-lookup"], "applies to the Self-Draft arms"),
])
def test_bad_input_is_one_config_error(argv, message):
    with pytest.raises(ConfigError, match=message):
        settings_from_args(bench_args(*argv))


def test_ar_is_always_measured_and_arms_keep_their_order():
    assert parse_arms("seed-rr,sd") == ["ar", "sd", "seed-rr"]
    assert parse_arms(None) == [n for n in ARM_NAMES if n != "ar-hf"]  # the hf reference of a llamacpp run
    assert parse_arms(None, "llamacpp") == list(ARM_NAMES)
    with pytest.raises(ConfigError, match="has an empty name"):  # a typo, as compare --policies says
        parse_arms("ar,,sd")


def test_sweep_points_get_their_own_workload():
    base = settings_from_args(bench_args("--smoke")).base
    assert parse_values("k-config", "1,1,1; 2,2,1") == [(1, 1, 1), (2, 2, 1)]
    seen = []

    def fake_measure(config: RunConfig) -> list[ArmResult]:
        seen.append(config)
        rate = 10.0 * config.n_sequences
        results = [ArmResult("ar", "", [Sample(10.0, 1.0, [])]),
                   ArmResult("seed-fcfs", "", [Sample(rate, 1.0, [], acceptance_rate=0.5)])]
        compare_with_baseline(results, greedy=False)
        return results

    points = run_sweep("n", [1, 2, 4], base, fake_measure)
    assert [c.n_sequences for c in seen] == [1, 2, 4] and [len(c.prompts) for c in seen] == [1, 2, 4]
    assert seen[1].prompts == seen[2].prompts[:2]                       # a bigger workload extends a smaller one
    assert [p.arm("seed-fcfs").speedup_vs_ar for p in points] == [1.0, 2.0, 4.0]
    tree = point_config(base, "k-config", (2, 2, 1), n_prompts=None, task=None)
    assert tree.shape.widths == (2, 2, 1) and tree.n_sequences == 3
    drafts = parse_values("draft", "smollm2-distilled, /some/feature-draft")
    assert drafts == ["smollm2-distilled", "/some/feature-draft"]          # one bench run, both drafts
    hf = settings_from_args(bench_args("--backend", "hf")).base
    assert [point_config(hf, "draft", d, n_prompts=None, task=None).draft for d in drafts] == drafts
    couplings = parse_values("coupling", None)                               # both rules, in one bench run
    points_of = [point_config(base, "coupling", c, n_prompts=None, task=None) for c in couplings]
    assert [c.sampling.coupling for c in points_of] == couplings
    svg = ET.fromstring(plot.speedup_vs_axis("n", points))
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert titles == ["seed-fcfs: (1, 1)", "seed-fcfs: (2, 2)", "seed-fcfs: (4, 4)"]


@pytest.mark.slow
def test_a_draft_sweep_runs_each_draft_on_an_engine_of_its_own():
    """The draft is an engine's setting (the model its workers load): each point of --sweep draft gets its own
    engine, and every arm of both points runs (two names of the tiny draft: the preset and its folder)."""
    from specsched.runtime.apps.bench.runner import run_bench
    from specsched.runtime.models.registry import PRESETS

    folder = str(PRESETS["tiny"].draft_dir)
    record = run_bench(settings_from_args(bench_args(
        "--backend", "hf", "--target", "tiny", "--sweep", "draft", "--values", f"tiny,{folder}", "--arms", "ar,sd",
        "--warmup", "0", "--repeats", "1", "--thoughts", "1", "--max-new-tokens", "8")))
    assert [p.value for p in record.sweep] == ["tiny", folder]
    for point in record.sweep:
        assert all(a.samples and not a.errors for a in point.arms), [(a.name, a.errors) for a in point.arms]
        assert point.arm("sd").outputs_match_ar
