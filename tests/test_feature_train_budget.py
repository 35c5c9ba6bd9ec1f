"""The feature draft's training under a time budget (`--train-seconds`, for a lease of GPU time): the plan
shrinks to the steps that fit, and the run ends with its checkpoint at the last of them."""

from __future__ import annotations

import pytest
import torch
from cli_runs import specsched, stderr_lines

from specsched.runtime.apps.drafts.training.feature_train import FeatureTrainConfig, fitted_steps, train
from specsched.runtime.models.feature_draft import new_feature_draft
from tests.tiny_hf import make_pair


def test_the_steps_that_fit_are_the_time_left_over_the_time_a_step_took():
    # 20 steps took 10 s of a 100 s budget: 0.5 s a step, 90 s left -> 180 more
    assert fitted_steps(6000, 20, 20, 10.0, 100.0) == 200
    assert fitted_steps(150, 20, 20, 10.0, 100.0) == 150   # never more than planned
    assert fitted_steps(6000, 20, 20, 120.0, 100.0) == 20  # already over: stop where it is
    assert fitted_steps(6000, 25, 5, 1.0, 2.0) == 30       # a resumed run counts the steps it had made


def _draft_and_records(tmp_path):
    """A fresh draft over the tiny target, and 8 records of random ids and features (seeded)."""
    target, _ = make_pair(tmp_path)
    draft = new_feature_draft(target, torch.arange(64))
    gen = torch.Generator().manual_seed(0)
    records = [{"ids": torch.randint(2, 64, (16,), generator=gen, dtype=torch.int32), "start": 4,
                "feats": torch.randn(16, draft.cfg.hidden, generator=gen).half()} for _ in range(8)]
    return draft, records


def _train(tmp_path, budget_s: float, steps: int, clock=None) -> tuple[int, list[str]]:
    """A fresh draft on random records, warm-up 5 (the plan is fixed after 4 timed steps, before the schedule
    reads it): the step its checkpoint holds, and the budget's log line."""
    draft, records = _draft_and_records(tmp_path)
    lines: list[str] = []
    cfg = FeatureTrainConfig(steps=steps, batch=4, max_len=16, warmup=5, budget_s=budget_s)
    trained = train(draft, records, cfg, ckpt=tmp_path / "ckpt.pt", log=lines.append,
                    **({"clock": clock} if clock else {}))
    saved = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    # the draft the run returns is the one its checkpoint holds: no step was made after it
    assert all(torch.equal(v, saved["model"][k]) for k, v in trained.state_dict().items())
    return saved["step"], [x for x in lines if x.startswith("time budget")]


@pytest.mark.parametrize("budget_s, made, line", [(1e-9, 4, ["time budget 0 s: 4 of 12 steps"]),
                                                 (1e9, 12, ["time budget 1000000000 s: 12 of 12 steps"]),
                                                 (0.0, 12, [])])
def test_a_budget_spent_keeps_the_timed_steps_and_one_that_cannot_run_out_keeps_all(tmp_path, budget_s, made, line):
    assert _train(tmp_path, budget_s, 12) == (made, line)


def test_a_budget_that_fits_part_of_the_plan_ends_the_run_there_with_its_checkpoint(tmp_path):
    """A clock that moves 1 s each time it is read: 4 timed steps take a few seconds of the 30, so the plan of
    40 steps shrinks to the number the log names, and the run's checkpoint is at that step."""
    ticks = iter(range(10_000))
    made, line = _train(tmp_path, 30.0, 40, clock=lambda: float(next(ticks)))
    assert line == [f"time budget 30 s: {made} of 40 steps"]
    assert 4 < made < 40


@pytest.mark.parametrize("value", ["-1", "inf", "nan"])
def test_a_budget_that_is_not_a_finite_number_of_seconds_is_one_line(tmp_path, value):
    proc = specsched("models", "features", str(tmp_path), "--stage", "train", "--train-seconds", value)
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == [
        f"specsched: error: --train-seconds must be 0 (none) or a finite number of seconds, got {float(value)}"]


def _trained_weights(tmp_path, seed: int) -> dict[str, torch.Tensor]:
    draft, records = _draft_and_records(tmp_path)
    cfg = FeatureTrainConfig(steps=3, batch=2, max_len=16, warmup=2, seed=seed)
    return {k: v.clone() for k, v in train(draft, records, cfg, log=lambda _: None).state_dict().items()}


def test_the_training_seed_picks_the_order_the_shards_are_read_in(tmp_path):
    """--train-seed: one seed makes one draft, bit for bit; another reads other batches, so a second epoch
    over shards a run has read is a different run."""
    one, again, other = (_trained_weights(tmp_path / str(i), s) for i, s in enumerate((0, 0, 1)))
    assert all(torch.equal(one[k], again[k]) for k in one)
    assert not all(torch.equal(one[k], other[k]) for k in one)


def test_a_negative_training_seed_is_one_line(tmp_path):
    proc = specsched("models", "features", str(tmp_path), "--stage", "train", "--train-seed", "-1")
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == ["specsched: error: --train-seed must be 0 or more, got -1"]


def test_a_run_resumed_under_other_settings_says_which(tmp_path):
    """A checkpoint made with one lr and seed, resumed with others: the log names each changed setting, and a
    resume under the same settings names none."""
    draft, records = _draft_and_records(tmp_path)
    cfg = FeatureTrainConfig(steps=2, batch=2, max_len=16, warmup=1, lr=5e-4)
    train(draft, records, cfg, ckpt=tmp_path / "ckpt.pt", log=lambda _: None)
    lines: list[str] = []
    later = FeatureTrainConfig(steps=3, batch=2, max_len=16, warmup=1, lr=2e-4, seed=2)
    train(draft, records, later, ckpt=tmp_path / "ckpt.pt", log=lines.append)
    assert lines[:2] == ["resumed at step 2", "the checkpoint was made with steps 2 (now 3), lr 0.0005 (now 0.0002), "
                         "seed 0 (now 2): the run goes on under the new settings"]
    lines.clear()
    train(draft, records, later, ckpt=tmp_path / "ckpt.pt", log=lines.append)
    assert lines == ["resumed at step 3"]
