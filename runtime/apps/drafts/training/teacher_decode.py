"""The target answering a batch of prompts, for the feature draft's teacher data (feature_data.py).

Each prompt is one user turn of the target's chat template. The rows are decoded in a few batches of similar
prompt lengths (length_buckets), each into a preallocated KV cache, each prompt prefilled alone on a CPU; rows
leave their batch as they reach EOS. Greedy rows are what transformers' `generate` gives each prompt alone;
sampled rows draw at T = 1 from the full distribution, from one seeded stream.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, StaticCache

from ....models.growing_cache import cache_keyword

# Cache positions that a decode step's extra batch is taken to cost (length_buckets). Measured on 2 cores of an
# AMD EPYC (2026-11-29), one step of the fp32 target: 93 ms for 1 row over 385 positions (the weights' pass),
# 449 ms for 48 rows over 385 and 535 ms over 790. At 4,096 a shard's 5 long ToT prompts decode apart from its
# 43 others: 108 s against 123 s in one batch (shard 2, greedy, the same tokens in every row).
BUCKET_OVERHEAD = 4096


def chat_ids(tok, prompt: str) -> list[int]:
    """The prompt as one user turn of the target's chat template, ending where the assistant's answer starts."""
    out = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True)
    return list(out["input_ids"] if hasattr(out, "keys") else out)


@torch.inference_mode()
def answer(model, tok, prompts: list[str], *, sampled: bool | Sequence[bool], seed: int, max_new: int,
           prefill: str = "auto", buckets: int | None = None, overhead: int = BUCKET_OVERHEAD,
           keep_features: bool = False) -> list[dict]:
    """The target's answers, batched -> a record {ids, start} per prompt, cut after the first EOS.

    The prompts are decoded in at most `buckets` batches of similar prompt lengths (length_buckets; default 3
    on a CPU, 1 on a GPU), one after the other with one random stream: a batch's KV cache is preallocated
    for its longest prompt + `max_new`, and attention reads all of it at every step, so a few long ToT
    prompts (~600 tokens against a median of ~80) would otherwise set every row's width. `sampled`: for
    every row, or per row; a sampled row draws at T = 1 from the full distribution, the others take the
    argmax. `prefill` and `keep_features`: see decode()."""
    device = next(model.parameters()).device
    gen = torch.Generator(device=device).manual_seed(seed)
    rows = [chat_ids(tok, p) for p in prompts]
    flags = [sampled] * len(rows) if isinstance(sampled, bool) else list(sampled)
    if len(flags) != len(rows):
        raise ValueError(f"{len(flags)} sampling flags for {len(rows)} prompts")
    most = buckets if buckets is not None else (3 if device.type == "cpu" else 1)
    out: list[dict] = [{} for _ in rows]
    for group in length_buckets([len(r) for r in rows], max_new, most, overhead):
        done = decode(model, [rows[i] for i in group], [flags[i] for i in group], gen=gen, max_new=max_new,
                      eos=tok.eos_token_id, prefill=prefill, keep_features=keep_features)
        for i, record in zip(group, done):
            out[i] = record
    return out


def length_buckets(lengths: list[int], max_new: int, most: int, overhead: int = BUCKET_OVERHEAD) -> list[list[int]]:
    """Row indices in at most `most` groups of contiguous prompt lengths, minimising the cache positions read
    per decode step, sum over groups of rows x (longest prompt + max_new), plus `overhead` positions for each
    group after the first (its own pass over the weights). Exact, by dynamic programming over the sorted
    lengths."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    if n == 0:
        return []
    inf = float("inf")
    # best[g][j]: the least cost of the first j rows (sorted) in g groups; cut[g][j]: where the last one starts
    best = [[inf] * (n + 1) for _ in range(most + 1)]
    cut = [[0] * (n + 1) for _ in range(most + 1)]
    best[0][0] = 0
    for g in range(1, most + 1):
        for j in range(1, n + 1):
            for i in range(j):
                cost = best[g - 1][i] + (j - i) * (lengths[order[j - 1]] + max_new) + (overhead if g > 1 else 0)
                if cost < best[g][j]:
                    best[g][j], cut[g][j] = cost, i
    g = min(range(1, most + 1), key=lambda k: best[k][n])
    groups, j = [], n
    while g:
        i = cut[g][j]
        groups.append(order[i:j])
        j, g = i, g - 1
    return groups[::-1]


@torch.inference_mode()
def decode(model, rows: list[list[int]], flags: list[bool], *, gen: torch.Generator, max_new: int, eos: int,
           prefill: str = "auto", keep_features: bool = False) -> list[dict]:
    """One batch of prompt ids decoded together into a preallocated KV cache -> {ids, start} per row, and with
    `keep_features` its `feats` (float16 [n, d]: the last hidden state after each of its n tokens, the input of
    the LM head), taken from the decode's own forwards: its prompt's from the prefill, each new token's from
    the step that reads it, and one more step reads the last tokens. They are what feature_data.features
    computes in a forward of its own, up to the rounding of a cached forward.

    `prefill` "each" (auto on a CPU) prefills each prompt alone - a padded batch prefill took 4x longer on a
    2-core CPU: its attention mask leaves the fast causal path - and left-pads the caches into one batch;
    "batch" (auto on a GPU, where one forward per prompt would leave it idle) prefills them left-padded in one
    forward. Rows that are done (EOS, read too when features are kept) leave the batch every 8 steps.

    The KV cache is a StaticCache, written in place: a growing cache copies itself at every step, 58 % of a
    48-row decode step's time on a 2-core CPU (a greedy shard in 118 s against 146 s, the same tokens)."""
    device = next(model.parameters()).device
    draws = torch.tensor(flags, device=device)
    width = max(map(len, rows))
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
    if prefill == "batch" or (prefill == "auto" and device.type != "cpu"):
        cache = StaticCache(config=model.config, max_cache_len=width + max_new)
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows], device=device)
        logits, hidden = _forward(model, cache, input_ids=ids, attention_mask=mask,
                                  position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
        prompt_feats = [hidden[j, width - len(r):] for j, r in enumerate(rows)]
    else:
        cache, logits, prompt_feats = _prefill_each(model, rows, width + max_new, device)
    feats: list[list[torch.Tensor]] = [[f.to("cpu", torch.float16)] if keep_features else [] for f in prompt_feats]
    fed = [len(r) for r in rows]             # tokens of each record read by a forward so far
    pos = torch.tensor([[len(r)] for r in rows], device=device)
    live = list(range(len(rows)))            # batch row -> record index
    new: list[list[int]] = [[] for _ in rows]

    def done(i: int) -> bool:
        return new[i][-1] == eos and (not keep_features or fed[i] == len(rows[i]) + len(new[i]))
    for step in range(max_new):
        nxt = logits.argmax(-1, keepdim=True)
        if any(flags[i] for i in live):  # one draw for the whole batch, kept where the row samples
            nxt = torch.where(draws[:, None], torch.multinomial(torch.softmax(logits.float(), -1), 1, generator=gen),
                              nxt)
        for i, t in zip(live, nxt[:, 0].tolist()):  # one copy from the device per step
            if not new[i] or new[i][-1] != eos:
                new[i].append(t)
        last = step == max_new - 1 or all(new[i][-1] == eos for i in live)
        if last and not keep_features:
            break
        if step % 8 == 7:  # drop rows that are done from the batch
            keep = [b for b, i in enumerate(live) if not done(i)]
            if len(keep) < len(live):
                idx = torch.tensor(keep, device=device)
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[idx], layer.values[idx]
                mask, pos, nxt, draws = mask[idx], pos[idx], nxt[idx], draws[idx]
                live = [live[b] for b in keep]
        mask = torch.cat((mask, torch.ones((len(live), 1), dtype=mask.dtype, device=device)), 1)
        logits, hidden = _forward(model, cache, input_ids=nxt, attention_mask=mask, position_ids=pos)
        pos = pos + 1
        if keep_features:
            hidden = hidden[:, 0].to("cpu", torch.float16)
            for b, i in enumerate(live):
                if fed[i] < len(rows[i]) + len(new[i]):  # this step read the row's own token, not one after EOS
                    feats[i].append(hidden[b:b + 1])
                    fed[i] += 1
        if last:
            break
    out = [{"ids": torch.tensor(r + n, dtype=torch.int32), "start": len(r)} for r, n in zip(rows, new)]
    if keep_features:
        for record, f in zip(out, feats):
            record["feats"] = torch.cat(f)
            assert len(record["feats"]) == len(record["ids"])
    return out


def _forward(model, cache, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """(the last position's logits, the last hidden state at every position) of one forward into `cache`: the
    decoder and the LM head called apart, as the model's own forward calls them."""
    decoder = model.get_decoder()
    hidden = decoder(use_cache=True, **{cache_keyword(decoder): cache}, **inputs).last_hidden_state
    return model.lm_head(hidden[:, -1]), hidden


def _prefill_each(model, rows: list[list[int]], capacity: int, device) -> tuple[StaticCache, torch.Tensor, list]:
    """Each prompt prefilled alone, its keys and values left-padded to the longest prompt and written into one
    cache of `capacity` positions; the last logits of each, and each one's hidden states."""
    caches, first, hidden = [], [], []
    for r in rows:
        c = DynamicCache()
        logits, h = _forward(model, c, input_ids=torch.tensor([r], device=device))
        caches.append(c)
        first.append(logits[0])
        hidden.append(h[0])
    width = max(map(len, rows))
    pad = [(0, 0, width - len(r), 0) for r in rows]  # each row's keys and values left-padded to `width`
    cache = StaticCache(config=model.config, max_cache_len=capacity)
    for li, layer in enumerate(cache.layers):
        layer.update(torch.cat([F.pad(c.layers[li].keys, p) for c, p in zip(caches, pad)]),
                     torch.cat([F.pad(c.layers[li].values, p) for c, p in zip(caches, pad)]))
    return cache, torch.stack(first), hidden
