#!/usr/bin/env bash
# The one prepared GPU check, for a session lent one NVIDIA GPU (H100/H200, sm_90): install
# what is missing, configure with CUDA, build only the targets it runs, then
#   1. the GPU tests (cuda_backend_test: every leaf op vs the fp64 oracle and vs the CPU backend, the
#      three modes end to end with zero host syncs in the layer; gpu_device_test; cuda_cli_test, which
#      also runs `gate --quick --backend cuda`) and the device path's emulation (gpu_emulation_test,
#      stream_test),
#   2. gdn-verify run --backend cuda for every mode x W in {1,2,4} x fp32/bf16 x THD/SBHD (legal cells),
#   3. compute-sanitizer --tool memcheck on a small chunkwise run,
#   4. probe dump --backend cuda of every mode, then probe cross-mode and probe oracle on that image;
#      cp1 again under mpirun (NCCL communicator, backend on its stream), bitwise equal to the first,
#   5. bench_cp --backend=cuda (its cuda geometry; JSON in $OUT/bench_cp_cuda.json),
# writing each log, ctest's JUnit XML and summary.json (one entry per step: name, exit code, seconds)
# to $OUT (default ./gpu-check-out). Exit code: 0 when every step passed, 1 otherwise; a machine
# without a usable device fails the device query step rather than reporting a pass.
# Budget: under 8 minutes on one H200 from a bare machine (build ~3 min on 16 cores, runs ~2 min, the
# bench capped at 150 s).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 3

OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${GDNV_GPU_BUILD_DIR:-build-gpu}
JOBS=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
SUMMARY=()
FAILED=0

# step NAME CMD...: runs CMD with its output in $OUT/NAME.log; records exit code and seconds.
step() {
  local name=$1
  shift
  local start rc ms
  start=$(date +%s%N)
  "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  ms=$((($(date +%s%N) - start) / 1000000))
  SUMMARY+=("$(printf '{"name": "%s", "rc": %d, "seconds": %d.%03d}' "$name" "$rc" $((ms / 1000)) $((ms % 1000)))")
  [ "$rc" -eq 0 ] || FAILED=1
  printf '%-48s %s\n' "$name" "$([ "$rc" -eq 0 ] && echo ok || echo "FAIL (rc=$rc, $OUT/$name.log)")"
  return "$rc"
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
write_summary() {
  {
    echo '{"steps": ['
    local i
    for i in "${!SUMMARY[@]}"; do
      printf '  %s%s\n' "${SUMMARY[$i]}" "$([ "$i" -lt $((${#SUMMARY[@]} - 1)) ] && echo ,)"
    done
    printf '], "passed": %s}\n' "$([ "$FAILED" -eq 0 ] && echo true || echo false)"
  } >"$OUT/summary.json"
}
trap write_summary EXIT

step device_query nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
step install ./run deps || exit 1
step configure cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGDNV_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 || exit 1
# gdn-verify reaches the device through the plugin beside it (libgdnv_cuda.so, gpu/cuda_plugin.hpp).
step build cmake --build "$BUILD" -j "$JOBS" --target gdn-verify gdnv_cuda_plugin cuda_backend_test gpu_device_test \
  gpu_emulation_test stream_test cuda_cli_test bench_cp || exit 1

step ctest_gpu ctest --test-dir "$BUILD" -j 4 --timeout 300 --output-on-failure \
  --output-junit "$OUT/ctest_gpu.xml" -R '^(cuda\.|emu\.|CudaCli\.|GpuDevice|HostStream|StreamMover|Collectives/StreamMover)'

# Heads divisible by tp*cp for headwise at W=4; THD lengths and the SBHD length divisible by 2W.
GEOMETRY=(--num-key-heads 4 --num-value-heads 8 --key-head-dim 16 --value-head-dim 16 --hidden 64
          --lengths "128,64" --seq-len 64)
for mode in headwise chunkwise all_gather; do
  for W in 1 2 4; do
    for dtype in fp32 bf16; do
      for format in thd sbhd; do
        # all_gather takes SBHD only at CP=1 (docs/DESIGN.md §3.1).
        [ "$mode" = all_gather ] && [ "$format" = sbhd ] && [ "$W" -gt 1 ] && continue
        step "run_${mode}_W${W}_${dtype}_${format}" "$BUILD/gdn-verify" run --backend cuda --mode "$mode" \
          --cp "$W" --dtype "$dtype" --format "$format" "${GEOMETRY[@]}" --json "$OUT/run_${mode}_W${W}_${dtype}_${format}.json"
      done
    done
  done
done
SMALL=(--num-key-heads 2 --num-value-heads 4 --key-head-dim 16 --value-head-dim 16 --hidden 32 --lengths "96,40")
SANITIZER=$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")
step memcheck "$SANITIZER" --tool memcheck --error-exitcode 1 --leak-check full "$BUILD/gdn-verify" run \
  --backend cuda --mode chunkwise --cp 2 --dtype bf16 "${SMALL[@]}"

IMAGE="$OUT/probe_cuda"
rm -rf "$IMAGE"
for mode in cp1 headwise chunkwise all_gather; do
  W=4
  [ "$mode" = cp1 ] && W=1
  step "probe_dump_$mode" "$BUILD/gdn-verify" probe dump --backend cuda --mode "$mode" --image cuda --out "$IMAGE" \
    --world "inproc:$W" --case thd-gva
done
step probe_cross_mode "$BUILD/gdn-verify" probe cross-mode --dir "$IMAGE"
step probe_oracle "$BUILD/gdn-verify" probe oracle --dir "$IMAGE"
# The NCCL path under mpirun (one process on the one GPU): the same kernels, so the same bits.
step probe_nccl_cp1 mpirun -np 1 "$BUILD/gdn-verify" probe dump --backend cuda --mode cp1 --image cuda \
  --out "$OUT/probe_nccl" --case thd-gva
step probe_nccl_vs_inproc "$BUILD/gdn-verify" probe compare --policy bitwise --mode cp1 --ref "$IMAGE" \
  --cand "$OUT/probe_nccl"

step bench_cp timeout 150 "$BUILD/bench_cp" --backend=cuda --benchmark_out="$OUT/bench_cp_cuda.json" \
  --benchmark_out_format=json
exit "$FAILED"
