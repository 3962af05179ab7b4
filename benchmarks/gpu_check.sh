#!/usr/bin/env bash
# Everything that needs a GPU, in one call of under 9 minutes on one H200; every figure in one
# JSON file, $OUT/gpu_check.json. Runs from the repository root with torch, numpy and the
# standard library only (prefixscope need not be installed):
#
#     OUT=/some/dir benchmarks/gpu_check.sh                       # on the GPU
#     OUT=/tmp/check benchmarks/gpu_check.sh --device cpu --small  # the same logic on a CPU
#
# Parts, each under its own time guard: the benchmark skips the shapes predicted to end past
# its --time-limit, and `timeout` ends the part outright a little after that (the shapes it
# finished stay in its file and are fitted by the merge). Budget on an H200 (docs/miss_cost.md):
#   1. llama-3-8b, bf16, the full grid (30 shapes, longest miss 36,864 tokens), each hit from
#      its CUDA graph and again without it: ~49 s of kernels at 700 TFLOP/s; limit 210 s,
#      killed at 250 s.
#   2. llama-3.1-70b (the shape of Llama-3.3-70B), 8 of its 80 layers and the head alone,
#      scaled by layers, the same grid: ~41 s at 700 TFLOP/s; limit 150 s, killed at 190 s.
#   3. the measured model's tables against this GPU, kernel by kernel (gemm bf16 and fp8,
#      context and decode attention, a chunk after a prefix; prefixscope/gpu_replay/tables.py):
#      6.4 s of timing on an H200; limit 40 s, killed at 60 s.
# Worst case 250 + 190 + 60 s = 8 min 20 s, plus the merge (a second).
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
OUT="${OUT:-gpu_check_out}"
mkdir -p "$OUT/parts"
small=0
for a in "$@"; do [ "$a" = "--small" ] && small=1; done
if [ "$small" = 1 ]; then
  m8=tiny-llama; m70=tiny-llama; layers=1; limit1=60; kill1=90; limit2=60; kill2=90
else
  m8=llama-3-8b; m70=llama-3.1-70b; layers=8; limit1=210; kill1=250; limit2=150; kill2=190
fi
status="$OUT/parts/status.tsv"
: > "$status"

part() {  # NAME KILL_AFTER_S ARGS...
  local name=$1 kill=$2; shift 2
  local file="$OUT/parts/$name.json" t0 ms rc
  t0=$(date +%s%N)
  local module=prefixscope.gpu_replay.bench args=()
  while [ $# -gt 0 ]; do  # --module M: another benchmark than the miss-versus-hit one
    if [ "$1" = --module ]; then module=$2; shift 2; else args+=("$1"); shift; fi
  done
  timeout --signal=TERM --kill-after=10 "$kill" \
    "$PY" -m "$module" "${args[@]}" --out "$file" 2>&1 | tee "$OUT/parts/$name.log"
  rc=${PIPESTATUS[0]}
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%s\t%s\t%d.%03d\t%s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000)) "$file" >> "$status"
  echo "part $name: exit $rc"
}

part "$m8" "$kill1" --model "$m8" --eager-hit --time-limit "$limit1" "$@"
part "$m70-$layers-layers" "$kill2" --model "$m70" --layers "$layers" --time-limit "$limit2" "$@"
tables=(--time-limit 40); [ "$small" = 1 ] && tables=(--small --gpu h200 --time-limit 40)
for a in "$@"; do [ "$a" = cpu ] && tables+=(--device cpu); done
part tables 60 "${tables[@]}" --module prefixscope.gpu_replay.tables
"$PY" -m prefixscope.gpu_replay.check --status "$status" --out "$OUT/gpu_check.json"
