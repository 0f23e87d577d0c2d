#!/usr/bin/env bash
# Reproduce docs/benchmarks_scale.md: every scale benchmark, each printing its figures and
# saving benchmarks/scale/results/<name>.json (with the load average of every figure).
#
#   bash benchmarks/scale/run_all.sh                 # about 40-60 min on 2 busy cores
#   MAX_LOAD=2.5 bash benchmarks/scale/run_all.sh    # wait (up to 30 min each) for quiet
#
# Needs .venv (pip install -e ".[dev]"). Optional: the local MiniLM server
# (http://127.0.0.1:8012/v1, for embed_real_texts.py; skipped when down and no cache) and
# .venv-mlflow (benchmarks/mlflow_baseline/setup.sh, for mlflow_side_by_side.py).
# Big synthetic memories (10k, 100k, 1M episodes; ~3.5 GB) are built once under
# $MEMALIGN_SCALE_DATA (default /tmp/memalign_scale) and reused.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
s=benchmarks/scale
wait=()
if [ -n "${MAX_LOAD:-}" ]; then wait=(--max-load "$MAX_LOAD" --max-wait "${MAX_WAIT:-1800}"); fi
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"

$py $s/bench_align_one.py --n 10000 --profile "${wait[@]}"
$py $s/bench_judge_overhead.py --n 10000 --what-if "${wait[@]}"
$py $s/bench_judge_overhead.py --n 1000000 --what-if "${wait[@]}"
$py $s/bench_load.py --n 100000 --footprint-n 10000 1000000 "${wait[@]}"
$py $s/bench_memory_tokens.py --items 5000
$py $s/bench_memory_tokens.py --items 5000 --consolidation fail
$py $s/bench_batch.py --what-if "${wait[@]}"
if [ -f $s/results/real_minilm.npz ] || curl -sf -m 5 http://127.0.0.1:8012/v1/models >/dev/null; then
  $py $s/embed_real_texts.py --n "${REAL_TEXTS:-6000}"
  $py $s/bench_hnsw_recall.py --queries 1000 --big-n 1000000
else
  echo "MiniLM server down and no cached embeddings: skipping the HNSW recall benchmark"
fi
if [ -x .venv-mlflow/bin/python ]; then
  .venv-mlflow/bin/python $s/mlflow_side_by_side.py --sizes 1000 10000 --load-n 100000
  .venv-mlflow/bin/python $s/mlflow_side_by_side.py --sizes 10000 --load-n 0 --dspy-cache memory
else
  echo ".venv-mlflow missing: skipping the MLflow side-by-side (benchmarks/mlflow_baseline/setup.sh)"
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
