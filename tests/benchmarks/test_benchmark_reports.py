"""The benchmarks' reports (benchmarks/reports.py: the modules paired.py, standing.py,
curves.py): what the docs' tables claim is computed here, so it is pinned on small result
files made up for it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import curves
import paired
import reports
import standing


def _result(path: Path, entry: str, seeds: dict[int, list[tuple[Any, Any]]],
            *, numeric: bool = False, seen: tuple[int, int] | None = None) -> Path:  # fmt: skip
    """A quality.py result file: per seed, one entry's test predictions (human, judge), and
    `seen` (right, judged) seen cases a seed."""
    out: dict[str, Any] = {
        "dataset": "x", "ordinal": numeric,
        "scale": {"kind": "numeric" if numeric else "bool"},
        "invocations": [{"git_commit": "abcdef1234"}], "seeds": {},
    }  # fmt: skip
    for seed, pairs in seeds.items():
        verdicts: dict[str, int] = {}
        for _, j in pairs:
            verdicts[str(j)] = verdicts.get(str(j), 0) + 1
        preds = [{"id": f"c{i}", "human": h, "judge": j} for i, (h, j) in enumerate(pairs)]
        out["seeds"][str(seed)] = {"entries": {entry: {"test": {
            "predictions": preds, "verdict_counts": verdicts, "tokens_per_judgment": 100,
        }}}}  # fmt: skip
        if seen is not None:
            out["seeds"][str(seed)]["entries"][entry]["seen"] = {"correct": seen[0], "n": seen[1]}
    path.write_text(json.dumps(out))
    return path


def _standing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *sets: list[str],
              script: Any = standing, extra: tuple[str, ...] = ()) -> list[str]:  # fmt: skip
    md = tmp_path / "standing.md"
    argv = ["standing.py", "--md", str(md), *extra]
    for s in sets:
        argv += ["--set", *s]
    monkeypatch.setattr(sys, "argv", argv)
    script.main()
    return md.read_text().splitlines()


def _row(lines: list[str], title: str, system: str) -> list[str]:
    for line in lines:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:2] == [title, system]:
            return cells
    raise AssertionError(f"no row {title}/{system} in {lines}")


def test_standing_flags_collapse_and_differences_beyond_noise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = [True, False] * 20
    ours = _result(tmp_path / "ours.json", "ours@10", {0: [(h, h) for h in truth]})
    # Always "true" on a balanced set: half right, one verdict for every case.
    flat = _result(tmp_path / "flat.json", "unaligned@0", {0: [(h, True) for h in truth]})
    lines = _standing(tmp_path, monkeypatch,
                      ["set", f"ours={ours}:ours@10", f"unaligned={flat}:unaligned@0"])  # fmt: skip
    row = _row(lines, "set", "unaligned")
    assert row[4].startswith("0.50")
    assert row[6].startswith("**yes**: True 40 of 40")
    assert row[7].startswith("-0.500") and "beyond noise" in row[7]
    assert _row(lines, "set", "ours")[6] == "no"


def test_standing_pools_seeds_and_pairs_error_on_numeric_scales(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = [1, 2, 3, 4, 5] * 6
    ours = _result(tmp_path / "ours.json", "ours@10", {0: [(h, h) for h in labels]},
                   numeric=True)  # fmt: skip
    # One point a seed, in two files under one name: pooled to 60 cases.
    off_by_one = [(h, min(5, h + 1)) for h in labels]
    a = _result(tmp_path / "a.json", "mlflow@10", {0: off_by_one}, numeric=True)
    b = _result(tmp_path / "b.json", "mlflow@10", {1: off_by_one}, numeric=True)
    lines = _standing(tmp_path, monkeypatch,
                      ["p", f"ours={ours}:ours@10", f"mlflow={a}:mlflow@10",
                       f"mlflow={b}:mlflow@10"])  # fmt: skip
    row = _row(lines, "p", "mlflow")
    assert row[2:4] == ["0,1", "60"]
    assert row[5] == "0.80"  # 24 of 30 off by one a seed
    # Only seed 0 pairs with ours (ours ran seed 0 alone).
    assert row[8].startswith("+0.800") and "beyond noise" in row[8]


def test_standing_needs_the_system_it_pairs_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _result(tmp_path / "o.json", "unaligned@0", {0: [(True, True)]})
    with pytest.raises(SystemExit, match="no point named 'ours'"):
        _standing(tmp_path, monkeypatch, ["set", f"unaligned={other}:unaligned@0"])


def test_paired_difference_is_within_noise_when_systems_trade_cases() -> None:
    a = {(0, f"c{i}"): (float(i % 2), None) for i in range(40)}
    b = {(0, f"c{i}"): (float((i + 1) % 2), None) for i in range(40)}
    diff = paired.paired(a, b, 0)
    assert diff is not None
    mean, lo, hi = diff
    assert mean == 0 and lo < 0 < hi
    assert standing.beyond(diff) == ""
    assert paired.paired(a, {}, 0) is None


def test_curves_orders_stages_pools_seen_cases_and_pairs_with_the_unaligned_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = [True, False] * 20
    half = [(h, h if i % 4 else not h) for i, h in enumerate(truth)]  # 30 of 40 right
    base = _result(tmp_path / "u.json", "unaligned@0", {0: half, 1: half})
    ten = _result(tmp_path / "t.json", "ours@10", {0: [(h, h) for h in truth]}, seen=(9, 10))
    fifty = _result(tmp_path / "f.json", "ours@50", {0: [(h, h) for h in truth],
                                                     1: [(h, h) for h in truth]},
                    seen=(18, 20))  # fmt: skip
    img = tmp_path / "curves.png"
    lines = _standing(tmp_path, monkeypatch,
                      ["set", f"ours@50={fifty}:ours@50", f"ours@0={base}:unaligned@0",
                       f"ours@10={ten}:ours@10"],
                      script=curves, extra=("--img", str(img)))  # fmt: skip
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines if ln.startswith("| set")]
    assert [r[2] for r in rows] == ["0", "10", "50"]  # by stage, whatever the order given
    assert rows[0][5].startswith("0.75") and rows[0][10] == "(itself)"
    assert rows[1][8] == "9/10" and rows[2][8] == "36/40"  # seen cases over both seeds
    assert rows[1][10].startswith("+0.250")  # paired on seed 0 only: ours@10 ran it alone
    assert "beyond noise" in rows[2][10]
    assert img.stat().st_size > 0


def test_curves_refuses_a_point_without_a_stage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = _result(tmp_path / "o.json", "unaligned@0", {0: [(True, True)]})
    with pytest.raises(SystemExit, match="SYSTEM@STAGE"):
        _standing(tmp_path, monkeypatch,
                  ["set", f"ours@0={other}:unaligned@0", f"ours={other}:unaligned@0"],
                  script=curves)  # fmt: skip


def test_paired_reads_the_uncalibrated_scores_of_the_same_judgments(tmp_path: Path) -> None:
    path = _result(tmp_path / "ours.json", "ours@50", {0: [(2, 2), (2, 2), (4, 4)]}, numeric=True)
    result = json.loads(path.read_text())
    test = result["seeds"]["0"]["entries"]["ours@50"]["test"]
    test["uncalibrated"] = {**test, "predictions": [
        {"id": "c0", "human": 2, "judge": 3}, {"id": "c1", "human": 2, "judge": 3},
        {"id": "c2", "human": 4, "judge": 4},
    ]}  # fmt: skip
    path.write_text(json.dumps(result))
    _, _, _, points = paired.load(f"raw={path}:ours@50/uncalibrated")
    assert [p["judge"] for p in points[0][1]["test"]["predictions"]] == [3, 3, 4]
    _, _, _, points = paired.load(f"ours={path}:ours@50")
    assert [p["judge"] for p in points[0][1]["test"]["predictions"]] == [2, 2, 4]
    with pytest.raises(SystemExit, match="unknown view 'raw'"):
        paired.load(f"x={path}:ours@50/raw")


def test_the_reports_command_runs_each_report_as_its_module_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = [True, False] * 5
    ours = _result(tmp_path / "ours.json", "ours@10", {0: [(h, h) for h in truth]})
    flat = _result(tmp_path / "flat.json", "unaligned@0", {0: [(h, True) for h in truth]})
    points = ["set", f"ours={ours}:ours@10", f"unaligned={flat}:unaligned@0"]
    direct = _standing(tmp_path, monkeypatch, points)
    md = tmp_path / "via_reports.md"
    monkeypatch.setattr(sys, "argv", ["reports.py"])
    assert reports.main(["standing", "--md", str(md), "--set", *points]) == 0
    assert md.read_text().splitlines() == direct
    assert reports.main(["nonesuch"]) == 2
    assert reports.main([]) == 2
