#!/usr/bin/env bash
# Generate the large real torch 2.13 traces used by benchmarks/run.py.
#
# Uses the shared generator (case_large_train.py, unchanged) in the torch venv.
# ~578 KB of uncompressed JSON and ~2,000 events per profiled step (measured), so:
#   large_50mb  = 88 steps, large_200mb = 350 steps, large_500mb = 880 steps.
# Cases run one after another (the 500 MB one needs ~10 GB RAM while torch
# post-processes). Each run's stdout/stderr and /usr/bin/time -v go to
# $PROFTAB_BENCH_TRACES/logs/<name>.log.
#
# usage: benchmarks/gen/generate.sh [name:steps ...]     (default: the three above)
set -euo pipefail
OUT=${PROFTAB_BENCH_TRACES:-/work/bench_traces}
PY=${TORCH_PY:-/work/venvs/torch/bin/python}
GEN=${GEN_TRACES_DIR:-/work/shared/tools/gen_traces}
mkdir -p "$OUT/logs"
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(large_50mb:88 large_200mb:350 large_500mb:880)
fi
for c in "${cases[@]}"; do
  name=${c%%:*}; steps=${c##*:}
  if [ -f "$OUT/$name/meta.json" ]; then echo "skip $name (exists)"; continue; fi
  echo "=== $name steps=$steps start $(date -Is)"
  TRACES_OUT="$OUT" /usr/bin/time -v "$PY" "$GEN/case_large_train.py" "$steps" "$name" > "$OUT/logs/$name.log" 2>&1 \
    || { echo "FAILED $name (see $OUT/logs/$name.log)"; continue; }
  echo "=== $name done $(date -Is)"
done
