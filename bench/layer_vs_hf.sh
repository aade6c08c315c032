#!/usr/bin/env bash
# The production-sized layer of docs/DESIGN.md §7 (hidden 4096, Hk 16, Hv 32, dk = dv = 128, T = 4096 as
# 1024 + 2048 + 1024), forward and backward with every gradient, against this machine's limit: first
# layer_roofline (CPU, GEMM kernel, fp64 FMA peak measured now, the layer's FLOPs, roofline = FLOPs / peak),
# then `gdn-verify reference` on it (wall, CPU and peak memory from /usr/bin/time), then, when the bridge's
# venv is present, Hugging Face's Qwen3-Next GatedDeltaNet in torch fp64 on the same file and the same
# number of threads (bench/hf_layer.py); each time with its share of the roofline, and their ratio.
# `./run bench layer_vs_hf` runs it; the input is written to a temporary folder. PAIRS=N runs the two N
# times in turn and prints each pair and the median of their ratios: on a machine whose cores another
# tenant shares, one pair's ratio swings with the neighbour (docs/bench.md).
#   [PAIRS=N] bench/layer_vs_hf.sh [BUILD_DIR]    default build, 1 pair; GDNV_VENV picks the venv (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PY=${GDNV_VENV:-.venv}/bin/python
THREADS=$(nproc)
PAIRS=${PAIRS:-1}
[[ $PAIRS =~ ^[1-9][0-9]*$ ]] ||
  { echo "layer_vs_hf.sh: PAIRS '$PAIRS' is not a positive integer: give the number of runs of each side" >&2; exit 3; }
DIMS=(4096 16 32 128 128)
LENGTHS=(1024 2048 1024)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$BUILD/layer_roofline" "${DIMS[@]}" "${LENGTHS[@]}" | tee "$TMP/roofline"
roofline=$(awk '$1 == "roofline" { print $2 }' "$TMP/roofline")
# "  NN% of roofline" for a time in seconds (nothing where the peak was not measured).
of_roofline() { [ -n "$roofline" ] && awk "BEGIN { printf \"  %3.0f%% of roofline\", 100 * $roofline / $1 }"; true; }

"$BUILD/make_layer_file" "$TMP/layer.safetensors" "${DIMS[@]}" "${LENGTHS[@]}" >/dev/null
for pair in $(seq "$PAIRS"); do
  [ "$PAIRS" -gt 1 ] && echo "pair $pair"
  /usr/bin/time -f '%e %U %S %M' -o "$TMP/time" \
    "$BUILD/gdn-verify" reference --in "$TMP/layer.safetensors" --out "$TMP/out.safetensors" >/dev/null
  read -r wall user sys rss <"$TMP/time"
  rm -f "$TMP/out.safetensors"
  printf 'gdn-verify reference   %6.1f s%s  (user %.1f s, sys %.1f s, peak %.2f GB, %d threads)\n' \
    "$wall" "$(of_roofline "$wall")" "$user" "$sys" "$(awk "BEGIN { print $rss / 1e6 }")" "$THREADS"
  if [ ! -x "$PY" ]; then
    echo "HF Qwen3-Next fp64     skipped: no $PY (./run test creates it)"
    continue
  fi
  hf=$(PYTHONPATH=python "$PY" bench/hf_layer.py "$TMP/layer.safetensors" "$THREADS" "${DIMS[@]}" 2>"$TMP/err") ||
    { cat "$TMP/err" >&2; exit 1; }
  # transformers' module in fp64 still casts q, k, v, g and beta to fp32 for its chunked core, and the
  # gated norm's input too: torch's time is not an all-fp64 layer's.
  printf 'HF Qwen3-Next fp64     %6.1f s%s  (torch, %d threads; core and gated norm in fp32)\n' \
    "$hf" "$(of_roofline "$hf")" "$THREADS"
  ratio=$(awk "BEGIN { printf \"%.2f\", $hf / $wall }")
  echo "$ratio" >>"$TMP/ratios"
  printf 'ratio                  %6.2fx  (torch / gdn-verify)\n' "$ratio"
done
if [ "$PAIRS" -gt 1 ] && [ -s "$TMP/ratios" ]; then
  sort -n "$TMP/ratios" | awk '{ r[NR] = $1 } END {
    m = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "median ratio           %6.2fx  of %d pairs (%.2f-%.2f)\n", m, NR, r[1], r[NR] }'
fi
# The peak again, after the runs: where other work shares the cores (a VM's neighbour), it takes FMA
# throughput and clock, and the peak before and after shows how far the machine moved during the runs.
after=$("$BUILD/layer_roofline" "${DIMS[@]}" "${LENGTHS[@]}" | awk '$1 == "fp64" && $3 ~ /^[0-9.]+$/ { print $3 }')
[ -n "$after" ] && printf 'fp64 peak after        %s GFLOP/s (measured again after the runs)\n' "$after"
printf 'load average: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
