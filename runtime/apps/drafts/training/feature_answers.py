"""The teacher's answers kept apart from their features: one small file of token ids (and the manifest
beside it) that a later machine resumes from. Generation took hours on 2 cores; the features are a forward,
minutes, made again by whichever machine trains."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch


def save_atomically(obj, path: Path) -> None:
    """torch.save to a temporary file, then renamed: a job stopped mid-write leaves the old file or none."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


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


def _merged_entry(ours: dict | None, theirs: dict) -> dict:
    """A shard's manifest entry: the folder's own where it has one, plus each note of the committed entry
    (`X_note`, written there by hand: "paused during this shard") whose `X` both entries record alike, so the
    note survives the folder's next export yet never sits beside another machine's measurement."""
    if ours is None:
        return theirs
    def annotates_ours(key: str) -> bool:
        value = key.removesuffix("_note")
        return key != value and value in ours and ours[value] == theirs.get(value)
    notes = {k: v for k, v in theirs.items() if annotates_ours(k)}
    return {**ours, **notes}


def import_answers(path: Path, folder: Path) -> int:
    """Write `answers_*.pt` shards from an `export_answers` file (an existing shard is kept), and take the
    manifest beside it into the folder's (entries the folder has are kept, with the notes of theirs that
    annotate a value both record: _merged_entry); the data stage then only computes their features. Returns
    the shards written."""
    data = np.load(path)
    folder.mkdir(parents=True, exist_ok=True)
    if manifest_beside(path).exists():
        mine = folder / "manifest.json"
        theirs = json.loads(manifest_beside(path).read_text())
        merged = json.loads(mine.read_text()) if mine.exists() else {"shards": {}}
        ours, kept = merged["shards"], theirs.get("shards", {})
        merged["shards"] = {k: _merged_entry(ours.get(k), kept.get(k, {})) for k in {**kept, **ours}}
        mine.write_text(json.dumps(merged, indent=1) + "\n")
    # each data[key] of an npz decompresses its array again: read each once
    ids, offsets, starts = data["ids"], data["offsets"], data["starts"]
    by_shard: dict[int, list[dict]] = {}
    for i, s in enumerate(data["shards"].tolist()):
        row = torch.from_numpy(ids[offsets[i]:offsets[i + 1]].copy())
        by_shard.setdefault(s, []).append({"ids": row, "start": int(starts[i])})
    written = 0
    for s, records in by_shard.items():
        target = folder / f"answers_{s:05d}.pt"
        if not target.exists():
            save_atomically({"records": records}, target)
            written += 1
    return written
