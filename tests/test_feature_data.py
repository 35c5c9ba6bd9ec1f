"""The feature draft's teacher data: answers exported as token ids and taken in again, with their manifest."""

from __future__ import annotations

import json

import torch

from specsched.runtime.apps.drafts.training.feature_data import export_answers, import_answers, manifest_beside


def test_teacher_answers_saved_by_one_run_resume_the_data_stage_of_another(tmp_path):
    made = tmp_path / "made"
    made.mkdir()
    shards = {0: [([5, 6, 7, 8], 2), ([9, 10], 1)], 3: [([11, 12, 13], 2)]}
    for s, rows in shards.items():
        torch.save({"records": [{"ids": torch.tensor(i, dtype=torch.int32), "start": st} for i, st in rows]},
                   made / f"answers_{s:05d}.pt")
    assert export_answers(made, tmp_path / "answers.npz") == 2
    again = tmp_path / "again"
    assert import_answers(tmp_path / "answers.npz", again) == 2
    for s, rows in shards.items():
        got = torch.load(again / f"answers_{s:05d}.pt", weights_only=True)["records"]
        assert [(r["ids"].tolist(), r["start"]) for r in got] == rows
    assert import_answers(tmp_path / "answers.npz", again) == 0  # a shard already there is kept


def test_the_manifest_travels_with_the_exported_answers(tmp_path):
    """What each shard cost, and on which machine, is kept beside the answers and taken in on import."""
    made = tmp_path / "made"
    made.mkdir()
    torch.save({"records": [{"ids": torch.tensor([1, 2, 3], dtype=torch.int32), "start": 1}]},
               made / "answers_00000.pt")
    npz = tmp_path / "feature_answers.npz"
    export_answers(made, npz)
    assert manifest_beside(npz).name == "feature_manifest.json"
    manifest_beside(npz).write_text(json.dumps({"shards": {"0": {"answer_s": 12.5, "machine": "X"}}}))
    again = tmp_path / "again"
    (again).mkdir()
    (again / "manifest.json").write_text(json.dumps({"shards": {"1": {"answer_s": 3.0}}}))
    import_answers(npz, again)
    merged = json.loads((again / "manifest.json").read_text())["shards"]
    assert merged == {"0": {"answer_s": 12.5, "machine": "X"}, "1": {"answer_s": 3.0}}
