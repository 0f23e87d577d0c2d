#!/usr/bin/env bash
# Regenerate every quality figure of docs/benchmarks.md from scratch: the runs and reports
# listed in benchmarks/quality_manifest.json, one after the other, from a snapshot of the
# package installed NON-editable into its own venv (an editable install ignores PYTHONPATH,
# so a copy on PYTHONPATH would not be what runs). Edits and commits made while it runs do
# not change what is measured; every result file records the snapshot's commit.
#
#   nohup bash benchmarks/run_quality.sh > /tmp/run_quality.log 2>&1 &
#
# Needs the local servers (chat :8013, embeddings :8012) and:
#   DEPS_VENV    a venv with the package's dependencies and matplotlib (default: .venv);
#                the snapshot venv uses its site-packages for everything but the package
#   MLFLOW_VENV  the MLflow 3.18 venv (default: .venv-mlflow; mlflow_baseline/setup.sh)
# Optional:
#   ONLY="halubench feedbackqa"  run only these manifest entries; their result files start
#                afresh (moved aside), the others' are kept. Every report runs after them,
#                unless ONLY names reports too (ONLY="halubench report-curves"): then those only
#   RESUME=1     keep the results and continue where they stopped (default: start afresh,
#                moving RESULTS aside)
#   SNAPSHOT=worktree  snapshot the working tree with its uncommitted edits (default: HEAD)
#   MANIFEST     another manifest (e.g. a smoke test with --fake)
#   RESULTS (default benchmarks/results/quality), IMG (default docs/img),
#   DATA (default ../shared/data), SCENARIOS (default ../shared/scenarios)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
deps="${DEPS_VENV:-$root/.venv}"
mlflow_venv="${MLFLOW_VENV:-$root/.venv-mlflow}"
results="${RESULTS:-$root/benchmarks/results/quality}"
img="${IMG:-$root/docs/img}"
data="${DATA:-$(cd "$root/.." && pwd)/shared/data}"
scenarios="${SCENARIOS:-$(cd "$root/.." && pwd)/shared/scenarios}"
[ -x "$deps/bin/python" ] || { echo "no venv at $deps (set DEPS_VENV)" >&2; exit 2; }

snap="$(mktemp -d /tmp/memalign_quality_XXXX)"
echo "[$(date -u +%H:%M:%S)] snapshot in $snap (${SNAPSHOT:-head})"
if [ "${SNAPSHOT:-head}" = worktree ]; then
  mkdir -p "$snap/src"
  cp -r "$root/langchain_memalign" "$root/benchmarks" "$root/pyproject.toml" "$root/README.md" "$snap/src/"
  { git -C "$root" rev-parse HEAD; git -C "$root" status --porcelain langchain_memalign benchmarks; } > "$snap/src/VERSION"
else
  mkdir -p "$snap/src"
  git -C "$root" archive HEAD langchain_memalign benchmarks pyproject.toml README.md | tar -x -C "$snap/src"
  git -C "$root" rev-parse HEAD > "$snap/src/VERSION"
fi
rm -rf "$snap/src/benchmarks/results" "$snap/src/benchmarks/mlflow_baseline/results"
find "$snap/src" -name __pycache__ -prune -exec rm -rf {} +

# A venv of the same Python: the snapshot installed non-editable, dependencies from $deps.
"$deps/bin/python" -m venv "$snap/venv"
purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
purelib "$deps/bin/python" > "$(purelib "$snap/venv/bin/python")/_memalign_deps.pth"
"$snap/venv/bin/pip" install -q --no-deps "$snap/src"
rm -rf "$snap/src/langchain_memalign"  # only the installed copy can be imported
cd "$snap/src"  # (the current directory comes first on sys.path)
"$snap/venv/bin/python" - "$snap/venv" <<'EOF'
import sys
import langchain_memalign
assert langchain_memalign.__file__.startswith(sys.argv[1]), langchain_memalign.__file__
print("package:", langchain_memalign.__file__)
EOF

stamp="$(date -u +%Y%m%dT%H%M%S)"
if [ "${RESUME:-0}" != 1 ] && [ -z "${ONLY:-}" ] && [ -d "$results" ] && [ -n "$(ls -A "$results")" ]; then
  echo "moving earlier results aside: $results.old-$stamp"
  mv "$results" "$results.old-$stamp"
fi
mkdir -p "$results" "$img"

# The manifest's commands, placeholders filled in: "name<TAB>command" per line.
manifest="${MANIFEST:-$snap/src/benchmarks/quality_manifest.json}"
cp "$manifest" "$results/quality_manifest.json"
commands="$("$snap/venv/bin/python" - "$manifest" <<EOF
import json, sys
m = json.load(open(sys.argv[1]))
only = set("${ONLY:-}".split())
fill = dict(python="$snap/venv/bin/python", bench="$snap/src/benchmarks", data="$data",
            scenarios="$scenarios", results="$results", img="$img", mlflow_venv="$mlflow_venv")
# Reports all run after a partial run, unless ONLY names some: then only those, so that a
# run of one entry does not rewrite every other figure from the results as they are.
some_reports = bool(only & {e["name"] for e in m["reports"]})
for kind in ("runs", "reports"):
    for entry in m[kind]:
        if only and entry["name"] not in only and (kind == "runs" or some_reports):
            continue
        print(entry["name"] + "\t" + entry["result"].format(**fill) + "\t"
              + entry["command"].format(**fill))
EOF
)"
failed=0
cd "$snap/src"
while IFS=$'\t' read -r name result cmd; do
  if [ -n "${ONLY:-}" ] && [ "${RESUME:-0}" != 1 ] && [ -f "$result" ]; then
    # A run of some entries only: start those afresh, keep the other results.
    echo "moving earlier $result aside: $result.old-$stamp"
    mv "$result" "$result.old-$stamp"
  fi
  echo "[$(date -u +%H:%M:%S)] == $name: $cmd"
  if ! eval "$cmd" >> "$results/$name.log" 2>&1; then
    echo "[$(date -u +%H:%M:%S)] $name FAILED (see $results/$name.log)"
    failed=1
  fi
done <<< "$commands"
cp "$snap/src/VERSION" "$results/VERSION"
echo "[$(date -u +%H:%M:%S)] done (failed=$failed); results in $results, figures in $img"
exit $failed
