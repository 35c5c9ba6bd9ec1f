"""The feature draft's vocabulary V': chosen from the teacher's answers, and swapped without retraining."""

from __future__ import annotations

import torch
from feature_drafts import chat_target

from specsched.runtime.apps.drafts.feature_recipe import answer_vocab
from specsched.runtime.models.feature_draft import (
    load_feature_draft,
    new_feature_draft,
    save_feature_draft,
    target_parts,
)


def test_the_answer_vocabulary_holds_the_ids_the_answers_use_most_eos_and_the_newline(tmp_path):
    """Answer tokens count 1, prompt tokens ½, EOS and the newline are always in (the tiny target's EOS is id 0,
    its newline id 199; it has no chat markers): of 6 slots, those two, the three ids each answer uses five
    times, then the prompt's id (3 × ½ an answer) before the ids an answer uses once."""
    records = [{"ids": torch.tensor([3, 3, 3, *[7, 8, 9] * 5, 40, 41], dtype=torch.int32), "start": 3}] * 4
    assert answer_vocab(chat_target(tmp_path), records, 6, 256).tolist() == [0, 3, 7, 8, 9, 199]


def test_a_draft_over_another_vocabulary_reads_the_targets_rows_and_keeps_it_when_saved(tmp_path):
    target = chat_target(tmp_path)
    _, head, _ = target_parts(target)
    draft = new_feature_draft(target, torch.arange(0, 32))
    wanted = torch.tensor([1, 5, 9, 60, 61])
    draft.use_vocab(wanted, head)
    f = torch.randn(2, 3, draft.cfg.hidden)
    assert torch.equal(draft.logits(f), f @ head[wanted].T)
    save_feature_draft(draft, tmp_path / "d")
    again = load_feature_draft(tmp_path / "d", target)
    assert again.vocab_ids.tolist() == wanted.tolist() and again.cfg.draft_vocab == 5
    assert torch.allclose(again.logits(f), draft.logits(f), atol=1e-2)  # the file keeps bf16 weights


def test_models_features_takes_the_vocabulary_choice_and_refuses_another_in_one_line(tmp_path):
    from cli_runs import specsched, stderr_lines

    proc = specsched("models", "features", str(tmp_path), "--stage", "train", "--vocab", "widest")
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == ["specsched: error: argument --vocab: invalid choice: 'widest' (choose from "
                                         "'kept', 'answers') (see `specsched models features --help`)"]
