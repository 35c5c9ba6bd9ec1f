"""DSBD's quality claim on GSM8K: accuracy and perplexity of plain sampling, beam sampling and DSBD on
the same problems (the DSBD paper's Tables 1-3 in miniature), with tokens/s and target forwards per step.

Arms, all at the same temperature on one engine (the default pair unless --backend sim):
  sampling  ``--mode beam --beams 1``: beam sampling of width 1 IS ancestral sampling, and it records
            the joint log-probability its perplexity needs;
  beam      ``--mode beam --beams W``: target-only beam sampling;
  dsbd      ``--mode dsbd --beams W``: a draft worker per beam.
Per problem the answer is the last number of the most likely beam's text (runtime/apps/tot/parse.py), checked
against the gold ``#### N``; perplexity = exp(-log p(beam) / its tokens) of that beam, under the target.

    python benchmarks/beams_quality.py [--problems 8] [--beams 4] [--gamma 3] [--temperature 1]
                                       [--max-new-tokens 96] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from specsched import Engine, RunConfig
from specsched.runtime.apps.tot.parse import extract_answer_number, normalise_number
from specsched.runtime.engine.provenance import provenance

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k_test.jsonl"
PROMPT = "Question: {q}\nAnswer step by step, then end with 'The answer is N.'"


def problems(n: int) -> list[tuple[str, str]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()[:n]]
    return [(PROMPT.format(q=r["question"]), normalise_number(r["answer"].split("####")[-1])) for r in rows]


def arm(engine: Engine, name: str, prompt: str, args) -> dict:
    mode, beams = {"sampling": ("beam", 1), "beam": ("beam", args.beams), "dsbd": ("dsbd", args.beams)}[name]
    record = engine.generate([prompt], mode=mode, beams=beams, gamma=args.gamma, temperature=args.temperature,
                             max_new_tokens=args.max_new_tokens, seed=args.seed, workers=1)
    beams_out = record.collected.beams.get("0", {"tokens": [[]], "logprobs": [0.0]})
    best = max(range(len(beams_out["logprobs"])), key=beams_out["logprobs"].__getitem__)
    n_tokens = max(beams_out.get("steps", len(beams_out["tokens"][best])), 1)  # the steps its log-prob covers
    return {"text": record.sequences[0].text, "status": record.status,
            "perplexity": math.exp(-beams_out["logprobs"][best] / n_tokens),
            "tokens_per_s": record.metrics.tokens_per_s, "forwards": record.metrics.verifications,
            "steps": n_tokens}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=8)
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--gamma", type=int, default=3)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="hf")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    config = RunConfig(backend=args.backend, prompts=["x"])
    rows = {name: [] for name in ("sampling", "beam", "dsbd")}
    with Engine(config) as engine:
        for i, (prompt, gold) in enumerate(problems(args.problems)):
            for name, out in rows.items():
                r = arm(engine, name, prompt, args)
                r["correct"] = extract_answer_number(r["text"]) == gold
                out.append(r)
                print(f"problem {i} {name:8s} correct={r['correct']!s:5s} ppl={r['perplexity']:.2f} "
                      f"{r['tokens_per_s']:.1f} tok/s {r['forwards']} forwards / {r['steps']} steps", flush=True)
    summary = {name: {"accuracy": sum(r["correct"] for r in out) / len(out),
                      "perplexity_median": statistics.median(r["perplexity"] for r in out),
                      "tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in out),
                      "forwards_per_step": sum(r["forwards"] for r in out) / sum(r["steps"] for r in out)}
               for name, out in rows.items()}
    for name, s in summary.items():
        print(f"{name:8s} accuracy {s['accuracy']:.2f}  perplexity {s['perplexity_median']:.2f}  "
              f"{s['tokens_per_s_median']:.1f} tok/s  {s['forwards_per_step']:.2f} target forwards per step")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "summary": summary, "rows": rows,
                                               "provenance": provenance(config)}, indent=1))


if __name__ == "__main__":
    main()
