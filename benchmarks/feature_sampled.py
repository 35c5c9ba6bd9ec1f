"""T = 1 acceptance of feature drafts on many held-out ToT thought prompts, with its standard error.

`specsched models features WORK --stage eval` measures T = 1 chains on 12 ToT prompts, whose α moves by
several hundredths between drafts that teacher-forced measures rank clearly. This measures the same thing
(serial speculative decoding with the runtime's drafter, k = 4 chains, T = 1, no top-k or top-p, seed i for
prompt i, on the int8 draft forward) on `--prompts` ToT prompts over GSM8K *test* questions, every draft on
the same prompts and seeds (the recipe's 12 are the first 12), and reports per draft:

- α = Σ accepted / Σ drafted and tokens per verification, over all prompts;
- the standard error of α, with the prompts as the independent units (tokens within one are not):
  feature_eval.alpha_error, the ratio estimator's delta method;
- for each draft after the first, its α minus the first draft's and that difference's standard error
  (feature_eval.paired_alpha: prompt by prompt, so what a prompt does to both drafts cancels);
- each prompt's (drafted, accepted), so the errors can be computed again from the record.

    python benchmarks/feature_sampled.py DRAFT_DIR [DRAFT_DIR ...] [--prompts 48] [--max-new 128] [--json F]

A DRAFT_DIR is a feature draft's folder, or `shipped` for the one in the package; the record names each by
the sha256 of its weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from specsched.runtime.apps.drafts.evaluation.feature_eval import Tally, alpha_error, paired_alpha, per_prompt, pooled
from specsched.runtime.apps.drafts.feature_recipe import FEATURE_ASSET
from specsched.runtime.apps.drafts.models_cli import GSM8K
from specsched.runtime.apps.drafts.training.feature_prompts import heldout_tot_prompts
from specsched.runtime.backends.feature import FeatureModel
from specsched.runtime.backends.hf_model import HFModel
from specsched.runtime.backends.hf_pair import HFTokenizer
from specsched.runtime.core.sampling import SamplingParams
from specsched.runtime.models.draft_files import FEATURE_WEIGHTS
from specsched.runtime.models.pull import pull


def weights_sha256(folder: Path) -> str:
    return hashlib.sha256((folder / FEATURE_WEIGHTS).read_bytes()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafts", nargs="+")
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--gsm8k", type=Path, default=GSM8K)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    prompts = heldout_tot_prompts(args.prompts, gsm8k=args.gsm8k)
    if len(prompts) < args.prompts:
        raise SystemExit(f"feature_sampled: {args.gsm8k} gives {len(prompts)} ToT prompts, not {args.prompts}")
    target = pull()
    tok, model = HFTokenizer(str(target)), HFModel(str(target), "fp32")
    ids = [tok.encode(p, chat=True) for p in prompts]
    result: dict = {"prompts": len(ids), "k": 4, "temperature": 1.0, "max_new": args.max_new, "drafts": {}}
    per: dict[str, list[Tally]] = {}
    for name in args.drafts:
        folder = FEATURE_ASSET if name == "shipped" else Path(name)
        draft = FeatureModel(folder, target)
        per[name] = per_prompt(model, draft, ids, max_new=args.max_new, params=SamplingParams(1.0))
        row = {**pooled(per[name]).row(), "alpha_se": round(alpha_error(per[name]), 4),
               "weights_sha256": weights_sha256(folder),
               "per_prompt_drafted_accepted": [[t.drafted, t.accepted] for t in per[name]]}
        if name != args.drafts[0]:
            diff, se = paired_alpha(per[args.drafts[0]], per[name])
            row["paired"] = {"alpha_minus_first": round(diff, 4), "se": round(se, 4)}
        result["drafts"][name] = row
        print(name, json.dumps({k: v for k, v in row.items() if k != "per_prompt_drafted_accepted"}), flush=True)
        if args.json:  # after each draft: a run stopped part-way keeps the drafts it finished, tallies and all
            args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
