"""T = 1 acceptance of feature drafts on many held-out ToT thought prompts, with its standard error.

`specsched models features WORK --stage eval` measures T = 1 chains on 12 ToT prompts, whose α moves by
several hundredths between drafts that teacher-forced measures rank clearly. This measures the same thing
(serial speculative decoding with the runtime's drafter, k = 4 chains, T = 1, no top-k or top-p, seed i for
prompt i, on the int8 draft forward) on `--prompts` ToT prompts over GSM8K *test* questions, every draft on
the same prompts and seeds, and reports per draft:

- α = Σ accepted / Σ drafted and tokens per verification, over all prompts;
- the standard error of α, from the spread of the prompts' own α (the ratio estimator's delta method:
  SE² = Σ (a_i − α d_i)² / (Σ d_i)², a_i and d_i prompt i's accepted and drafted tokens): prompts are the
  independent units, tokens within one are not;
- for each draft after the first, the paired difference in α against the first draft and its standard
  error the same way (prompt i's a_i − α d_i differenced between the two drafts).

    python benchmarks/feature_sampled.py DRAFT_DIR [DRAFT_DIR ...] [--prompts 48] [--max-new 128] [--json F]

A DRAFT_DIR is a feature draft's folder, or `shipped` for the one in the package.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from specsched.runtime.apps.drafts.evaluation.feature_eval import Tally, speculate
from specsched.runtime.apps.drafts.feature_recipe import FEATURE_ASSET
from specsched.runtime.apps.drafts.models_cli import GSM8K
from specsched.runtime.apps.drafts.training.feature_prompts import heldout_feature_prompts
from specsched.runtime.backends.feature import FeatureModel
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.backends.hf_pair import HFTokenizer
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.models.pull import pull


def tot_prompts(n: int, gsm8k: Path) -> list[str]:
    return [p for kind, p in heldout_feature_prompts(2 * n, gsm8k=gsm8k, seed=8) if kind == "tot"][:n]


def spread(tallies: list[Tally], alpha: float) -> list[float]:
    """Each prompt's a_i − α d_i: the terms whose spread is the ratio estimator's error."""
    return [t.accepted - alpha * t.drafted for t in tallies]


def summary(tallies: list[Tally]) -> dict:
    total = Tally()
    for t in tallies:
        total.add(t)
    alpha = total.alpha
    se = math.sqrt(sum(x * x for x in spread(tallies, alpha))) / total.drafted
    return {**total.row(), "alpha_se": round(se, 4)}


def paired(first: list[Tally], other: list[Tally]) -> dict:
    a0, a1 = summary(first)["alpha"], summary(other)["alpha"]
    d0, d1 = sum(t.drafted for t in first), sum(t.drafted for t in other)
    # α1 − α0 ≈ Σ (e1_i / D1 − e0_i / D0), with e_i = a_i − α d_i per prompt: the prompts are the units
    terms = [x1 / d1 - x0 / d0 for x0, x1 in zip(spread(first, a0), spread(other, a1))]
    return {"alpha_minus_first": round(a1 - a0, 4), "se": round(math.sqrt(sum(x * x for x in terms)), 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafts", nargs="+")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--gsm8k", type=Path, default=GSM8K)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    target = pull()
    tok, model = HFTokenizer(str(target)), HFModel(str(target), "fp32")
    prompts = [tok.encode(p, chat=True) for p in tot_prompts(args.prompts, args.gsm8k)]
    result: dict = {"prompts": len(prompts), "k": 4, "temperature": 1.0, "max_new": args.max_new, "drafts": {}}
    per: dict[str, list[Tally]] = {}
    for name in args.drafts:
        draft = FeatureModel(FEATURE_ASSET if name == "shipped" else Path(name), target)
        per[name] = [speculate(model, draft, ids, max_new=args.max_new, k=4, params=SamplingParams(1.0), seed=i)[1]
                     for i, ids in enumerate(prompts)]
        row = summary(per[name])
        if name != args.drafts[0]:
            row["paired"] = paired(per[args.drafts[0]], per[name])
        result["drafts"][name] = row
        print(name, json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
