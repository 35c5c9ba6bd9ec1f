#!/usr/bin/env bash
# The GPU table, in one command: every arm for n = 2..8 thoughts on one CUDA GPU, fp32 without and with MPS
# (greedy outputs checked equal to ar's: fp32 is exact enough for that), then the same sweep in bf16 (the
# default on CUDA, whose greedy outputs may part from ar's: README "GPU").
# Writes benchmarks/results/gpu_<date>_<commit>_{fp32,fp32_mps,bf16,fp32_host_chains}.{json,md} and the bench logs beside them.
# Usage: benchmarks/gpu.sh [extra bench flags, e.g. --repeats 3 --device cuda:1]
# GPU_SH_BUDGET_S=S: about S seconds in all (S + 20 at most: 20 s for a stopped bench to exit), for a lease of
# device time. Each sweep not yet run gets an equal share of what is left, at least 30 s (a sweep that ends
# early leaves more to the next); at the end of its share it gets SIGTERM and bench keeps what it measured
# (stopped_by says so), which is not a failure; none starts with under 30 s left.
# GPU_SH_SWEEPS=a,b: only these of fp32, fp32_mps, bf16, fp32_host_chains (default: all four, in that order),
# e.g. GPU_SH_SWEEPS=fp32,fp32_mps benchmarks/gpu.sh --values 6,8 for the points a first lease left unmeasured.
# Needs: a CUDA GPU torch can see; for the MPS run nvidia-cuda-mps-control (started and stopped here);
# GPU use per process in the results needs `pip install 'specsched[gpu]'` (nvidia-ml-py).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
all_sweeps=fp32,fp32_mps,bf16,fp32_host_chains
sweeps=${GPU_SH_SWEEPS-$all_sweeps}
sweeps_left=0
IFS=, read -ra named <<< "$sweeps"
for s in "${named[@]}"; do
  if [[ ",$all_sweeps," != *",$s,"* ]]; then
    echo "gpu.sh: error: GPU_SH_SWEEPS: no sweep '$s' (choose from $all_sweeps)" >&2
    exit 2
  fi
  if [[ " ${seen:-} " == *" $s "* ]]; then
    echo "gpu.sh: error: GPU_SH_SWEEPS names $s twice" >&2
    exit 2
  fi
  seen="${seen:-} $s"
  sweeps_left=$(( sweeps_left + 1 ))
done
if (( sweeps_left == 0 )); then
  echo "gpu.sh: error: GPU_SH_SWEEPS names no sweep (choose from $all_sweeps)" >&2
  exit 2
fi
if [[ -n ${GPU_SH_BUDGET_S+x} && ! ${GPU_SH_BUDGET_S} =~ ^[1-9][0-9]{0,7}$ ]]; then
  echo "gpu.sh: error: GPU_SH_BUDGET_S must be a whole number of seconds, 1 to 99999999, not '$GPU_SH_BUDGET_S'" >&2
  exit 2
fi
wants() { [[ ",$sweeps," == *",$1,"* ]]; }
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu.sh: error: no CUDA GPU is visible to torch; the GPU table needs one" >&2
  exit 2
fi
stamp="$(date -u +%Y-%m-%d)_$(git rev-parse --short HEAD 2>/dev/null || echo nogit)"
out=benchmarks/results/gpu_$stamp
arms=ar,sd,seed-fcfs,seed-batch,parallel,hf-assisted
sweep=(--sweep n --values 2,3,4,6,8 --arms "$arms" --backend hf)

status=0   # 1 once a sweep failed a run or an fp32 greedy check; the other sweeps still run
deadline=$(( SECONDS + ${GPU_SH_BUDGET_S:-31536000} ))
bench() {  # NAME, then extra flags: one sweep into $out_NAME.{json,md,log}
  local name=$1; shift
  local left=$(( deadline - SECONDS ))
  local share=$(( left / sweeps_left )) rc=0
  sweeps_left=$(( sweeps_left - 1 ))
  if (( left < 30 )); then
    echo "gpu.sh: ${left} s of GPU_SH_BUDGET_S left: no $name sweep" | tee "${out}_$name.log" >&2
    return
  fi
  if (( share < 30 )); then share=30; fi
  # --foreground: bench stays in this terminal's process group, so a Ctrl-C reaches it (and it keeps what it
  # measured); it stops its own processes when the share's SIGTERM comes
  timeout --foreground -s TERM -k 20 "$share" "$python" -m specsched bench "${sweep[@]}" \
    --json "${out}_$name.json" --markdown "${out}_$name.md" "$@" 2>&1 | tee "${out}_$name.log" || rc=$?
  if (( rc == 124 )); then   # timeout's own status: the share ran out, bench was stopped and wrote its record
    echo "gpu.sh: the $name sweep was stopped at the end of its ${share} s (GPU_SH_BUDGET_S)" \
      | tee -a "${out}_$name.log" >&2
  elif (( rc != 0 )); then
    status=1
  fi
  # stopped or not, a greedy output that differs on an exact (fp32) target is a failure
  if grep -qs "✗ Greedy outputs differ" "${out}_$name.md"; then status=1; fi
}

mps_stop() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true; }

mps_stop   # the sweeps without MPS: each process's kernels time-slice the GPU
wants fp32 && bench fp32 --dtype fp32 "$@"
if ! wants fp32_mps; then
  :
elif command -v nvidia-cuda-mps-control >/dev/null; then
  trap mps_stop EXIT
  nvidia-cuda-mps-control -d   # with MPS: kernels of the verifier and the draft workers run concurrently
  bench fp32_mps --dtype fp32 "$@"
  mps_stop
  trap - EXIT
else
  echo "gpu.sh: nvidia-cuda-mps-control not found: no MPS run" | tee "${out}_fp32_mps.log" >&2
  sweeps_left=$(( sweeps_left - 1 ))
fi
wants bf16 && bench bf16 --dtype bf16 "$@"
# the drafting arms once more with chains drawn through the host (each step's logits row comes down):
# against fp32 above, what keeping a draft on the GPU until it is sent is worth (README "GPU")
wants fp32_host_chains && SPECSCHED_DEVICE_CHAINS=0 bench fp32_host_chains --dtype fp32 "$@" --arms sd,seed-fcfs,seed-batch
echo "wrote ${out}_*"
exit $status
