"""`specsched models features WORK`: make the feature draft for the default target, resumable stage by stage.

1. data  (`WORK/data/`): feature_data.py's shards, up to --shards; a shard on disk is never made again
   (`--stage answers` makes the target's answers only, the costly part, for a later machine: with
   `--export FILE` they are written to FILE after every shard, and `--answers FILE` starts from them);
2. train (`WORK/train/`): feature_train.py over every shard on disk (or the first --train-shards), from a
   fresh draft whose vocabulary is the shipped distilled draft's 4,096 ids (or from --init DIR, a trained
   one, grown by identity layers to --layers N); `--vocab answers` draws V' anew from the ids these answers
   use most (answer_vocab); `ckpt.pt` is written every 2 minutes and a rerun resumes from it; the result
   goes to `final/`;
3. eval  (`WORK/eval.json`): feature_eval.py on held-out prompts (greedy chains of k = 4 over held-out
   wordings and GSM8K *test* questions; sampled at T = 1 over ToT thought prompts on GSM8K test
   questions), the shipped draft measured the same way, and the paired cost of one draft step;
4. --ship copies `final/` into the package (`assets/smollm2-feature/`).

--stage picks one stage; the default runs them in order. The same command runs on a CPU or a GPU host:
--device (default auto: a CUDA GPU where torch sees one) places the data and train stages, and
--gen-shards G answers G shards in one batched decode, to fill a GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer

from ...backends.feature import FeatureModel
from ...backends.hf_model import HFModel
from ...backends.hf_pair import HFTokenizer
from ...core.config import ConfigError
from ...core.device import resolve_device
from ...core.sampling import SamplingParams
from ...models.draft_files import FEATURE_CONFIG, WEIGHTS_FILE
from ...models.feature_draft import (
    file_names,
    layers_in,
    load_feature_draft,
    new_feature_draft,
    save_feature_draft,
    target_parts,
)
from ...models.feature_lean import outlier_channels
from ...models.pull import pull
from ...models.registry import ASSETS, distilled_draft_dir
from .evaluation.feature_eval import cost, per_prompt, pooled
from .models_cli import add_feature_arguments, against_names
from .training.distill_data import always_in, choose_vocab
from .training.feature_answers import import_answers
from .training.feature_data import FeatureDataConfig, load_shards, make
from .training.feature_prompts import heldout_feature_prompts, heldout_tot_prompts
from .training.feature_train import FeatureTrainConfig, train

FEATURE_ASSET = ASSETS / "smollm2-feature"


def run(args: argparse.Namespace, log=print) -> int:
    device = resolve_device(args.device)  # checked by check_feature_args; a GPU torch cannot see is one line
    torch.set_num_threads(args.threads)
    target = pull()
    work: Path = args.work
    stages = ["data", "train", "eval"] if args.stage == "all" else [args.stage]
    if "train" in stages:  # settled (or refused) now, not after the data stage's hours
        layers = trained_layers(args.layers, args.init, work / "train" / "ckpt.pt")
    if "data" in stages or "answers" in stages:
        if args.answers is not None:
            log(f"{import_answers(args.answers, work / 'data')} answer shards taken from {args.answers}")
        make(FeatureDataConfig(target=target, out=work / "data", shards=args.shards, batch=args.batch,
                               max_new_tokens=args.max_new_tokens, group=args.gen_shards,
                               device=device), log=log, with_features="data" in stages, export=args.export)
    if "train" in stages:
        train_stage(target, work, args, layers, log, device)
    if "eval" in stages:
        result = evaluate(target, work / "train" / "final", args, log)
        (work / "eval.json").write_text(json.dumps(result, indent=1) + "\n")
        log(json.dumps(result, indent=1))
    if args.ship:
        FEATURE_ASSET.mkdir(parents=True, exist_ok=True)
        for f in (work / "train" / "final").iterdir():
            shutil.copy2(f, FEATURE_ASSET / f.name)
        log(f"shipped to {FEATURE_ASSET}")
    return 0


def train_stage(target: Path, work: Path, args: argparse.Namespace, layers: int, log,
                device: str = "cpu") -> Path:
    """Train the draft of `layers` decoder layers (trained_layers) over every shard on disk."""
    ckpt = work / "train" / "ckpt.pt"
    records = load_shards(work / "data", args.train_shards or None)
    if not records:
        raise SystemExit(f"no feature shards in {work / 'data'}: run the data stage first")
    if args.init is not None:
        draft = load_feature_draft(args.init, target)
        log(f"warm start from {args.init}")
    else:
        draft = new_feature_draft(target, load_file(str(distilled_draft_dir() / WEIGHTS_FILE))["vocab_ids"].long())
    if layers != draft.cfg.layers:
        log(f"{draft.cfg.layers} decoder layer(s) grown to {layers}: the new ones start as the identity")
        draft.grow(layers, seed=args.train_seed)
    if args.vocab == "answers":
        before = set(draft.vocab_ids.tolist())
        draft.use_vocab(answer_vocab(target, records, draft.cfg.draft_vocab, draft.cfg.target_vocab),
                        target_parts(target)[1])
        log(f"draft vocabulary: the {draft.cfg.draft_vocab} ids the target emits most in these answers "
            f"({len(before & set(draft.vocab_ids.tolist()))} of them in the one before)")
    cfg = FeatureTrainConfig(steps=args.steps, batch=args.train_batch, lr=args.lr, seed=args.train_seed,
                             tv=args.tv, budget_s=args.train_seconds)
    (work / "train").mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    tokens = sum(len(r["ids"]) for r in records)
    log(f"training on {len(records)} answers, {tokens} tokens, on {device}")
    train(draft, records, cfg, ckpt=ckpt, log=log, device=device)
    draft.cfg.outlier_dims = outlier_channels([r["feats"] for r in records[:256]])  # for the int8 forward
    final = work / "train" / "final"
    save_feature_draft(draft, final, meta={"records": len(records), "tokens": tokens, **asdict(cfg)})
    log(f"trained in {time.time() - t0:.0f} s -> {final}")
    return final


def trained_layers(asked: int | None, init: Path | None, ckpt: Path) -> int:
    """The decoder layers of the draft a train stage makes: --layers, else a checkpoint's (a rerun resumes it as
    it was), else the --init draft's, else 1. Refused in one line: fewer than --init's, other than the
    checkpoint's."""
    if init is not None and not (init / FEATURE_CONFIG).is_file():
        raise ConfigError(f"--init {init}: no feature draft there (no {FEATURE_CONFIG})")
    start = json.loads((init / FEATURE_CONFIG).read_text()).get("layers", 1) if init is not None else 1
    saved = None
    if ckpt.exists():
        saved = layers_in(file_names(torch.load(ckpt, weights_only=True, map_location="cpu", mmap=True)["model"]))
        if saved == 0:
            raise ConfigError(f"{ckpt} holds no feature draft's layers: remove it to start again")
    layers = asked or saved or start
    if saved is not None and layers != saved:
        raise ConfigError(f"--layers {layers}: {ckpt} holds a draft of {saved} layer(s); resume it with "
                          f"--layers {saved}, or remove it to start again")
    if layers < start:
        which = f"--layers {layers}" if asked else f"{ckpt} holds a draft of {layers} layer(s)"
        raise ConfigError(f"{which}, but the --init draft {init} has {start}, and a draft only grows")
    return layers


def answer_vocab(target: Path, records: list[dict], size: int, vocab_size: int) -> torch.Tensor:
    """V' for the feature draft: the `size` ids the target emits most in the teacher's answers (their prompts
    count ½; `always_in` forced in), ranked as the distilled draft's are."""
    tok = AutoTokenizer.from_pretrained(target)
    prompts = [r["ids"][:r["start"]].tolist() for r in records]
    return choose_vocab(records, [], prompts, size, always_in(tok), vocab_size)


def evaluate(target: Path, draft_dir: Path, args: argparse.Namespace, log) -> dict:
    tok = HFTokenizer(str(target))
    model = HFModel(str(target), "fp32")
    against = {"distilled": lambda: HFModel(str(distilled_draft_dir()), "fp32", target_dir=str(target)),
               "shipped": lambda: FeatureModel(FEATURE_ASSET, target)}
    drafts = {"feature": FeatureModel(draft_dir, target), **{n: against[n]() for n in against_names(args.against)}}
    held = heldout_feature_prompts(args.eval_prompts, gsm8k=args.gsm8k)
    tot = heldout_tot_prompts(args.eval_prompts // 2, gsm8k=args.gsm8k)
    result: dict = {"prompts": len(held), "tot_prompts": len(tot), "k": 4, "max_new": args.eval_max_new}
    for name, draft in drafts.items():
        rows = {}
        for label, prompts, params in (("greedy", [p for _, p in held], SamplingParams()),
                                       ("sampled_T1_tot", tot, SamplingParams(1.0))):
            ids = [tok.encode(text, chat=True) for text in prompts]
            rows[label] = pooled(per_prompt(model, draft, ids, max_new=args.eval_max_new, params=params)).row()
            log(f"{name} {label}: {rows[label]}")
        t_ms, d_ms = cost(model, draft)
        rows["cost"] = {"target_ms": round(t_ms, 2), "draft_ms": round(d_ms, 3), "ratio": round(d_ms / t_ms, 4)}
        result[name] = rows
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_feature_arguments(ap)
    return run(ap.parse_args(argv), log=lambda m: print(m, flush=True))


if __name__ == "__main__":
    raise SystemExit(main())
