"""Train the feature draft on feature shards (feature_data.py): resumable, one seeded batch per step.

Per position e (entry (g_e, t_e), target feature f_e, target distribution p_e = softmax(f_e · W'ᵀ) on the
draft vocabulary V', renormalised there):

    loss_e = KL(p_e || q_e) + tv · ½ Σ_x |p_e(x) - q_e(x)| + reg · SmoothL1(f̂_e, f_e) / s²

- KL at T = 1, forward (EDD §3.1): sampled acceptance is E[Σ min(p, q)] = 1 - TV(p, q), which KL bounds
  (Pinsker), and greedy acceptance follows the argmax it also teaches;
- the total variation itself, weighted `tv` (0: off): 1 - TV is the sampled acceptance, so this term asks for
  it directly, where forward KL also pays to cover p's tail (DistillSpec, Zhou et al. 2023, compares such
  divergences for drafts);
- the feature regression (EAGLE's L_reg) keeps f̂ near the target's features, so a drafted f̂ fed back as
  the next entry's g looks like the f it stands in for; s is the features' RMS, so `reg` is scale-free;
- noise: g_e gets uniform noise of half-width `noise` · s during training (EAGLE §4.3): drafting reads
  its own, imperfect f̂;
- `unroll` 2: a second pass where every entry reads the first pass's f̂_{e-1} instead of f_{e-1}, with the
  same targets, weighted ½: training sees what a second drafted token sees (EAGLE-3's training-time test,
  in its simplest form).
Prompt positions count `prompt_weight`, answer positions 1.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ....models.feature_draft import FeatureDraft, file_names, shifted
from .train import warmup_cosine

NOT_COMPARED = frozenset({"ckpt_every_s", "budget_s"})  # settings a resumed run may change unremarked


@dataclass(frozen=True, slots=True)
class FeatureTrainConfig:
    steps: int = 2000
    batch: int = 8
    max_len: int = 512
    lr: float = 1e-3
    warmup: int = 50
    reg: float = 0.5
    tv: float = 0.0
    noise: float = 0.1
    unroll: int = 2
    prompt_weight: float = 0.2
    prompt_keep: int = 128  # prompt tokens kept before the answer (RoPE is relative: a left crop changes nothing else)
    seed: int = 0
    ckpt_every_s: float = 120.0
    budget_s: float = 0.0  # > 0: fewer steps than `steps` where they would not fit in this many seconds

    def __post_init__(self) -> None:
        if min(self.steps, self.batch, self.max_len) < 1 or self.unroll not in (1, 2):
            raise ValueError("steps, batch and max_len must be at least 1, unroll 1 or 2")
        if self.seed < 0:
            raise ValueError("seed must be 0 or more")
        if not 0 <= self.tv < float("inf"):
            raise ValueError("tv must be a finite weight of 0 or more")
        if not 0 <= self.budget_s < float("inf"):
            raise ValueError("budget_s must be a finite number of seconds, 0 for none")


def fitted_steps(planned: int, done: int, timed: int, elapsed_s: float, budget_s: float) -> int:
    """The steps a run can make in `budget_s` seconds, after `timed` steps took `elapsed_s` of it and `done`
    steps are made in all: at most `planned`, at least `done`."""
    rate = elapsed_s / max(1, timed)
    return max(done, min(planned, done + int((budget_s - elapsed_s) / max(rate, 1e-9))))


def crop(record: dict, keep: int) -> dict:
    """The record from `keep` tokens before its answer on: long ToT prompts (a Blocksworld header is ~400
    tokens) would otherwise take most of a step's compute for positions weighted `prompt_weight`."""
    cut = max(0, int(record["start"]) - keep)
    return {"ids": record["ids"][cut:], "feats": record["feats"][cut:], "start": int(record["start"]) - cut}


def collate(records: list[dict], max_len: int, keep: int | None = None) -> dict[str, torch.Tensor]:
    """Right-padded ids, features and loss weights (0 on padding and on the last real position); with
    `keep`, each record cropped to `keep` prompt tokens first."""
    if keep is not None:
        records = [crop(r, keep) for r in records]
    n = min(max(len(r["ids"]) for r in records), max_len)
    d = records[0]["feats"].shape[1]
    ids = torch.zeros((len(records), n), dtype=torch.long)
    feats = torch.zeros((len(records), n, d))
    answer = torch.zeros((len(records), n))
    prompt = torch.zeros((len(records), n))
    for i, r in enumerate(records):
        m = min(len(r["ids"]), n)
        ids[i, :m] = r["ids"][:m].long()
        feats[i, :m] = r["feats"][:m].float()
        start = int(r["start"])
        # position e predicts ids[e + 1]: the answer's tokens are predicted from e = start - 1 on
        prompt[i, :max(0, min(start - 1, m - 1))] = 1
        answer[i, max(0, start - 1):m - 1] = 1
    return {"ids": ids, "feats": feats, "answer": answer, "prompt": prompt}


def feature_scale(records: list[dict]) -> float:
    """RMS of the target's features over (a sample of) the records."""
    x = torch.cat([r["feats"][:256].float() for r in records[:64]])
    return float(x.pow(2).mean().sqrt())


def losses(model: FeatureDraft, batch: dict[str, torch.Tensor], cfg: FeatureTrainConfig, scale: float,
           gen: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    ids, feats = batch["ids"], batch["feats"]
    weight = batch["answer"] + cfg.prompt_weight * batch["prompt"]
    positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
    with torch.no_grad():
        logp = torch.log_softmax(model.logits(feats), dim=-1)  # the target's p on V', renormalised
        p = logp.exp()  # read by every pass's KL (and TV)
    g = shifted(feats)
    if cfg.noise:
        g = g + (torch.rand(g.shape, generator=gen, device=g.device) * 2 - 1) * cfg.noise * scale
    total, parts = 0.0, {}
    for k in range(cfg.unroll):
        pred, _ = model.step(g, ids, positions)
        logq = torch.log_softmax(model.logits(pred), dim=-1)
        kl = (p * (logp - logq)).sum(-1)
        reg = F.smooth_l1_loss(pred / scale, feats / scale, reduction="none", beta=0.5).mean(-1)
        per = kl + cfg.reg * reg
        if cfg.tv:
            per = per + cfg.tv * 0.5 * (p - logq.exp()).abs().sum(-1)
        term = (per * weight).sum() / weight.sum()
        total = total + (1.0 if k == 0 else 0.5) * term
        with torch.no_grad():
            top = ((logq.argmax(-1) == logp.argmax(-1)).float() * batch["answer"]).sum() / batch["answer"].sum()
        parts.update({f"kl{k}": float((kl.detach() * weight).sum() / weight.sum()), f"top1_{k}": float(top)})
        g = shifted(pred)  # pass 2 reads the first pass's predictions
    return total, parts


def train(model: FeatureDraft, records: list[dict], cfg: FeatureTrainConfig, ckpt: Path | None = None,
          log=print, device: str = "cpu", clock=time.monotonic) -> FeatureDraft:
    """`cfg.steps` AdamW steps on `device` (the records stay on the CPU; each batch goes over). Batch `step` and
    its input noise are drawn with seed (cfg.seed, step), so a run resumed from `ckpt` (weights, optimiser, step;
    written every `cfg.ckpt_every_s`) ends where an unbroken one does, and another seed reads the shards in
    another order. With `cfg.budget_s` (a lease of GPU time), the plan shrinks to the steps that fit, timed over
    the first steps and fixed before the warm-up ends, so the cosine still runs its whole course (`clock`:
    seconds, for the budget and the checkpoints' spacing). The draft comes back on the CPU."""
    model.to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    start = 0
    if ckpt is not None and ckpt.exists():
        state = torch.load(ckpt, weights_only=True, map_location="cpu")  # load_state_dict places them
        model.load_state_dict(file_names(state["model"]))  # strict: a draft of other layers is refused
        opt.load_state_dict(state["opt"])
        start = int(state["step"])
        log(f"resumed at step {start}")
        changed = changed_settings(state.get("config", {}), asdict(cfg))
        if changed:
            log(f"the checkpoint was made with {changed}: the run goes on under the new settings")
    scale = feature_scale(records)
    model.train()
    last = began = clock()
    steps, timed = cfg.steps, min(20, max(1, cfg.warmup - 1))  # the warm-up does not read `steps`
    for step in range(start, cfg.steps):
        if step >= steps:
            break
        if cfg.budget_s and step == start + timed:
            steps = fitted_steps(cfg.steps, step, timed, clock() - began, cfg.budget_s)
            log(f"time budget {cfg.budget_s:.0f} s: {steps} of {cfg.steps} steps")
            if steps == step:  # nothing more fits: the steps made are the run
                if ckpt is not None:
                    _checkpoint(ckpt, model, opt, step, cfg)
                break
        seed = cfg.seed * 1_000_003 + step
        rng = random.Random(seed)
        batch = collate(rng.sample(records, min(cfg.batch, len(records))), cfg.max_len, cfg.prompt_keep)
        batch = {k: v.to(device) for k, v in batch.items()}
        for group in opt.param_groups:
            group["lr"] = warmup_cosine(step, lr=cfg.lr, warmup=cfg.warmup, steps=steps)
        loss, parts = losses(model, batch, cfg, scale, torch.Generator(device=device).manual_seed(seed))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            log(f"step {step}: loss {loss.item():.3f} " + " ".join(f"{k} {v:.3f}" for k, v in parts.items()))
        if ckpt is not None and (clock() - last > cfg.ckpt_every_s or step == steps - 1):
            _checkpoint(ckpt, model, opt, step + 1, cfg)
            last = clock()
    return model.to("cpu").eval()


def changed_settings(saved: dict, now: dict) -> str:
    """The training settings a checkpoint was made with that differ from this run's ("lr 0.0005 (now 0.0002),
    ..."), or "": a resumed run ends as an unbroken one only under the same ones. Not compared: the checkpoint
    spacing (how a run is saved, not what it makes) and the time budget (each sitting brings its own lease)."""
    return ", ".join(f"{k} {saved[k]} (now {now[k]})" for k in now
                     if k not in NOT_COMPARED and k in saved and saved[k] != now[k])


def _checkpoint(path: Path, model: FeatureDraft, opt, step: int, cfg: FeatureTrainConfig) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "config": asdict(cfg)}, tmp)
    tmp.replace(path)
