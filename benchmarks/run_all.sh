#!/usr/bin/env bash
# Reproduce docs/benchmarks.md: side by side on the four shared data sets, then the
# learning curve. Runs from a snapshot of the package and of the MLflow runner, so edits
# made while it runs do not change what is measured. Needs ../shared/llm/serve running,
# .venv (with matplotlib) and .venv-mlflow (benchmarks/mlflow_baseline/setup.sh).
#   nohup bash benchmarks/run_all.sh > benchmarks/results/run_all.log 2>&1 &
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
snap="${SNAPSHOT:-$(mktemp -d /tmp/memalign_bench_XXXX)}"
cp -r "$root/langchain_memalign" "$snap/"
cp "$root/benchmarks/mlflow_baseline/run_mlflow_memalign.py" "$root/benchmarks/mlflow_baseline/proxy.py" "$snap/"
(cd "$root" && git rev-parse HEAD && git status --short langchain_memalign benchmarks) > "$snap/VERSION"
export PYTHONPATH="$snap"
cd "$root"
mkdir -p benchmarks/results docs/img
if [ "${SKIP_SIDE_BY_SIDE:-0}" != 1 ]; then
  .venv/bin/python benchmarks/side_by_side.py --n-train "${N_TRAIN:-10}" --n-test "${N_TEST:-10}" \
    --mlflow --mlflow-runner "$snap/run_mlflow_memalign.py" --proxy-script "$snap/proxy.py" \
    --out benchmarks/results/side_by_side.json --plot docs/img/side_by_side.png
fi
if [ "${SKIP_CURVE:-0}" != 1 ]; then
  for ds in ${CURVE_DATASETS:-feedbackqa halubench}; do
    .venv/bin/python benchmarks/learning_curve_run.py --dataset "$ds" \
      --out "benchmarks/results/learning_curve_$ds.json" --plot "docs/img/learning_curve_$ds.png"
  done
fi
cp "$snap/VERSION" benchmarks/results/VERSION
