#!/usr/bin/env bash
# Runs the GPU test programs of a bundle (DIR/tests/gpu_tests.list), each
# under its own time limit, with no CTest and no path of the building machine:
#
#   run_gpu_tests.sh [--expect-gpu] DIR OUT   # OUT/PROGRAM.json (gtest JSON), OUT/PROGRAM.log
#
# Prints one line per program and a total; exits non-zero when any test
# failed, crashed or ran out of time, and with --expect-gpu also when no test
# passed (every one skipped: the GPU was not usable).
set -uo pipefail
expect_gpu=0
if [ "${1:-}" = --expect-gpu ]; then
  expect_gpu=1
  shift
fi
dir="$(cd "${1:?usage: run_gpu_tests.sh DIR OUT}" && pwd)"
out="${2:?usage: run_gpu_tests.sh DIR OUT}"
mkdir -p "$out"
status=0
passed=0 failed=0 skipped=0
while read -r program filter seconds; do
  case "$program" in '' | '#'*) continue ;; esac
  log="$out/$program.log"
  timeout -k 5 "$seconds" "$dir/tests/$program" --gtest_filter="$filter" --gtest_output="json:$out/$program.json" \
    >"$log" 2>&1
  rc=$?
  p=$(grep -c '^\[       OK \]' "$log")
  f=$(grep -c '^\[  FAILED  \] [^0-9]' "$log")
  s=$(grep -c '^\[  SKIPPED \] [^0-9]' "$log")
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  case $rc in
    0) state="ok" ;;
    124 | 137) state="TIMED OUT after ${seconds}s"; status=1 ;;
    *) state="FAILED (exit $rc)"; status=1 ;;
  esac
  printf '%-18s %-22s %3d passed %3d failed %3d skipped  %s\n' "$program" "$filter" "$p" "$f" "$s" "$state"
done <"$dir/tests/gpu_tests.list"
echo "gpu tests: $passed passed, $failed failed, $skipped skipped"
if [ "$expect_gpu" = 1 ] && [ "$passed" -eq 0 ]; then
  echo "gpu tests: none passed (every test skipped: is the GPU usable? see the facts stage)"
  status=1
fi
exit "$status"
