"""Teacher data for the feature draft: the target's own answers, and its features over them.

Shard s (of `batch` prompts from feature_prompts.py) is made in two stages, each written atomically, so
a rerun of the same command skips what exists and the job resumes after any stop:
1. `answers_s.pt`: the fp32 target answers the chat-templated prompts in one batched generate with a KV
   cache, greedy on even shards and sampled at T = 1 (no top-k, no top-p) on odd ones;
2. `features_s.pt`: one batched fp32 forward over each prompt + answer gives the target's last hidden
   state (the input of its LM head) at every position, stored as float16. Nothing else is needed: the
   target's next-token distribution at position i is softmax(W_lm · f_i), recomputed at training time
   from the LM-head rows (on the draft's vocabulary only).

A record: `ids` int32 [n] (prompt then answer, first EOS kept), `start` (the prompt's length), `feats`
float16 [n, d] with feats[i] the target's feature after reading ids[:i + 1] (it predicted ids[i + 1]).
`manifest.json` lists each shard's rows, tokens and seconds, and the machine that made it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from ....models.pull import pull
from .feature_prompts import feature_prompts


@dataclass(frozen=True, slots=True)
class FeatureDataConfig:
    target: Path
    out: Path
    shards: int = 40
    batch: int = 48
    max_new_tokens: int = 192
    seed: int = 2026
    forward_rows: int = 8  # rows per stage-2 forward (memory: rows x length x 576 x 30 layers of activations)

    def __post_init__(self) -> None:
        if min(self.shards, self.batch, self.max_new_tokens, self.forward_rows) < 1:
            raise ValueError("shards, batch, max_new_tokens and forward_rows must be at least 1")

    def sampled(self, shard: int) -> bool:
        return shard % 2 == 1


def _save(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _chat(tok, prompt: str) -> list[int]:
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@torch.inference_mode()
def answer(model, tok, prompts: list[str], *, sampled: bool, seed: int, max_new: int) -> list[dict]:
    """The target's answers, batched -> a record {ids, start} per prompt, cut after the first EOS.

    Each prompt is prefilled alone (a padded batch prefill took 4x longer on a 2-core CPU: its attention
    mask leaves the fast causal path), the caches are then left-padded into one batch and decoded together;
    rows that reached EOS leave the batch every 8 steps. Sampling is at T = 1 from the full distribution."""
    eos = tok.eos_token_id
    gen = torch.Generator().manual_seed(seed)
    rows = [_chat(tok, p) for p in prompts]
    caches, first = [], []
    for r in rows:
        c = DynamicCache()
        out = model(input_ids=torch.tensor([r]), past_key_values=c, use_cache=True, logits_to_keep=1)
        caches.append(c)
        first.append(out.logits[0, -1])
    width = max(map(len, rows))
    cache = DynamicCache()
    for li in range(len(caches[0].layers)):
        pad = [(0, 0, width - len(r), 0) for r in rows]
        keys = torch.cat([F.pad(c.layers[li].keys, p) for c, p in zip(caches, pad)])
        values = torch.cat([F.pad(c.layers[li].values, p) for c, p in zip(caches, pad)])
        cache.update(keys, values, li)
    del caches
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    pos = torch.tensor([[len(r)] for r in rows])
    live = list(range(len(rows)))            # batch row -> record index
    new: list[list[int]] = [[] for _ in rows]
    logits = torch.stack(first)
    for step in range(max_new):
        nxt = (torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen) if sampled
               else logits.argmax(-1, keepdim=True))
        for b, i in enumerate(live):
            if not new[i] or new[i][-1] != eos:
                new[i].append(int(nxt[b]))
        if step == max_new - 1 or all(new[i][-1] == eos for i in live):
            break
        if step % 8 == 7:  # drop finished rows from the batch
            keep = [b for b, i in enumerate(live) if new[i][-1] != eos]
            if len(keep) < len(live):
                idx = torch.tensor(keep)
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[idx], layer.values[idx]
                mask, pos, nxt, live = mask[idx], pos[idx], nxt[idx], [live[b] for b in keep]
        mask = torch.cat((mask, torch.ones((len(live), 1), dtype=mask.dtype)), 1)
        logits = model(input_ids=nxt, attention_mask=mask, position_ids=pos, past_key_values=cache,
                       use_cache=True).logits[:, -1]
        pos = pos + 1
    return [{"ids": torch.tensor(r + n, dtype=torch.int32), "start": len(r)} for r, n in zip(rows, new)]


@torch.inference_mode()
def features(model, records: list[dict], *, rows: int = 8) -> list[dict]:
    """The target's last hidden state at every position of each record (right-padded batches of `rows`)."""
    decoder = model.get_decoder()
    out = []
    order = sorted(range(len(records)), key=lambda i: len(records[i]["ids"]))  # similar lengths together
    feats: dict[int, torch.Tensor] = {}
    for b in range(0, len(order), rows):
        group = order[b:b + rows]
        width = max(len(records[i]["ids"]) for i in group)
        ids = torch.zeros((len(group), width), dtype=torch.long)
        mask = torch.zeros((len(group), width), dtype=torch.long)
        for j, i in enumerate(group):
            n = len(records[i]["ids"])
            ids[j, :n] = records[i]["ids"].long()
            mask[j, :n] = 1
        hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state
        for j, i in enumerate(group):
            feats[i] = hidden[j, :len(records[i]["ids"])].to(torch.float16).clone()
    for i, rec in enumerate(records):
        out.append({**rec, "feats": feats[i]})
    return out


def load_target(target: Path):
    tok = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    return model, tok


def make(cfg: FeatureDataConfig, log=print, *, with_features: bool = True, export: Path | None = None) -> None:
    """Both stages for every shard not yet on disk (only the answers without `with_features`: for a machine
    that makes answers for a later one); the manifest is rewritten after each shard, and with `export` the
    answers of every shard on disk are written to that file (export_answers) after each one too."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    prompts = feature_prompts(cfg.shards * cfg.batch, seed=cfg.seed)
    manifest_path = cfg.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"shards": {}}
    manifest["config"] = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(cfg).items()}
    loaded = None
    for s in range(cfg.shards):
        ans, feat = cfg.out / f"answers_{s:05d}.pt", cfg.out / f"features_{s:05d}.pt"
        if feat.exists() or (ans.exists() and not with_features):
            continue
        loaded = loaded or load_target(cfg.target)
        model, tok = loaded
        entry = manifest["shards"].setdefault(str(s), {})
        if not ans.exists():
            t0 = time.time()
            recs = answer(model, tok, prompts[s * cfg.batch:(s + 1) * cfg.batch], sampled=cfg.sampled(s),
                          seed=cfg.seed * 1000 + s, max_new=cfg.max_new_tokens)
            _save({"records": recs}, ans)
            entry.update(answer_s=round(time.time() - t0, 1), sampled=cfg.sampled(s),
                         answer_tokens=sum(len(r["ids"]) - r["start"] for r in recs), rows=len(recs),
                         machine=machine(), threads=torch.get_num_threads())
        if with_features:
            t0 = time.time()
            recs = features(model, torch.load(ans, weights_only=True)["records"], rows=cfg.forward_rows)
            _save({"records": recs}, feat)
            entry.update(feature_s=round(time.time() - t0, 1), rows=len(recs),
                         tokens=sum(len(r["ids"]) for r in recs), machine=machine(),
                         threads=torch.get_num_threads())
        manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        if export is not None:
            export_answers(cfg.out, export)
            manifest_beside(export).write_text(json.dumps(manifest, indent=1) + "\n")
        log(f"shard {s}: {entry.get('answer_tokens', '?')} answer tokens, {entry.get('tokens', '?')} in all; "
            f"answers {entry.get('answer_s', '?')} s, features {entry.get('feature_s', '-')} s")


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


def export_answers(folder: Path, path: Path) -> int:
    """The answers of every shard in `folder` as one small file (token ids, no features: a forward remakes
    those in minutes, generation took hours), so that a later machine resumes from them. Returns the shards."""
    shards = sorted(folder.glob("answers_*.pt"))
    ids, offsets, starts, shard_of = [], [0], [], []
    for p in shards:
        s = int(p.stem.split("_")[1])
        for r in torch.load(p, weights_only=True)["records"]:
            ids.append(r["ids"].numpy())
            offsets.append(offsets[-1] + len(r["ids"]))
            starts.append(int(r["start"]))
            shard_of.append(s)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:  # written whole, then renamed: a job stopped mid-write leaves the old file
        np.savez_compressed(f, ids=np.concatenate(ids).astype(np.int32), offsets=np.asarray(offsets, np.int64),
                            starts=np.asarray(starts, np.int32), shards=np.asarray(shard_of, np.int32))
    os.replace(tmp, path)
    return len(shards)


def manifest_beside(answers: Path) -> Path:
    """The manifest kept beside an exported answers file: feature_answers.npz -> feature_manifest.json."""
    return answers.parent / (answers.stem.replace("answers", "manifest") + ".json")


def import_answers(path: Path, folder: Path) -> int:
    """Write `answers_*.pt` shards from an `export_answers` file (an existing shard is kept), and take the
    manifest beside it into the folder's (entries the folder has are kept); the data stage then only
    computes their features. Returns the shards written."""
    data = np.load(path)
    folder.mkdir(parents=True, exist_ok=True)
    if manifest_beside(path).exists():
        mine = folder / "manifest.json"
        theirs = json.loads(manifest_beside(path).read_text())
        merged = json.loads(mine.read_text()) if mine.exists() else {"shards": {}}
        merged["shards"] = {**theirs.get("shards", {}), **merged["shards"]}
        mine.write_text(json.dumps(merged, indent=1) + "\n")
    by_shard: dict[int, list[dict]] = {}
    for i, s in enumerate(data["shards"].tolist()):
        row = torch.from_numpy(data["ids"][data["offsets"][i]:data["offsets"][i + 1]].copy())
        by_shard.setdefault(s, []).append({"ids": row, "start": int(data["starts"][i])})
    written = 0
    for s, records in by_shard.items():
        target = folder / f"answers_{s:05d}.pt"
        if not target.exists():
            _save({"records": records}, target)
            written += 1
    return written


def load_shards(folder: Path, limit: int | None = None) -> list[dict]:
    """Every record of the feature shards in `folder` (the first `limit` shards when given)."""
    paths = sorted(folder.glob("features_*.pt"))[:limit]
    return [r for p in paths for r in torch.load(p, weights_only=True)["records"]]


def main(argv: list[str] | None = None) -> int:
    """`python -m specsched.runtime.apps.drafts.training.feature_data WORK`: make (or resume) the feature shards."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("work", type=Path)
    ap.add_argument("--shards", type=int, default=40)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=192)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    make(FeatureDataConfig(target=pull(), out=args.work, shards=args.shards, batch=args.batch,
                           max_new_tokens=args.max_new_tokens), log=lambda m: print(m, flush=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
