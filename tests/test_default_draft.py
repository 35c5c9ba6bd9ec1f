"""Which draft a run of the default pair gets with no --draft: the feature draft on the CPU, the distilled draft
where a feature draft cannot serve (beams, a GGUF named by --target, a GPU), and the bench arms that fall back
to it. No model loads here."""

from __future__ import annotations

from pathlib import Path

from specsched.runtime.core.config import RunConfig


def test_the_default_pair_drafts_with_its_feature_draft_on_the_cpu_and_its_distilled_one_where_that_cannot():
    """No --draft: the shipped feature draft, except for beams (dsbd) and on a GPU (not measured there), which
    get the distilled draft; each stays selectable by name."""
    from specsched.runtime.backends.hf_pair import default_reads_features
    from specsched.runtime.models.draft_files import is_distilled_draft, is_feature_draft
    from specsched.runtime.models.registry import resolve_draft

    assert is_feature_draft(resolve_draft(None))
    assert is_distilled_draft(resolve_draft(None, features=False))
    assert is_distilled_draft(resolve_draft("smollm2-distilled")) and is_feature_draft(resolve_draft("smollm2-feature"))
    assert default_reads_features(RunConfig(backend="hf", device="cpu"))
    assert not default_reads_features(RunConfig(backend="hf", device="cpu", mode="dsbd"))


def test_which_draft_a_run_of_the_default_pair_loads_by_mode_device_and_target(monkeypatch, tmp_path):
    """What the backend resolves (no model loads: the target's folder is stubbed): the feature draft on the CPU;
    the distilled one for dsbd, on a machine with a GPU, and for a GGUF named by --target; and a worker joining
    from another host is told the engine's choice by name."""
    import specsched.runtime.backends.hf_pair as hf_pair
    import specsched.runtime.models.registry as registry
    from specsched.runtime.backends.hf_pair import HFBackend, pinned_draft
    from specsched.runtime.models.draft_files import is_distilled_draft, is_feature_draft

    monkeypatch.setattr(registry, "resolve_target", lambda name, progress=True: tmp_path)
    monkeypatch.setattr(hf_pair, "gpu_device_files", list)
    draft = lambda **kw: Path(HFBackend(RunConfig(backend="hf", **kw)).paths()[1])  # noqa: E731
    assert is_feature_draft(draft()) and is_feature_draft(draft(mode="sd"))
    assert is_distilled_draft(draft(mode="dsbd"))
    assert pinned_draft(RunConfig(backend="hf")) == "smollm2-feature"
    assert pinned_draft(RunConfig(backend="hf", draft="smollm2-distilled")) is None  # named: passed on as it is
    assert pinned_draft(RunConfig(backend="sim")) is None
    assert not hf_pair.default_reads_features(RunConfig(backend="llamacpp", target=str(tmp_path / "other.gguf")))
    monkeypatch.setattr(hf_pair, "gpu_device_files", lambda: ["/dev/nvidia0"])
    assert is_distilled_draft(draft()) and is_feature_draft(draft(device="cpu"))
    assert pinned_draft(RunConfig(backend="hf")) == "smollm2-distilled"


def test_bench_measures_dsbd_on_the_distilled_draft_when_its_engine_drafts_with_features():
    from types import SimpleNamespace

    from specsched.runtime.apps.bench.arms import RuntimeArm, SkippedArm, build_arms

    engine = SimpleNamespace(draft_reads_features=True)
    base = RunConfig(backend="hf", device="cpu")
    dsbd, seed = build_arms(["dsbd", "seed-fcfs"], base, engine=engine)
    assert isinstance(dsbd, RuntimeArm) and dsbd.engine is None  # its own engine, on the default distilled draft
    assert seed.engine is engine
    named = build_arms(["dsbd"], base.replace(draft="smollm2-feature"), engine=engine)
    assert isinstance(named[0], SkippedArm) and "feature draft cannot serve dsbd" in named[0].skipped


def test_hf_assisted_drafts_with_the_distilled_draft_in_place_of_the_default_feature_draft():
    """transformers' generate() gives its assistant no target features: the bench's hf-assisted arm takes the
    default pair's distilled draft instead, and skips a feature draft named by --draft."""
    from pathlib import Path
    from types import SimpleNamespace

    from specsched.runtime.apps.bench.peers import assistant_draft
    from specsched.runtime.models.draft_files import is_distilled_draft
    from specsched.runtime.models.registry import resolve_draft

    feature, distilled = str(resolve_draft("smollm2-feature")), str(resolve_draft("smollm2-distilled"))
    backend = SimpleNamespace(paths=lambda: ("target", feature))
    assert is_distilled_draft(Path(assistant_draft(backend, RunConfig(backend="hf"))))
    assert assistant_draft(backend, RunConfig(backend="hf", draft="smollm2-feature")) is None
    plain = SimpleNamespace(paths=lambda: ("target", distilled))
    assert assistant_draft(plain, RunConfig(backend="hf", draft="smollm2-distilled")) == distilled
