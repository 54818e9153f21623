#!/usr/bin/env bash
# The fuzz campaign: builds the `sanitize` preset (clang 16, AddressSanitizer,
# UndefinedBehaviorSanitizer, libFuzzer) and runs every target of fuzz/ for
# SECONDS each, two at a time, growing a corpus kept in build/sanitize/fuzz/
# campaign/NAME. Prints, and writes to build/sanitize/fuzz/campaign.md, one
# table row per target: executions, coverage (edges, features) and crash
# files. A crash input lands in build/sanitize/fuzz/artifacts/; once fixed,
# copy it into fuzz/corpus/NAME/ so the tests replay it.
#
#   bash tools/fuzz.sh [SECONDS]     (default 600; docs/reliability.md)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
gen=()  # reuse a main build's attune-gen when there is one (tools/test.sh does)
for tree in build/ci build/dev; do
  if [ -x "$tree/generator/attune-gen" ]; then
    gen=(-DATTUNE_GEN_EXECUTABLE="$PWD/$tree/generator/attune-gen")
    break
  fi
done
cmake --preset sanitize "${gen[@]}" >/dev/null
cmake --build --preset sanitize -j "$(nproc)"
out=build/sanitize/fuzz
mkdir -p "$out/artifacts" "$out/logs"
targets=(npy_fuzzer sweep_fuzzer variant_id_fuzzer problem_fuzzer kernel_cache_fuzzer db_import_fuzzer worker_result_fuzzer)
export TMPDIR=/dev/shm
run() {
  local name="$1"
  mkdir -p "$out/campaign/$name"
  "$out/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$name-" "$out/campaign/$name" "fuzz/corpus/$name" >"$out/logs/$name.log" 2>&1 || true
}
running=0
for name in "${targets[@]}"; do
  run "$name" &
  running=$((running + 1))
  if ((running >= $(nproc))); then
    wait -n
    running=$((running - 1))
  fi
done
wait
{
  echo "| target | seconds | executions | exec/s | coverage (edges) | features | corpus | crashes |"
  echo "|---|---|---|---|---|---|---|---|"
  total=0
  for name in "${targets[@]}"; do
    log="$out/logs/$name.log"
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo 0)
    corpus=$(find "$out/campaign/$name" -type f | wc -l)
    crashes=$(find "$out/artifacts" -name "$name-*" -type f | wc -l)
    total=$((total + execs))
    echo "| $name | $seconds | $execs | $rate | $cov | $ft | $corpus | $crashes |"
  done
  echo
  echo "Executions in all: $total"
} | tee "$out/campaign.md"
