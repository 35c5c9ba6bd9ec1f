"""Teacher data: the target's own answers to ToT prompts, and its predictions on the public corpus.

Each record is one token sequence plus, for every position the draft is trained on, the target's top-k
next-token log-probabilities. Forward KL(p || q) = sum_v p(v) log p(v)/q(v); restricted to the teacher's
top-k it is, up to a constant in q, the soft cross-entropy -sum_{v in topk} p(v) log q(v), so storing
top-k log-probs makes KD free at training time (k = 8 holds ~90% of the target's mass on its own text).

Work is written as numbered shards (atomic rename); a rerun skips existing shards, so the job resumes.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ....models.pull import pull
from .corpus import fetch_texts, passages
from .prompts import train_prompts

TOPK = 8
PROMPTS = 3200  # size of the seeded prompt list; generation walks it shard by shard


@dataclass(frozen=True, slots=True)
class TeacherConfig:
    """What the teacher generates; the same config always yields the same shard contents."""

    target: Path
    out: Path
    prompts: int = PROMPTS  # the prompt list; only the first `gen_batches` batches are generated
    batch: int = 32  # prompts per shard
    group: int = 4  # shards generated in one batched call: 128 rows amortise each weight read (~2.5x/core)
    gen_batches: int = 10  # shards to generate; raise it when more compute is available
    max_new_tokens: int = 256
    temperature: float = 0.7  # odd groups of shards sample at this temperature, even groups are greedy
    corpus_passages: int = 256
    corpus_tokens: int = 128
    seed: int = 0
    dtype: str = "float32"  # bf16 is ~4x slower on CPUs without native bf16 (no avx512_bf16)

    def __post_init__(self) -> None:
        if min(self.batch, self.group, self.prompts, self.max_new_tokens, self.gen_batches) < 1:
            raise ValueError("batch, group, prompts, gen_batches and max_new_tokens must be positive")


def _save(obj: dict, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _topk(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(logits.float(), dim=-1)
    val, idx = logp.topk(TOPK, dim=-1)
    return idx.to(torch.int32), val.to(torch.float16)


def _load(cfg: TeacherConfig):
    tok = AutoTokenizer.from_pretrained(cfg.target)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=getattr(torch, cfg.dtype)).eval()
    return tok, model


@functools.cache
def _loaded(target: Path, dtype: str):
    """One tokenizer + target per process, shared by every stage that answers prompts."""
    return _load(TeacherConfig(target=target, out=Path(), dtype=dtype))


def answer_shards(target: Path, out: Path, prompts: list[str], *, batch: int, max_new: int, seed0: int,
                  prefix: str = "gen", sampled: Callable[[int], bool] = lambda s: s % 2 == 1,
                  temperature: float = 0.7, log=print) -> None:
    """The target answers `prompts` in shards of `batch` (`OUT/<prefix>_00000.pt`, ...); shard s is
    sampled at `temperature` when `sampled(s)`, else greedy, with seed `seed0 + s`. A shard that exists
    is skipped, so a rerun resumes; a trailing partial batch is not generated."""
    cfg = TeacherConfig(target=target, out=out, max_new_tokens=max_new, temperature=temperature)
    out.mkdir(parents=True, exist_ok=True)
    for s in range(len(prompts) // batch):
        path = out / f"{prefix}_{s:05d}.pt"
        if path.exists():
            continue
        tok, model = _loaded(target, cfg.dtype)
        t0 = time.time()
        records = _generate_rows(cfg, tok, model, prompts[s * batch:(s + 1) * batch], sample=sampled(s),
                                 seed=seed0 + s)
        _save({"records": records}, path)
        log(f"{out.name}/{path.name}: {sum(len(r['ids']) - r['start'] for r in records)} tokens in "
            f"{time.time() - t0:.0f}s")


@torch.inference_mode()
def generate(cfg: TeacherConfig, log=print) -> None:
    """Stage 1: the target answers chat-templated ToT prompts; shards `gen_*.pt`."""
    prompts = train_prompts(cfg.prompts, seed=cfg.seed)
    cfg.out.mkdir(parents=True, exist_ok=True)
    shards = min(cfg.gen_batches, -(-len(prompts) // cfg.batch))
    tok = model = None
    for g0 in range(0, shards, cfg.group):
        todo = [b for b in range(g0, min(g0 + cfg.group, shards)) if not (cfg.out / f"gen_{b:05d}.pt").exists()]
        if not todo:
            continue
        if model is None:
            tok, model = _load(cfg)
        t0 = time.time()
        rows = [(b, p) for b in todo for p in prompts[b * cfg.batch : (b + 1) * cfg.batch]]
        records = _generate_rows(cfg, tok, model, [p for _, p in rows], sample=(g0 // cfg.group) % 2 == 1, seed=g0)
        for b in todo:
            mine = [r for (rb, _), r in zip(rows, records) if rb == b]
            _save({"records": mine}, cfg.out / f"gen_{b:05d}.pt")
        ntok = sum(len(r["ids"]) - r["start"] for r in records)
        mode = f"T={cfg.temperature}" if (g0 // cfg.group) % 2 else "greedy"
        log(f"gen shards {todo}: {ntok} tokens in {time.time() - t0:.0f}s ({mode})")


def _generate_rows(cfg: TeacherConfig, tok, model, prompts: list[str], *, sample: bool, seed: int) -> list[dict]:
    """One batched generate over chat-templated prompts -> a record per prompt (first EOS kept as a target)."""
    chats = [
        tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    enc = tok(chats, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(cfg.seed * 100003 + seed)
    out = model.generate(
        **enc,
        max_new_tokens=cfg.max_new_tokens,
        do_sample=sample,
        temperature=cfg.temperature if sample else None,
        top_p=None,
        top_k=None,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=tok.pad_token_id,
    )
    new = out.sequences[:, enc.input_ids.shape[1] :]
    # Step by step, freeing each step's logits: stacking them first would hold 2-3 copies of
    # [rows, steps, 49152] floats (~20 GB at 128 rows x 256 steps - it was OOM-killed that way).
    steps, top = list(out.logits), []
    del out
    for t in range(len(steps)):
        top.append(_topk(steps[t]))
        steps[t] = None
    ids = torch.stack([i for i, _ in top], dim=1)  # [B, T, k]
    val = torch.stack([v for _, v in top], dim=1)
    records = []
    for r in range(new.shape[0]):
        prompt = enc.input_ids[r][enc.attention_mask[r].bool()]
        gen = new[r]
        stop = (gen == tok.eos_token_id).nonzero()
        n = int(stop[0]) + 1 if len(stop) else gen.shape[0]
        records.append(
            {
                "ids": torch.cat([prompt, gen[:n]]).to(torch.int32),
                "start": len(prompt),
                "top_ids": ids[r, :n].clone(),
                "top_logp": val[r, :n].clone(),
            }
        )
    return records


@torch.inference_mode()
def label_corpus(cfg: TeacherConfig, log=print) -> None:
    """Stage 2: teacher-forced target predictions on public-corpus passages; shards `corpus_*.pt`."""
    texts = passages(fetch_texts(cfg.out / "shakespeare"))
    g = torch.Generator().manual_seed(cfg.seed)
    pick = torch.randperm(len(texts), generator=g)[: cfg.corpus_passages].tolist()
    tok = model = None
    for b, start in enumerate(range(0, len(pick), cfg.batch)):
        shard = cfg.out / f"corpus_{b:05d}.pt"
        if shard.exists():
            continue
        if model is None:
            tok, model = _load(cfg)
            tok.padding_side = "right"
        t0 = time.time()
        batch = [texts[i] for i in pick[start : start + cfg.batch]]
        enc = tok(batch, return_tensors="pt", padding=True, truncation=True, max_length=cfg.corpus_tokens)
        logits = model(**enc).logits
        ids, val = _topk(logits[:, :-1])  # position t predicts token t+1
        records = []
        for r in range(len(batch)):
            n = int(enc.attention_mask[r].sum())
            records.append(
                {
                    "ids": enc.input_ids[r, :n].to(torch.int32),
                    "start": 1,
                    "top_ids": ids[r, : n - 1].clone(),
                    "top_logp": val[r, : n - 1].clone(),
                }
            )
        _save({"records": records}, shard)
        log(f"corpus shard {b}: {len(batch)} passages in {time.time() - t0:.0f}s")


def main() -> None:
    """`python -m specsched.runtime.apps.drafts.training.teacher OUT`: both stages with default settings (resumable)."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = TeacherConfig(target=pull(), out=args.out)
    generate(cfg, log=lambda m: print(m, flush=True))
    label_corpus(cfg, log=lambda m: print(m, flush=True))


if __name__ == "__main__":
    main()
