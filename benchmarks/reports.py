"""Reports from the quality harness's result files: tables and the curves figure.

    python benchmarks/reports.py paired   [options]   # systems paired on the same cases
    python benchmarks/reports.py standing [options]   # where we stand: every data set
    python benchmarks/reports.py curves   [options]   # learning curves, table and figure
    python benchmarks/reports.py REPORT --help        # its options

Each reads result files only (no model call) and is a module of this folder: `paired.py`,
`standing.py` and `curves.py`, whose docstrings say what the report shows. The entries
`report-*` of `quality_manifest.json` give the commands behind the published tables.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

REPORTS = ("paired", "standing", "curves")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in REPORTS:
        print(f"unknown report {name!r}; one of: {', '.join(REPORTS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(name)
    sys.argv = [f"{Path(sys.argv[0]).name} {name}", *rest]
    module.main()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
