#!/usr/bin/env bash
# Recreate .venv-mlflow (MLflow 3.18.0 + MemAlignOptimizer deps) at the repo root.
#   bash benchmarks/mlflow_baseline/setup.sh            # uses python3.11 (or $PYTHON)
# `pip install mlflow==3.18.0` fails: it pins mlflow-skinny==3.18.0 and
# mlflow-tracing==3.18.0, which are not on the registry. The mlflow wheel holds the whole
# package, so it goes in with --no-deps and its dependencies come from requirements-lock.txt
# (exact pins; litellm==1.102.4 because newer ones pin a certifi the registry lacks).
# `pip check` will then report the two missing mlflow-skinny/mlflow-tracing pins; harmless.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VENV:-$root/.venv-mlflow}"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null || py=python3

"$py" -m venv "$venv"
"$venv/bin/python" -m pip install --upgrade pip==26.3
"$venv/bin/python" -m pip install --no-deps mlflow==3.18.0
"$venv/bin/python" -m pip install -r "$here/requirements-lock.txt"
LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/python" -c "
import mlflow
from mlflow.genai.judges import make_judge
from mlflow.genai.judges.optimizers import MemAlignOptimizer
import dspy, litellm
print('mlflow', mlflow.__version__, '| dspy', dspy.__version__, '| MemAlignOptimizer OK')
"
