#!/usr/bin/env bash
# Tunes a GPU fleet through Slurm: one array task per shard, then a merge.
#
#   tools/slurm/submit.sh --shards N --out DIR [--attune PATH] [--sbatch "ARGS"] -- TUNE_ARGS...
#   tools/slurm/submit.sh --out DIR        # again, after a failure: resumes
#
# DIR is on storage every node sees. The first call saves N and TUNE_ARGS
# (the sweep: attune tune's flags, e.g. --backend cuda --sweep sweep.json)
# in DIR; each array task K runs `attune tune --shard K/N` into
# DIR/shards/shard-K.db with the kernel cache on node-local disk
# ($ATTUNE_NODE_CACHE, default $TMPDIR/attune-cache-$UID), and a job that
# depends on them all (afterok) merges the shards into DIR/tuning.db, runs
# `attune db verify` and writes DIR/report.html.
#
# Calling it again submits only the shards not done (each resumes from its
# database: what it measured is not measured again) and a new merge job; a
# merge job whose shards failed is cancelled by Slurm (--kill-on-invalid-dep).
# --sbatch passes options to both sbatch calls (partition, account, --gres=gpu:1,
# time limit). Prints the job ids: "array JOBID" and "merge JOBID".
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
shards=""
out=""
attune=""
extra=""
while (($#)); do
  case "$1" in
    --shards) shards="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --attune) attune="$2"; shift 2 ;;
    --sbatch) extra="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "submit.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "submit.sh: --out DIR is required (shared storage)" >&2; exit 2; }
mkdir -p "$out/shards" "$out/logs"
out="$(cd "$out" && pwd)"
# The attune of the first call unless given: every shard runs one build.
if [ -z "$attune" ] && [ -e "$out/attune.path" ]; then attune="$(cat "$out/attune.path")"; fi
if [ -z "$attune" ]; then attune="$(command -v attune || true)"; fi
[ -n "$attune" ] && [ -x "$attune" ] || {
  echo "submit.sh: attune not found ('${attune}'); give --attune PATH (on storage every node sees)" >&2; exit 2; }
attune="$(cd "$(dirname "$attune")" && pwd)/$(basename "$attune")"
echo "$attune" > "$out/attune.path"

if [ -e "$out/sweep.args" ]; then
  # A resubmission: the sweep and its sharding are those of the first call.
  saved="$(cat "$out/shards.count")"
  if [ -n "$shards" ] && [ "$shards" != "$saved" ]; then
    echo "submit.sh: $out was sharded $saved ways; got --shards $shards (use a new --out)" >&2; exit 2
  fi
  if (($#)) && [ "$(printf '%s\n' "$@")" != "$(cat "$out/sweep.args")" ]; then
    echo "submit.sh: $out holds another sweep (see $out/sweep.args); use a new --out" >&2; exit 2
  fi
  shards="$saved"
else
  [[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "submit.sh: --shards N (N >= 1) is required; got '${shards}'" >&2; exit 2; }
  (($#)) || { echo "submit.sh: the sweep's attune tune arguments are required after --" >&2; exit 2; }
  printf '%s\n' "$@" > "$out/sweep.args.tmp" && mv "$out/sweep.args.tmp" "$out/sweep.args"
  echo "$shards" > "$out/shards.count"
fi

todo=()
for ((k = 0; k < shards; k++)); do
  [ -e "$out/shards/shard-$k.done" ] || todo+=("$k")
done
rm -f "$out/merged"

env_list="ALL,ATTUNE=$attune,ATTUNE_FLEET_DIR=$out,ATTUNE_SHARDS=$shards"
# shellcheck disable=SC2086  # --sbatch holds several options
common=(--parsable --export="$env_list" $extra)
dependency=()
if ((${#todo[@]})); then
  array="$(IFS=,; echo "${todo[*]}")"
  job="$(sbatch "${common[@]}" --array="$array" --output="$out/logs/shard-%a.log" --open-mode=append \
         "$here/tune_shard.sbatch")"
  job="${job%%;*}"
  echo "array $job (shards $array of $shards)"
  dependency=(--dependency="afterok:$job" --kill-on-invalid-dep=yes)
fi
merge="$(sbatch "${common[@]}" "${dependency[@]}" --output="$out/logs/merge.log" --open-mode=append \
         "$here/merge.sbatch")"
echo "merge ${merge%%;*}"
