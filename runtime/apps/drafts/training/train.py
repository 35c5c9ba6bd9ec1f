"""Distil the target into the draft: forward KL on the teacher's top-k, resumable from checkpoints.

loss = -sum_{v in topk ∩ V_d} p̂(v) log q(v), with p̂ the teacher's top-k probabilities renormalised over
the draft vocabulary V_d. Up to terms constant in q this is KL(p̂ || q), the EDD objective (forward KL
beats plain cross-entropy on the sampled token because it also teaches the runner-up tokens).
"""

from __future__ import annotations

import math
import os
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

from ....models.draft_model import DraftConfig, DraftLM, save_draft
from .distill_data import Example, always_in, choose_vocab, collate, load_records, to_example
from .draft_init import compress_target, residual_basis
from .prompts import train_prompts
from .teacher import PROMPTS


@dataclass(slots=True)
class TrainConfig:
    """One training run; `out` holds `ckpt.pt` (resume point) and `final/` (the exported draft)."""

    data: Path
    out: Path
    target: Path
    draft: DraftConfig = field(default_factory=DraftConfig)
    source_layers: tuple[int, ...] = (0, 1)
    steps: int = 300
    batch: int = 12
    max_len: int = 448
    lr: float = 1.5e-3
    warmup: int = 20
    corpus_share: float = 0.2  # fraction of each batch drawn from the public corpus
    seed: int = 0
    ckpt_every_s: float = 120.0

    def __post_init__(self) -> None:
        if len(self.source_layers) != self.draft.layers:
            raise ValueError("source_layers must name one target layer per draft layer")


def warmup_cosine(step: int, *, lr: float, warmup: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak (every training recipe here uses it)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.45 * (1 + math.cos(math.pi * t)))


def lr_at(cfg: TrainConfig, step: int) -> float:
    return warmup_cosine(step, lr=cfg.lr, warmup=cfg.warmup, steps=cfg.steps)


def kd_loss(draft: DraftLM, lut: torch.Tensor, batch: dict[str, torch.Tensor], hard: float = 0.0) -> torch.Tensor:
    """Forward KL on the teacher's top-k (renormalised over the draft vocabulary), plus `hard` times the
    cross-entropy of the teacher's argmax: greedy verification accepts a token only when it is the
    target's argmax, and KL alone spends the draft's small capacity on the tail too."""
    logits, _ = draft.draft_logits(batch["ids"], attention_mask=batch["attn"])
    logq = F.log_softmax(logits.float(), dim=-1)
    idx = lut[batch["top_ids"]]  # teacher ids -> draft vocab index, -1 outside it
    p = batch["top_logp"].exp() * (idx >= 0)
    mass = p.sum(-1)
    mask = batch["mask"] & (mass > 0)
    p = p / mass.clamp_min(1e-8).unsqueeze(-1)
    logq_top = logq.gather(-1, idx.clamp_min(0))
    loss = -(p * logq_top).sum(-1)
    if hard:
        # top_ids[..., 0] is the teacher's argmax (topk is sorted); outside the draft vocabulary: no term
        loss = loss - hard * logq_top[..., 0] * (idx[..., 0] >= 0)
    return (loss * mask).sum() / mask.sum().clamp_min(1)


def vocab_lut(draft: DraftLM) -> torch.Tensor:
    """Target token id -> index in the draft's output vocabulary, -1 outside it (what kd_loss reads)."""
    lut = torch.full((draft.cfg.target_vocab,), -1, dtype=torch.long)
    lut[draft.vocab_ids] = torch.arange(draft.cfg.draft_vocab)
    return lut


def kd_step(draft: DraftLM, lut: torch.Tensor, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor],
            lr: float, hard: float = 0.0) -> torch.Tensor:
    """One AdamW step on the KD loss at learning rate `lr`, gradients clipped to norm 1; returns the loss."""
    for group in opt.param_groups:
        group["lr"] = lr
    loss = kd_loss(draft, lut, batch, hard)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
    opt.step()
    return loss


def _build(cfg: TrainConfig, gen: list[dict], corpus: list[dict]) -> DraftLM:
    """Choose the vocabulary and compress the target into the initial draft (deterministic)."""
    tok = AutoTokenizer.from_pretrained(cfg.target)
    target = AutoModelForCausalLM.from_pretrained(cfg.target, dtype=torch.float32).eval()
    prompts = [tok(p, add_special_tokens=False).input_ids for p in train_prompts(PROMPTS)]
    vocab = choose_vocab(gen, corpus, prompts, cfg.draft.draft_vocab, always_in(tok), cfg.draft.target_vocab)
    sample = torch.cat([r["ids"].long() for r in gen[:16]])[None, :2048]
    with torch.no_grad():
        hs = target(sample, output_hidden_states=True).hidden_states
    basis = residual_basis([hs[0], *(hs[i] for i in cfg.source_layers), hs[-1]], cfg.draft.hidden)
    return compress_target(target, cfg.draft, cfg.source_layers, vocab, basis)


def save_checkpoint(path: Path, draft: DraftLM, opt: torch.optim.Optimizer, step: int, **extra) -> None:
    """Trainable weights, optimiser state and step (plus `extra`), written atomically: a resume point."""
    tmp = path.with_suffix(".tmp")
    torch.save({"model": draft.trainable_state(), "opt": opt.state_dict(), "step": step, **extra}, tmp)
    os.replace(tmp, path)


def train(cfg: TrainConfig, log=print) -> Path:
    """Train (or resume) and export `out/final`; returns that directory."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    gen, corpus = load_records(cfg.data, "gen_*.pt"), load_records(cfg.data, "corpus_*.pt")
    if not gen:
        raise FileNotFoundError(f"no teacher shards in {cfg.data}: run the teacher stage first")
    torch.manual_seed(cfg.seed)
    draft = _build(cfg, gen, corpus)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.98), weight_decay=0.01)
    ckpt, step, wall = cfg.out / "ckpt.pt", 0, 0.0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        draft.vocab_ids = state["model"].pop("vocab_ids")
        draft.load_state_dict(state["model"], strict=False)
        opt.load_state_dict(state["opt"])
        step, wall = state["step"], state["wall"]
        log(f"resumed at step {step} ({wall / 60:.1f} min trained)")
    lut = vocab_lut(draft)
    gen_ex = [to_example(r, cfg.max_len) for r in gen]
    corpus_ex = [to_example(r, cfg.max_len) for r in corpus]
    n_corpus = round(cfg.batch * cfg.corpus_share) if corpus_ex else 0
    draft.train()
    t_ckpt = time.time()
    while step < cfg.steps:
        t0 = time.time()
        rng = random.Random(cfg.seed * 1_000_003 + step)  # batch depends only on (seed, step): resumable
        batch: list[Example] = rng.sample(gen_ex, cfg.batch - n_corpus) + rng.sample(corpus_ex, n_corpus)
        loss = kd_step(draft, lut, opt, collate(batch, pad_id=0), lr_at(cfg, step))
        step, wall = step + 1, wall + time.time() - t0
        if step % 10 == 0 or step == cfg.steps:
            log(
                f"step {step}/{cfg.steps} loss {loss.item():.3f} lr {lr_at(cfg, step - 1):.2e} "
                f"{time.time() - t0:.1f}s/step, {wall / 60:.1f} min"
            )
        if time.time() - t_ckpt > cfg.ckpt_every_s or step == cfg.steps:
            save_checkpoint(ckpt, draft, opt, step, wall=wall)
            t_ckpt = time.time()
    meta = {
        "steps": cfg.steps,
        "train_minutes": round(wall / 60, 1),
        "seed": cfg.seed,
        "teacher_gen_records": len(gen),
        "teacher_corpus_records": len(corpus),
        **{k: v for k, v in asdict(cfg).items() if k in ("batch", "lr", "max_len", "source_layers")},
    }
    final = cfg.out / "final"
    save_draft(draft.eval(), final, meta=meta)
    return final
