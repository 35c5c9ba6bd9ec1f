"""Training loops of the `tiny` preset: a target from scratch, then a draft distilled from it.

Both read random windows of one token stream (the training passages joined by EOS). A batch is a pure
function of (seed, step), and a checkpoint holds the model, the optimiser and the step, so a resumed run
takes exactly the steps an uninterrupted one would. Losses, per predicted token t:

    target:  cross-entropy        -log p(x_t | x_<t)
    draft:   forward KL(p || q) = sum_v p(v) (log p(v) - log q(v)),  p = target softmax at temperature 1
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from .train import warmup_cosine

Log = Callable[[str], None]
Loss = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, slots=True)
class Schedule:
    """Optimisation of one model: AdamW, linear warm-up, cosine decay to 10% of the peak."""

    steps: int
    lr: float
    batch: int = 16
    seq_len: int = 256
    warmup: int = 30
    weight_decay: float = 0.1
    seed: int = 0
    ckpt_every_s: float = 60.0

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.seq_len < 2:
            raise ValueError(f"steps, batch and seq_len must be positive, got {self}")

    def lr_at(self, step: int) -> float:
        return warmup_cosine(step, lr=self.lr, warmup=self.warmup, steps=self.steps)


def windows(stream: torch.Tensor, sched: Schedule, step: int) -> torch.Tensor:
    """`batch` windows of `seq_len` tokens at random offsets; the same (seed, step) gives the same batch."""
    gen = torch.Generator().manual_seed(sched.seed * 1_000_003 + step)
    starts = torch.randint(0, len(stream) - sched.seq_len, (sched.batch,), generator=gen)
    return torch.stack([stream[s : s + sched.seq_len] for s in starts.tolist()])


def cross_entropy(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids[:, :-1]).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())


def distillation(teacher: torch.nn.Module) -> Loss:
    """Forward KL from the frozen teacher's full next-token distribution (temperature 1)."""

    def loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            logp = F.log_softmax(teacher(input_ids=ids).logits.float(), dim=-1)
        logq = F.log_softmax(model(input_ids=ids).logits.float(), dim=-1)
        return F.kl_div(logq.flatten(0, 1), logp.flatten(0, 1), log_target=True, reduction="batchmean")

    return loss


def _save(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int, wall: float) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "wall": wall}, tmp)
    os.replace(tmp, path)  # atomic: a crash leaves the previous checkpoint


def train(model: torch.nn.Module, loss_fn: Loss, stream: torch.Tensor, sched: Schedule, ckpt: Path,
          *, log: Log = print, name: str = "model") -> tuple[int, float]:
    """Train `model` in place, resuming from `ckpt` if it exists; returns (steps, seconds trained in all)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]  # no weight decay on norms
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": sched.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=sched.lr, betas=(0.9, 0.95))
    step, wall = 0, 0.0
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, wall = state["step"], state["wall"]
        log(f"{name}: resumed at step {step} ({wall / 60:.1f} min trained)")
    model.train()
    saved, recent = time.time(), []
    while step < sched.steps:
        t0 = time.time()
        for group in opt.param_groups:
            group["lr"] = sched.lr_at(step)
        loss = loss_fn(model, windows(stream, sched, step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step, wall = step + 1, wall + time.time() - t0
        recent = [*recent[-19:], loss.item()]
        if step % 25 == 0 or step == sched.steps:
            log(f"{name}: step {step}/{sched.steps} loss {sum(recent) / len(recent):.3f} "
                f"lr {sched.lr_at(step - 1):.1e} {time.time() - t0:.2f} s/step, {wall / 60:.1f} min")
        if time.time() - saved > sched.ckpt_every_s or step == sched.steps:
            _save(ckpt, model, opt, step, wall)
            saved = time.time()
    return step, wall


@torch.no_grad()
def mean_loss(model: torch.nn.Module, loss_fn: Loss, stream: torch.Tensor, sched: Schedule, batches: int) -> float:
    """The loss on `batches` fixed windows of `stream` (held-out text), model in eval mode."""
    model.eval()
    return sum(loss_fn(model, windows(stream, sched, -1 - i)).item() for i in range(batches)) / batches
