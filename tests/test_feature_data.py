"""The feature draft's teacher data: answers exported as token ids and taken in again, with their manifest."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random

import pytest
import torch
from cli_runs import specsched, stderr_lines
from feature_drafts import chat_target

from specsched.runtime.apps.drafts.training.feature_answers import export_answers, import_answers, manifest_beside
from specsched.runtime.core.device import gpu_device_files


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
    """What each shard cost, and on which machine, is kept beside the answers and taken in on import, entry by
    entry: the folder's entry wins, and a note added to the committed manifest stays beside the value it
    annotates, never beside another machine's."""
    made = tmp_path / "made"
    made.mkdir()
    torch.save({"records": [{"ids": torch.tensor([1, 2, 3], dtype=torch.int32), "start": 1}]},
               made / "answers_00000.pt")
    npz = tmp_path / "feature_answers.npz"
    export_answers(made, npz)
    assert manifest_beside(npz).name == "feature_manifest.json"
    note = "not measured: paused"
    manifest_beside(npz).write_text(json.dumps({"shards": {
        "0": {"answer_s": 12.5, "machine": "X"},
        "1": {"answer_s": 3.0, "answer_s_note": note},                     # the folder's own measurement
        "2": {"answer_s": 9.0, "answer_s_note": note, "machine": "X"}}}))  # another machine's
    again = tmp_path / "again"
    (again).mkdir()
    (again / "manifest.json").write_text(json.dumps({"shards": {"1": {"answer_s": 3.0},
                                                                "2": {"answer_s": 4.0, "machine": "Y"}}}))
    import_answers(npz, again)
    merged = json.loads((again / "manifest.json").read_text())["shards"]
    assert merged == {"0": {"answer_s": 12.5, "machine": "X"}, "1": {"answer_s": 3.0, "answer_s_note": note},
                      "2": {"answer_s": 4.0, "machine": "Y"}}


def test_the_answers_stage_makes_and_exports_answers_only_and_the_data_stage_adds_their_features(tmp_path):
    """`models features --stage answers --export FILE`: the target's answers, no features, written to FILE with
    the manifest after every shard; the data stage later makes only the features."""
    import numpy as np

    from specsched.runtime.apps.drafts.training.feature_data import FeatureDataConfig, make

    cfg = FeatureDataConfig(target=chat_target(tmp_path), out=tmp_path / "data", shards=2, batch=2, max_new_tokens=4)
    npz = tmp_path / "feature_answers.npz"
    make(cfg, log=lambda m: None, with_features=False, export=npz)
    assert sorted(p.name for p in cfg.out.glob("*.pt")) == ["answers_00000.pt", "answers_00001.pt"]
    assert len(np.load(npz)["starts"]) == 4
    shards = json.loads(manifest_beside(npz).read_text())["shards"]
    assert set(shards) == {"0", "1"} and all(s["answer_tokens"] > 0 and s["machine"] for s in shards.values())
    make(cfg, log=lambda m: None)
    assert sorted(p.name for p in cfg.out.glob("features_*.pt")) == ["features_00000.pt", "features_00001.pt"]


def test_a_data_stage_begun_from_older_answers_makes_new_answers_before_their_features(tmp_path):
    """Answers are what a stop would lose (features are remade in minutes), so a run that starts from shard 0's
    answers writes shard 1's answers, exported, before it makes shard 0's features."""
    from specsched.runtime.apps.drafts.training.feature_data import FeatureDataConfig, make

    cfg = FeatureDataConfig(target=chat_target(tmp_path), out=tmp_path / "data", shards=2, batch=2, max_new_tokens=4)
    make(dataclasses.replace(cfg, shards=1), log=lambda m: None, with_features=False)
    order = []
    make(cfg, log=lambda m: order.append(m.split(":")[0]), export=tmp_path / "answers.npz")
    assert order == ["shard 1", "shard 0"]
    assert sorted(p.name for p in cfg.out.glob("features_*.pt")) == ["features_00000.pt", "features_00001.pt"]


def test_an_unknown_draft_to_evaluate_against_is_one_line_before_any_model_loads(tmp_path):
    """`--against` names the drafts a trained one is compared with; a typo fails at once, not after training."""
    proc = specsched("models", "features", str(tmp_path), "--stage", "eval", "--against", "shipped,distiled")
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == [
        "specsched: error: --against: unknown draft distiled (choose from distilled, shipped)"]


def test_shards_answered_in_one_decode_keep_their_prompts_and_their_ways(tmp_path):
    """--gen-shards: a greedy and a sampled shard in one batched decode (a GPU is idle at 48 rows) are written as
    two shards of the prompts they have alone, the greedy one's rows beginning as they do alone (the first
    token comes from each prompt's own prefill), the manifest noting how they were made."""
    from specsched.runtime.apps.drafts.training.feature_data import FeatureDataConfig, make

    target = chat_target(tmp_path)
    alone = FeatureDataConfig(target=target, out=tmp_path / "alone", shards=2, batch=3, max_new_tokens=6)
    together = FeatureDataConfig(target=target, out=tmp_path / "together", shards=2, batch=3, max_new_tokens=6,
                                 group=2)
    for cfg in (alone, together):
        make(cfg, log=lambda m: None, with_features=False)
    for s in (0, 1):
        a, b = (torch.load(c.out / f"answers_{s:05d}.pt", weights_only=True)["records"] for c in (alone, together))
        assert [r["start"] for r in a] == [r["start"] for r in b]
        assert all(torch.equal(x["ids"][:x["start"]], y["ids"][:y["start"]]) for x, y in zip(a, b))
        if s == 0:  # greedy
            assert [int(x["ids"][x["start"]]) for x in a] == [int(y["ids"][y["start"]]) for y in b]
    shards = json.loads((together.out / "manifest.json").read_text())["shards"]
    assert [shards[k]["decoded_with"] for k in ("0", "1")] == [2, 2]
    assert [shards[k]["sampled"] for k in ("0", "1")] == [False, True]


@pytest.mark.filterwarnings("error::FutureWarning")  # the cache goes by the name the installed transformers takes
def test_rows_sample_or_take_the_argmax_as_flagged_and_a_batched_prefill_starts_them_alike(tmp_path):
    """answer(): in one batch, greedy rows are the rows of an all-greedy decode and sampled rows part from
    them; a prefill of all prompts in one padded forward (a GPU's) gives each row the first token that its
    own prefill gives (the CPU's). 12 new tokens: finished rows leave the batch after step 8."""
    from specsched.runtime.apps.drafts.training.feature_data import load_target
    from specsched.runtime.apps.drafts.training.teacher_decode import answer

    model, tok = load_target(chat_target(tmp_path))
    prompts = ["To be, or not", "What light through", "Now is the winter", "Friends, Romans"]
    greedy = answer(model, tok, prompts, sampled=False, seed=1, max_new=12)
    mixed = answer(model, tok, prompts, sampled=[False, True, False, True], seed=1, max_new=12)
    assert [torch.equal(g["ids"], m["ids"]) for g, m in zip(greedy, mixed)][0::2] == [True, True]
    assert not all(torch.equal(g["ids"], m["ids"]) for g, m in zip(greedy[1::2], mixed[1::2]))
    batched = answer(model, tok, prompts, sampled=False, seed=1, max_new=1, prefill="batch")
    assert [int(r["ids"][r["start"]]) for r in batched] == [int(r["ids"][r["start"]]) for r in greedy]


@pytest.mark.skipif(bool(gpu_device_files()), reason="asks for a GPU this machine may have")
@pytest.mark.parametrize("device, line", [
    ("cuda", "--device cuda: no CUDA GPU on this machine (no GPU device file: /dev/nvidiaN, Jetson's /dev/nvmap, "
             "/dev/kfd, /dev/dxg); use --device cpu or auto"),
    ("tpu", "unknown --device 'tpu'; choose auto, cpu, cuda or cuda:N"),
])
def test_a_device_that_is_not_there_is_one_line_before_any_model_loads(tmp_path, device, line):
    proc = specsched("models", "features", str(tmp_path), "--device", device)
    assert proc.returncode == 2
    assert stderr_lines(proc.stderr) == [f"specsched: error: {line}"]


@pytest.mark.parametrize("buckets, overhead", [(1, 0), (4, 0)])
def test_greedy_answers_of_a_batch_are_what_generate_gives_each_prompt_alone(tmp_path, buckets, overhead):
    """answer() decodes rows of unequal prompts in one preallocated cache, left-padded, rows leaving it as they
    end (or in batches of similar prompt lengths, one after the other): each greedy row is transformers' own
    generate() of its prompt alone, token for token, over 20 steps (rows that ended leave at steps 8 and 16)."""
    from specsched.runtime.apps.drafts.training.feature_data import load_target
    from specsched.runtime.apps.drafts.training.teacher_decode import answer, chat_ids

    model, tok = load_target(chat_target(tmp_path))
    prompts = ["be come the a to caesar or made or the now",  # the tiny target ends it after 2 tokens
               "What light through yonder window breaks", "made not what",  # ... this one after 13
               "Friends, Romans, countrymen, lend me your ears; I come to bury Caesar"]
    got = answer(model, tok, prompts, sampled=False, seed=1, max_new=20, buckets=buckets, overhead=overhead)
    for prompt, record in zip(prompts, got):
        ids = torch.tensor([chat_ids(tok, prompt)])
        alone = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=20,
                               eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)[0]
        assert record["ids"].tolist() == alone[:len(record["ids"])].tolist()
        assert len(record["ids"]) == len(alone) or int(record["ids"][-1]) == tok.eos_token_id


def test_length_buckets_are_the_cheapest_split_of_the_rows_by_prompt_length():
    """Against every split of the sorted rows into at most `most` runs: the least cache positions read per
    step (rows x (longest prompt + new tokens), plus the overhead per extra batch); every row once."""
    from specsched.runtime.apps.drafts.training.teacher_decode import length_buckets

    def cost(groups, lengths, new, overhead):
        return sum(len(g) * (max(lengths[i] for i in g) + new) for g in groups) + overhead * (len(groups) - 1)

    rng = random.Random(7)
    for _ in range(200):
        lengths = [rng.choice((rng.randint(20, 120), rng.randint(300, 700))) for _ in range(rng.randint(1, 9))]
        new, most, overhead = rng.choice((0, 16, 192)), rng.randint(1, 4), rng.choice((0, 500, 4096))
        groups = length_buckets(lengths, new, most, overhead)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths))) and 1 <= len(groups) <= most
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])
        best = min(cost([order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))], lengths, new, overhead)
                   for k in range(min(most, len(order))) for cuts in itertools.combinations(range(1, len(order)), k))
        assert cost(groups, lengths, new, overhead) == best
    assert length_buckets([], 5, 3) == []
    # a shard's shape: 43 prompts under 200 tokens, 5 Blocksworld prompts of ~600 decode apart
    lengths = [60] * 43 + [598] * 5
    assert [len(g) for g in length_buckets(lengths, 192, 3)] == [43, 5]
    assert [len(g) for g in length_buckets(lengths, 192, 1)] == [48]


@pytest.mark.parametrize("prefill", ["each", "batch"])
def test_features_kept_from_the_decode_are_a_fresh_forwards_and_the_data_stage_needs_no_second_one(tmp_path, prefill):
    """answer(keep_features=True): every token's feature comes from the decode's own forwards (the prompt's from
    its prefill, the last token's from one more step), equal to feature_data.features' fresh forward over the
    finished record up to float16 storage; greedy rows are unchanged. The data stage of a shard it answers
    then writes both files at once."""
    from specsched.runtime.apps.drafts.training.feature_data import FeatureDataConfig, features, load_target, make
    from specsched.runtime.apps.drafts.training.teacher_decode import answer

    target = chat_target(tmp_path)
    model, tok = load_target(target)
    prompts = ["be come the a to caesar or made or the now", "What light through yonder window breaks",
               "made not what", "Friends, Romans, countrymen, lend me your ears; I come to bury Caesar"]
    flags = [False, True, False, True]
    plain = answer(model, tok, prompts, sampled=flags, seed=3, max_new=20, buckets=2, overhead=0, prefill=prefill)
    kept = answer(model, tok, prompts, sampled=flags, seed=3, max_new=20, buckets=2, overhead=0, prefill=prefill,
                  keep_features=True)
    assert [r["ids"].tolist() for r in kept][0::2] == [r["ids"].tolist() for r in plain][0::2]
    fresh = features(model, [{"ids": r["ids"], "start": r["start"]} for r in kept])
    for k, f in zip(kept, fresh):
        assert k["feats"].dtype == torch.float16 and k["feats"].shape == f["feats"].shape
        # float16 keeps 11 significant bits: a relative step of 2**-11 of each value, plus the cached
        # forward's different float32 summation order (~1e-6 relative), far below it
        torch.testing.assert_close(k["feats"].float(), f["feats"].float(), rtol=2 ** -10, atol=1e-3)
    cfg = FeatureDataConfig(target=target, out=tmp_path / "data", shards=2, batch=2, max_new_tokens=6)
    make(cfg, log=lambda m: None)
    shards = json.loads((cfg.out / "manifest.json").read_text())["shards"]
    assert [shards[s]["features_from"] for s in ("0", "1")] == ["the decode"] * 2
    assert all("feature_s" not in shards[s] for s in ("0", "1"))
    for s in (0, 1):
        recs = torch.load(cfg.out / f"features_{s:05d}.pt", weights_only=True)["records"]
        assert [len(r["feats"]) for r in recs] == [len(r["ids"]) for r in recs]
        assert "feats" not in torch.load(cfg.out / f"answers_{s:05d}.pt", weights_only=True)["records"][0]
