#!/usr/bin/env bash
# Startup time of gdn-verify: the median of N runs (default 10) of `gdn-verify --help` and of `compare`
# of two small files (8 KiB each), in milliseconds, timed in-process by bash ($EPOCHREALTIME, no fork
# for the clock). Both are dominated by what the dynamic loader maps before main().
#   bench/startup.sh [BINARY]        default build/gdn-verify; N=20 bench/startup.sh for more runs
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/gdn-verify}
N=${N:-10}
SMALL=tests/data/vectors/conv1d_silu_bias.safetensors

# median_ms CMD...: runs CMD N times (stdout and stderr discarded), prints the median wall time in ms.
median_ms() {
  "$@" >/dev/null 2>&1 || { echo "startup.sh: '$*' failed" >&2; exit 1; }
  local times=() i start end
  for ((i = 0; i < N; i++)); do
    start=${EPOCHREALTIME/./}
    "$@" >/dev/null 2>&1
    end=${EPOCHREALTIME/./}
    times+=($((end - start)))
  done
  mapfile -t times < <(printf '%s\n' "${times[@]}" | sort -n)
  local mid=$((N / 2))
  local us=$(((N % 2) ? times[mid] : (times[mid - 1] + times[mid]) / 2))
  printf '%d.%02d' $((us / 1000)) $((us % 1000 / 10))
}

printf '%-40s %10s\n' "command (median of $N)" "ms"
printf '%-40s %10s\n' "gdn-verify --help" "$(median_ms "$BIN" --help)"
printf '%-40s %10s\n' "gdn-verify compare SMALL SMALL" "$(median_ms "$BIN" compare "$SMALL" "$SMALL")"
printf 'load average: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
