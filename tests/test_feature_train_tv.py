"""The feature draft's training loss with the total-variation term (`--tv`): KL + tv · ½ Σ |p - q|."""

from __future__ import annotations

import pytest
import torch
from cli_runs import specsched, stderr_lines
from test_feature_train_budget import _draft_and_records

from specsched.runtime.apps.drafts.training.feature_train import FeatureTrainConfig, collate, losses
from specsched.runtime.models.feature_draft import shifted


def test_the_tv_term_adds_its_weight_times_the_total_variation_of_each_position(tmp_path):
    draft, records = _draft_and_records(tmp_path)
    batch = collate(records, 16)
    plain = FeatureTrainConfig(noise=0.0, unroll=1)
    with torch.no_grad():
        without, _ = losses(draft, batch, plain, 1.0)
        with_tv, _ = losses(draft, batch, FeatureTrainConfig(noise=0.0, unroll=1, tv=2.0), 1.0)
        # the total variation, computed here from the draft's own forward
        p = torch.softmax(draft.logits(batch["feats"]), -1)
        pos = torch.arange(batch["ids"].shape[1]).expand_as(batch["ids"])
        q = torch.softmax(draft.logits(draft.step(shifted(batch["feats"]), batch["ids"], pos)[0]), -1)
        tv = 0.5 * (p - q).abs().sum(-1)
        w = batch["answer"] + plain.prompt_weight * batch["prompt"]
        expected = 2.0 * (tv * w).sum() / w.sum()
    assert expected > 0.1  # an untrained draft is far from p: the term is not negligible
    torch.testing.assert_close(with_tv - without, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", ["-1", "inf", "nan"])
def test_a_tv_weight_that_is_not_finite_and_non_negative_is_one_line(tmp_path, value):
    proc = specsched("models", "features", str(tmp_path), "--stage", "train", "--tv", value)
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == [f"specsched: error: --tv must be a finite weight of 0 or more, got "
                                         f"{float(value)}"]
    with pytest.raises(ValueError, match="tv"):
        FeatureTrainConfig(tv=float(value))
