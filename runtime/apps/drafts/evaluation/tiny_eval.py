"""What speculative decoding gains with the shipped `tiny` pair (run once; the numbers are in docs/models.md).

    python -m specsched.runtime.apps.drafts.evaluation.tiny_eval --texts DIR [--threads 1] [--json PATH]

1. Serial greedy SD in process (`evaluate.decode`, k = 4, fp32) on prompts cut from the held-out passages:
   alpha = accepted / proposed, tokens per verification = emitted / target forwards; SD output is checked
   equal to target-only output.
2. Forward cost: the median time of a 1-token forward after 128 cached tokens, draft / target, timed
   alternately as serial SD calls them (`forward_costs.forward_costs`).
3. The real CLI, `specsched run --backend hf --target tiny --mode {ar,sd,seed}` at temperature 0:
   tokens/s over the decode window (model loading and process start-up excluded), as the run reports them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from transformers import AutoTokenizer

from ....backends.hf_model import HFModel
from ..training.tiny import ASSET_DIR, heldout_prompts, split
from .evaluate import Row, chain, decode
from .forward_costs import forward_costs

MODES = ("ar", "sd", "seed")


def in_process(prompts: list[str], *, max_new: int, k: int) -> dict:
    tok = AutoTokenizer.from_pretrained(ASSET_DIR / "target")
    target, draft = HFModel(str(ASSET_DIR / "target"), "fp32"), HFModel(str(ASSET_DIR / "draft"), "fp32")
    ar, sd, identical = Row("ar"), Row("sd"), True
    for text in prompts:
        ids = tok.encode(text)
        ar.runs.append(decode(target, ids, max_new))
        sd.runs.append(decode(target, ids, max_new, chain(draft, ids, k)))
        identical &= ar.runs[-1].tokens == sd.runs[-1].tokens
    target_ms, draft_ms = forward_costs(target.model, draft.model, k=k)
    return {"prompts": len(prompts), "max_new": max_new, "k": k, "identical_to_ar": identical,
            "alpha": round(sd.alpha, 3), "tokens_per_verify": round(sd.per_verify, 3),
            "ar_tokens_per_s": round(ar.tokens_per_s, 1), "sd_tokens_per_s": round(sd.tokens_per_s, 1),
            "target_forward_ms": round(target_ms, 3), "draft_forward_ms": round(draft_ms, 3),
            "cost_ratio": round(draft_ms / target_ms, 3)}


def via_cli(prompts: list[str], mode: str, *, max_new: int, threads: int = 1) -> dict:
    """One `specsched run` of the prompts (one sequence each); its reported metrics and tokens.

    The verifier gets `threads` torch threads in every mode. Left to the default (the cores the draft workers
    leave free), `ar` gets both cores of a 2-core machine, and when another job keeps one of them busy its
    OpenMP threads spin-wait for each other: ar then ran at 13 tokens/s instead of ~180.
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "specsched", "run", "--backend", "hf", "--target", "tiny", "--mode", mode,
               "--temperature", "0", "--max-new-tokens", str(max_new), "--json", str(out), "--quiet",
               "--verifier-threads", str(threads), *(arg for p in prompts for arg in ("--prompt", p))]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        record = json.loads(out.read_text())
    m = record["metrics"]
    return {"tokens_per_s": round(m["tokens_per_s"], 1), "tokens": m["tokens"],
            "alpha": None if m["acceptance_rate"] is None else round(m["acceptance_rate"], 3),
            "tokens_per_verify": round(m["mean_tokens_per_verify"], 3), "startup_s": round(m["startup_s"], 2),
            "sequences": [s["tokens"] for s in record["sequences"]]}


def measure(texts_dir: Path, *, n_prompts: int = 10, max_new: int = 96, k: int = 4, cli_prompts: int = 3) -> dict:
    _, held = split(sorted(texts_dir.glob("*.txt")))
    prompts = heldout_prompts(held, n_prompts)
    result = {"threads": torch.get_num_threads(), "in_process": in_process(prompts, max_new=max_new, k=k)}
    threads = torch.get_num_threads()
    runs = {mode: via_cli(prompts[:cli_prompts], mode, max_new=max_new, threads=threads) for mode in MODES}
    same = runs["ar"]["sequences"] == runs["sd"]["sequences"] == runs["seed"]["sequences"]
    for run in runs.values():
        run.pop("sequences")
        run["speedup"] = round(run["tokens_per_s"] / runs["ar"]["tokens_per_s"], 3)
    result["cli"] = {"prompts": cli_prompts, "max_new": max_new, "verifier_threads": threads,
                     "identical_across_modes": same, **runs}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=Path, required=True,
                    help="the Shakespeare texts (see runtime/apps/drafts/training/corpus.py)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    text = json.dumps(measure(args.texts), indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
