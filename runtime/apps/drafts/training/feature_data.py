"""Teacher data for the feature draft: the target's own answers, and its features over them.

Shard s (of `batch` prompts from feature_prompts.py) is made in two stages, each written atomically, so
a rerun of the same command skips what exists and the job resumes after any stop:
1. `answers_s.pt`: the fp32 target answers the chat-templated prompts, batched, with a KV cache
   (teacher_decode.py), greedy on even shards and sampled at T = 1 (no top-k, no top-p) on odd ones;
2. `features_s.pt`: one batched fp32 forward over each prompt + answer gives the target's last hidden
   state (the input of its LM head) at every position, stored as float16. Nothing else is needed: the
   target's next-token distribution at position i is softmax(W_lm · f_i), recomputed at training time
   from the LM-head rows (on the draft's vocabulary only).
   When one run makes both stages of a shard, its decode keeps the features its own forwards read
   (teacher_decode.decode, `keep_features`) and this second forward is skipped.

`group` shards are answered in one batched decode (each row sampled or greedy as its shard is): a GPU is
idle at 48 rows. The models run on `device` (a CPU or a CUDA GPU); the shards are written the same way.

A record: `ids` int32 [n] (prompt then answer, first EOS kept), `start` (the prompt's length), `feats`
float16 [n, d] with feats[i] the target's feature after reading ids[:i + 1] (it predicted ids[i + 1]).
`manifest.json` lists each shard's rows, tokens and seconds, and the machine that made it.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .feature_answers import export_answers, manifest_beside, save_atomically
from .feature_prompts import feature_prompts
from .teacher_decode import answer


@dataclass(frozen=True, slots=True)
class FeatureDataConfig:
    target: Path
    out: Path
    shards: int = 40
    batch: int = 48
    max_new_tokens: int = 192
    seed: int = 2026
    forward_rows: int = 8  # rows per stage-2 forward (memory: rows x length x 576 x 30 layers of activations)
    group: int = 1         # shards answered in one batched decode
    device: str = "cpu"

    def __post_init__(self) -> None:
        if min(self.shards, self.batch, self.max_new_tokens, self.forward_rows, self.group) < 1:
            raise ValueError("shards, batch, max_new_tokens, forward_rows and group must be at least 1")

    def sampled(self, shard: int) -> bool:
        return shard % 2 == 1


@torch.inference_mode()
def features(model, records: list[dict], *, rows: int = 8) -> list[dict]:
    """The target's last hidden state at every position of each record (right-padded batches of `rows`),
    computed where the model is, kept on the CPU."""
    decoder = model.get_decoder()
    device = next(model.parameters()).device
    out = []
    feats: dict[int, torch.Tensor] = {}
    for group, ids, mask in padded_batches(records, rows):
        hidden = decoder(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        hidden = hidden.to("cpu", torch.float16)
        for j, i in enumerate(group):
            feats[i] = hidden[j, :len(records[i]["ids"])].clone()
    for i, rec in enumerate(records):
        out.append({**rec, "feats": feats[i]})
    return out


def padded_batches(records: list[dict], rows: int):
    """(record indices, ids, attention mask) for batches of `rows` records of similar lengths, right-padded:
    causal attention leaves every real position exactly as in a forward of its record alone."""
    order = sorted(range(len(records)), key=lambda i: len(records[i]["ids"]))
    for b in range(0, len(order), rows):
        group = order[b:b + rows]
        ids = torch.zeros((len(group), max(len(records[i]["ids"]) for i in group)), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, i in enumerate(group):
            ids[j, :len(records[i]["ids"])] = records[i]["ids"].long()
            mask[j, :len(records[i]["ids"])] = 1
        yield group, ids, mask


def load_target(target: Path, device: str = "cpu"):
    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).to(device).eval()
    return model, tok


def make(cfg: FeatureDataConfig, log=print, *, with_features: bool = True, export: Path | None = None) -> None:
    """Both stages for every shard not yet on disk (only the answers without `with_features`: for a machine
    that makes answers for a later one); the manifest is rewritten after each step, and with `export` the
    answers of every shard on disk are written to that file (export_answers) whenever new ones were made."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    prompts = feature_prompts(cfg.shards * cfg.batch, seed=cfg.seed)
    manifest_path = cfg.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"shards": {}}
    manifest["config"] = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}

    def write_manifest() -> None:
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    loaded = None
    answers = [cfg.out / f"answers_{s:05d}.pt" for s in range(cfg.shards)]
    # Shards without answers first: answers are the costly part and the part kept (`export`), so a stop loses
    # none of them to features of older shards, which any later run remakes in under a minute a shard.
    for s in sorted(range(cfg.shards), key=lambda s: answers[s].exists()):
        ans, feat = answers[s], cfg.out / f"features_{s:05d}.pt"
        if feat.exists() or (ans.exists() and not with_features):
            continue
        loaded = loaded or load_target(cfg.target, cfg.device)
        model, tok = loaded
        entry = manifest["shards"].setdefault(str(s), {})
        if not ans.exists():
            group = [t for t in range(s, cfg.shards) if not answers[t].exists()][:cfg.group]
            _answer_group(cfg, group, prompts, model, tok, manifest, keep_features=with_features)
            write_manifest()
            if export is not None:
                export_answers(cfg.out, export)
                manifest_beside(export).write_text(json.dumps(manifest, indent=1) + "\n")
        if with_features and not feat.exists():
            t0 = time.time()
            recs = features(model, torch.load(ans, weights_only=True)["records"], rows=cfg.forward_rows)
            save_atomically({"records": recs}, feat)
            entry.update(feature_s=round(time.time() - t0, 1), rows=len(recs),
                         tokens=sum(len(r["ids"]) for r in recs), machine=machine(),
                         threads=torch.get_num_threads())
            write_manifest()
        took = f"{entry['feature_s']} s" if "feature_s" in entry else entry.get("features_from", "-")
        log(f"shard {s}: {entry.get('answer_tokens', '?')} answer tokens, {entry.get('tokens', '?')} in all; "
            f"answers {entry.get('answer_s', '?')} s, features {took}")


def _answer_group(cfg: FeatureDataConfig, group: list[int], prompts: list[str], model, tok, manifest: dict, *,
                  keep_features: bool = False) -> None:
    """The answers of shards `group`, in one batched decode (seeded by its first shard: a group of one is the
    shard alone), each shard's written apart; each manifest entry gets the group's time shared equally. With
    `keep_features` the features the decode's own forwards read are written too (`features_s.pt`): no second
    forward over the shard (~50 s of a ~160 s shard on 2 cores)."""
    t0 = time.time()
    rows = [prompts[t * cfg.batch:(t + 1) * cfg.batch] for t in group]
    recs = answer(model, tok, [p for r in rows for p in r],
                  sampled=[cfg.sampled(t) for t, r in zip(group, rows) for _ in r],
                  seed=cfg.seed * 1000 + group[0], max_new=cfg.max_new_tokens, keep_features=keep_features)
    seconds = (time.time() - t0) / len(group)
    for t, r in zip(group, rows):
        mine, recs = recs[:len(r)], recs[len(r):]
        save_atomically({"records": [{"ids": x["ids"], "start": x["start"]} for x in mine]},
                        cfg.out / f"answers_{t:05d}.pt")
        entry = manifest["shards"].setdefault(str(t), {})
        if keep_features:
            save_atomically({"records": mine}, cfg.out / f"features_{t:05d}.pt")
            entry.update(features_from="the decode", tokens=sum(len(x["ids"]) for x in mine))
        entry.update(
            answer_s=round(seconds, 1), sampled=cfg.sampled(t), rows=len(mine), decoded_with=len(group),
            answer_tokens=sum(len(x["ids"]) - x["start"] for x in mine), machine=machine(),
            threads=torch.get_num_threads())


def machine() -> str:
    """The CPU (or GPU) that made a shard, as the manifest records it."""
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_shards(folder: Path, limit: int | None = None) -> list[dict]:
    """Every record of the feature shards in `folder` (the first `limit` shards when given)."""
    paths = sorted(folder.glob("features_*.pt"))[:limit]
    return [r for p in paths for r in torch.load(p, weights_only=True)["records"]]
