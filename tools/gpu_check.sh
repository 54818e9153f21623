#!/usr/bin/env bash
# One bounded GPU run from a bundle made by tools/gpu_bundle.sh; no build step.
#
#   bash tools/gpu_check.sh DIR      (DIR: the bundle; also DIR/tools/gpu_check.sh DIR)
#
# Stages, each under its own time limit; DIR/report.md (and DIR/raw/STAGE.*)
# grows after every stage, so a stage that hangs or crashes loses only itself:
#   facts     attune doctor, nvidia-smi (name, SMs, clocks, driver), torch
#   tests     the GPU test programs against the fp64 reference
#   ceilings  device copy bandwidth and a bf16 GEMM rate, measured now
#   forward   correctness, then the heuristic and a small sweep vs SDPA flash/cuDNN
#   decode    split-KV decode on a 32k-token cache vs the copy bandwidth
#   backward  gradients vs fp32 autograd, then time vs SDPA's flash backward
#   python    the Python package: flash-attn calls vs SDPA, streams, a CUDA graph, host time per call
# and ends with a one-screen summary. docs/gpu-run.md explains the report.
set -uo pipefail
dir="$(cd "${1:?usage: tools/gpu_check.sh DIR (a bundle from tools/gpu_bundle.sh)}" && pwd)"
if [ ! -x "$dir/bin/attune" ] || [ ! -f "$dir/lib/libattune.so" ]; then
  echo "gpu_check: $dir is not a bundle (no bin/attune, lib/libattune.so): make one with tools/gpu_bundle.sh DIR" >&2
  exit 2
fi
tools="$dir/tools"
raw="$dir/raw"
report="$dir/report.md"
mkdir -p "$raw"
python="${PYTHON:-python3}"

# Stage names and time limits (seconds); the total stays under 8 minutes.
stages=(facts tests ceilings forward decode backward python)
declare -A limit=([facts]=40 [tests]=135 [ceilings]=30 [forward]=170 [decode]=45 [backward]=75 [python]=45)
total=0
for s in "${stages[@]}"; do total=$((total + limit[$s])); done
printf 'gpu_check: bundle %s\n' "$dir"
printf 'gpu_check: budget per stage (s):'
for s in "${stages[@]}"; do printf ' %s %d,' "$s" "${limit[$s]}"; done
printf ' total %d (%d min %d s)\n' "$total" $((total / 60)) $((total % 60))

# NVRTC from pip (torch's nvidia/cu*/lib) when the toolkit has none; kernels
# compiled in this run are cached beside the report.
export ATTUNE_PYTHON_SITE="${ATTUNE_PYTHON_SITE:-$("$python" -c 'import site; print(":".join(site.getsitepackages()))' 2>/dev/null)}"
export ATTUNE_CACHE_DIR="${ATTUNE_CACHE_DIR:-$dir/cache}"
export PYTHONUNBUFFERED=1

{
  echo "# GPU check"
  echo
  sed 's/^/    /' "$dir/BUNDLE" 2>/dev/null
  echo
  echo "Started $(date -u +%Y-%m-%dT%H:%M:%SZ); stage budgets (s): $(for s in "${stages[@]}"; do printf '%s %d, ' "$s" "${limit[$s]}"; done)total $total."
} >"$report"

declare -A result
run_stage() {  # run_stage NAME COMMAND...: runs it under its limit, appends its section
  local name="$1"
  shift
  local start end rc
  start=$(date +%s)
  echo "gpu_check: stage $name (limit ${limit[$name]} s)"
  timeout -k 5 "${limit[$name]}" "$@" >"$raw/$name.log" 2>&1
  rc=$?
  end=$(date +%s)
  case $rc in
    0) result[$name]="ok" ;;
    124 | 137) result[$name]="TIMED OUT after ${limit[$name]} s" ;;
    *) result[$name]="FAILED (exit $rc)" ;;
  esac
  {
    echo
    if [ -s "$raw/$name.md" ]; then
      cat "$raw/$name.md"
    else
      echo "## $name"
      echo
      echo '```'
      tail -n 30 "$raw/$name.log"
      echo '```'
    fi
    echo
    echo "_Stage $name: ${result[$name]} in $((end - start)) s._"
  } >>"$report"
  tail -n 3 "$raw/$name.log" | sed "s/^/  $name: /"
}

check=("$python" "$tools/gpu_check.py" --bundle "$dir" --out "$raw")
run_stage facts "${check[@]}" --stage facts
run_stage tests bash -c "bash '$tools/run_gpu_tests.sh' --expect-gpu '$dir' '$raw/tests' | tee '$raw/tests.txt'; rc=\${PIPESTATUS[0]};
  { echo '## GPU tests'; echo; echo '\`\`\`'; cat '$raw/tests.txt'; echo '\`\`\`'; } > '$raw/tests.md'; exit \$rc"
run_stage ceilings "${check[@]}" --stage ceilings
run_stage forward "${check[@]}" --stage forward
run_stage decode "${check[@]}" --stage decode
run_stage backward "${check[@]}" --stage backward
run_stage python "${check[@]}" --stage python

status=0
for s in "${stages[@]}"; do [ "${result[$s]}" = ok ] || status=1; done
summary=$("$python" "$tools/gpu_check.py" --bundle "$dir" --out "$raw" --summary \
  --stage-results "$(for s in "${stages[@]}"; do printf '%s=%s;' "$s" "${result[$s]}"; done)" 2>&1)
{
  echo
  echo "## Summary"
  echo
  echo '```'
  echo "$summary"
  echo '```'
} >>"$report"
echo "$summary"
echo "gpu_check: report in $report (status $status)"
exit "$status"
