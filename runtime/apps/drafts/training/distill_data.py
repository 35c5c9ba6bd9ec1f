"""Teacher shards -> training examples and the draft's output vocabulary.

A record holds token ids and, from position `start - 1` on, the target's top-k next-token log-probs;
an example turns that into per-position soft targets over the draft's restricted vocabulary.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(slots=True)
class Example:
    ids: torch.Tensor  # [L] int64 input tokens
    top_ids: torch.Tensor  # [L, k] teacher's top-k next tokens at each position (0 where unsupervised)
    top_logp: torch.Tensor  # [L, k] their log-probs
    mask: torch.Tensor  # [L] bool: position carries a teacher target

    def __len__(self) -> int:
        return len(self.ids)


def load_records(data: Path, pattern: str) -> list[dict]:
    records: list[dict] = []
    for shard in sorted(data.glob(pattern)):
        records += torch.load(shard, weights_only=True)["records"]
    return records


def to_example(rec: dict, max_len: int) -> Example:
    ids = rec["ids"].long()[:max_len]
    n, k = len(ids), rec["top_ids"].shape[1]
    top_ids = torch.zeros(n, k, dtype=torch.long)
    top_logp = torch.full((n, k), -1e4)
    mask = torch.zeros(n, dtype=torch.bool)
    first = rec["start"] - 1  # position predicting the first supervised token
    m = min(len(rec["top_ids"]), n - first)
    top_ids[first : first + m] = rec["top_ids"][:m].long()
    top_logp[first : first + m] = rec["top_logp"][:m].float()
    mask[first : first + m] = True
    return Example(ids, top_ids, top_logp, mask)


def always_in(tok) -> list[int]:
    """The ids every V' holds whatever the data: EOS, the chat template's markers and the newline, which open,
    shape and end every answer. A marker the tokenizer lacks (it maps it to its unknown id) is left out."""
    marks = tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    found = [*marks, *tok.encode("\n", add_special_tokens=False)[-1:]]
    return sorted({tok.eos_token_id, *(t for t in found if t is not None and t != tok.unk_token_id)} - {None})


def choose_vocab(
    gen: list[dict], corpus: list[dict], prompts_ids: list[list[int]], size: int, always: list[int], vocab_size: int
) -> torch.Tensor:
    """The `size` tokens the target emits most: its own ToT outputs count 1, prompt tokens (often copied
    into answers) 0.5, corpus tokens 0.1; `always` (EOS and friends) are forced in. Sorted ids [size]."""
    counts: Counter[int] = Counter()
    for rec in gen:
        counts.update(rec["ids"][rec["start"] :].tolist())
    for ids in prompts_ids:
        for t in ids:
            counts[t] += 0.5
    for rec in corpus:
        for t in rec["ids"].tolist():
            counts[t] += 0.1
    for t in always:
        counts[t] += 1e9
    chosen = [t for t, _ in counts.most_common(size)]
    # Too little data to rank `size` tokens: fill up with the lowest unused ids, since BPE ids follow merge
    # order, which roughly follows frequency in the tokenizer's training corpus.
    taken = set(chosen)
    chosen += [t for t in range(vocab_size) if t not in taken][: size - len(chosen)]
    return torch.tensor(sorted(chosen), dtype=torch.long)


def collate(batch: list[Example], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad to the longest example; padded positions are unsupervised and masked from attention."""
    n, k = max(len(e) for e in batch), batch[0].top_ids.shape[1]
    out = {
        "ids": torch.full((len(batch), n), pad_id, dtype=torch.long),
        "attn": torch.zeros(len(batch), n, dtype=torch.long),
        "top_ids": torch.zeros(len(batch), n, k, dtype=torch.long),
        "top_logp": torch.full((len(batch), n, k), -1e4),
        "mask": torch.zeros(len(batch), n, dtype=torch.bool),
    }
    for i, e in enumerate(batch):
        m = len(e)
        out["ids"][i, :m], out["attn"][i, :m] = e.ids, 1
        out["top_ids"][i, :m], out["top_logp"][i, :m], out["mask"][i, :m] = e.top_ids, e.top_logp, e.mask
    return out
