#!/usr/bin/env bash
# The README's Tree-of-Thoughts example: one GSM8K-style question on the default pair, every mode.
# Greedy (--temperature 0) so every mode must build the same tree; then the sampled tree (T = 1, seed mode).
# Usage: benchmarks/tot_modes.sh OUT_DIR [extra run flags]
set -euo pipefail
out=${1:?usage: tot_modes.sh OUT_DIR}; shift
mkdir -p "$out"
for mode in ar sd seed parallel; do
  specsched run --backend hf --task gsm8k --problem 0 --temperature 0 --mode "$mode" --no-live \
    --json "$out/greedy-$mode.json" "$@" > "$out/greedy-$mode.txt"
done
specsched run --backend hf --task gsm8k --problem 0 --temperature 1 --mode seed --no-live \
  --json "$out/sampled-seed.json" "$@" > "$out/sampled-seed.txt"
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
trees = {}
print("| mode | tree identical to ar | tokens | decode s | wall s (incl. start-up) | start-up s (share) "
      "| models loaded | generator α | evaluator α |")
print("|---|---|---|---|---|---|---|---|---|")
for mode in ("ar", "sd", "seed", "parallel"):
    record = json.loads((out / f"greedy-{mode}.json").read_text())
    t = record["trees"][0]
    startup = sum(p["startup_s"] for p in t["phases"])
    trees[mode] = [(n["parent"], n["thought"], n["score"]) for n in t["nodes"]], t["answer"]
    pp = t["per_phase"]
    tok = sum(p["tokens"] for p in pp.values())
    dec = sum(p["decode_s"] for p in pp.values())
    wall = sum(p["wall_s"] for p in pp.values())
    a = lambda x: "n/a" if x is None else f"{x:.3f}"
    print(f"| {mode} | {trees[mode] == trees['ar']} | {tok} | {dec:.1f} | {wall:.1f} | "
          f"{startup:.1f} ({100 * startup / wall:.1f} %) | {record['engine']['models_loaded']} | "
          f"{a(pp['thought generation']['acceptance_rate'])} | {a(pp['state evaluation']['acceptance_rate'])} |")
PY
