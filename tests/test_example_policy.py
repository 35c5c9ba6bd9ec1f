"""The custom-policy example (docs/examples; README, docs/policies.md) loads, orders drafts as documented, runs."""

from __future__ import annotations

from pathlib import Path

from specsched.policies import ReadyDraft, load_policy
from specsched.runtime.apps.run.app import run
from specsched.runtime.core.config import RunConfig

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "least_progress.py"


def test_least_progress_picks_the_sequence_that_is_furthest_behind():
    policy = load_policy(f"{EXAMPLE}:LeastProgress")()
    ready = [ReadyDraft(worker=0, seq=0, arrival=1.0, order=0, length=4, verified_tokens=12),
             ReadyDraft(worker=1, seq=1, arrival=2.0, order=1, length=4, verified_tokens=3),
             ReadyDraft(worker=2, seq=2, arrival=0.5, order=2, length=4, verified_tokens=3)]
    assert policy.pick(ready).worker == 2  # 3 tokens like worker 1, but arrived earlier
    assert policy.pick(ready[:2]).worker == 1


def test_custom_policy_runs_and_does_not_change_the_output():
    kw = dict(backend="sim", workers=3, max_new_tokens=12, sim_draft_ms=1, sim_verify_ms=2, temperature=0.8, seed=3)
    custom = run(RunConfig.of(policy=f"{EXAMPLE}:LeastProgress", **kw))
    fcfs = run(RunConfig.of(policy="fcfs", **kw))
    assert custom.status == "ok"
    assert [s.tokens for s in custom.sequences] == [s.tokens for s in fcfs.sequences]


def test_readme_and_the_policies_chapter_show_the_example_file():
    shown = EXAMPLE.read_text().split("\n\n\n", 1)[-1].strip()  # the class, after the imports
    for doc in ("README.md", "docs/policies.md"):
        assert shown in (EXAMPLE.parents[2] / doc).read_text(), doc
