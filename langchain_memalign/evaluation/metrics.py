"""Agreement metrics: pure functions, no model calls.

- **accuracy**: exact match, for every scale;
- **Cohen's kappa**: chance-corrected agreement; with `weights="quadratic"`
  the weighted kappa for ordinal scales (numeric ranges, ordered categories),
  where being one step off costs less than being four steps off;
- **CCC** (Lin's concordance correlation coefficient) and **MAE** for numeric
  scales: CCC rewards agreement in level and spread, not only correlation;
- a **confusion matrix** (rows: human, columns: judge);
- **inter-annotator agreement**: Krippendorff's alpha, Fleiss' kappa and the
  plain pairwise agreement.

Undefined metrics (kappa when both raters always give one and the same label,
CCC on a single case) are `nan`. `agreement` turns them into an
`AgreementReport` (where they are `None`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from itertools import combinations
from typing import Any, Literal

import numpy as np

__all__ = [
    "accuracy",
    "ccc",
    "cohen_kappa",
    "confusion_matrix",
    "fleiss_kappa",
    "krippendorff_alpha",
    "label_order",
    "mae",
    "pairwise_agreement",
]

KappaWeights = Literal["linear", "quadratic"]
AlphaLevel = Literal["nominal", "ordinal", "interval"]


# -- metric functions -------------------------------------------------------------------------


def _pairs(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"need as many predictions as labels, got {len(a)} and {len(b)}")


def accuracy(y_true: Sequence[Any], y_pred: Sequence[Any]) -> float:
    """Share of exact matches; `nan` for no cases."""
    _pairs(y_true, y_pred)
    if not y_true:
        return math.nan
    return sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == p) / len(y_true)


def mae(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    """Mean absolute error; `nan` for no cases."""
    _pairs(y_true, y_pred)
    if not y_true:
        return math.nan
    return float(np.mean(np.abs(np.asarray(y_true, float) - np.asarray(y_pred, float))))


def ccc(y_true: Sequence[float], y_pred: Sequence[float]) -> float:
    r"""Lin's concordance correlation coefficient.

    `2 cov(x, y) / (var x + var y + (mean x - mean y)^2)` with population
    (1/n) moments: 1 for perfect agreement, 0 for none, negative for
    discordance. Identical constant series give 1; fewer than two cases `nan`.
    """
    _pairs(y_true, y_pred)
    if len(y_true) < 2:
        return math.nan
    x, y = np.asarray(y_true, float), np.asarray(y_pred, float)
    mx, my = x.mean(), y.mean()
    cov = float(np.mean((x - mx) * (y - my)))
    denom = float(x.var() + y.var() + (mx - my) ** 2)
    if denom == 0.0:  # both constant and equal
        return 1.0
    return 2.0 * cov / denom


def label_order(labels: Sequence[Any] | None, *series: Iterable[Any]) -> list[Any]:
    """The labels to tabulate: `labels` as given (checked), else every value in order seen."""
    if labels is not None:
        out = list(labels)
        known = set(out)
        extra = [v for s in series for v in s if v not in known]
        if extra:
            raise ValueError(f"values {sorted(set(map(str, extra)))} are not among the labels")
        return out
    seen: dict[Any, None] = {}
    for s in series:
        for v in s:
            seen.setdefault(v, None)
    try:
        return sorted(seen)
    except TypeError:
        return list(seen)


def confusion_matrix(
    y_true: Sequence[Hashable], y_pred: Sequence[Hashable], labels: Sequence[Hashable] | None = None
) -> np.ndarray:
    """Counts of (human label, judge label): rows are `labels` as truth, columns as prediction.

    Labels default to the sorted union of the values seen.
    """
    _pairs(y_true, y_pred)
    order = label_order(labels, y_true, y_pred)
    index = {v: i for i, v in enumerate(order)}
    m = np.zeros((len(order), len(order)), dtype=np.int64)
    for t, p in zip(y_true, y_pred, strict=True):
        m[index[t], index[p]] += 1
    return m


def _weights(k: int, weights: KappaWeights | None) -> np.ndarray:
    i, j = np.indices((k, k))
    if weights is None:
        return np.asarray(i != j, dtype=float)
    d = np.abs(i - j) / max(k - 1, 1)
    if weights == "linear":
        return np.asarray(d, dtype=float)
    if weights == "quadratic":
        return np.asarray(d**2, dtype=float)
    raise ValueError(f"weights must be None, 'linear' or 'quadratic', got {weights!r}")


def cohen_kappa(
    a: Sequence[Hashable],
    b: Sequence[Hashable],
    *,
    labels: Sequence[Hashable] | None = None,
    weights: KappaWeights | None = None,
) -> float:
    """Cohen's kappa between two raters, optionally weighted.

    `kappa = 1 - sum(w * observed) / sum(w * expected)`, with expected counts
    from the raters' marginals. Unweighted, that is `(p_o - p_e) / (1 - p_e)`.
    For `"linear"` or `"quadratic"` weights the order of `labels` is the
    scale's order (defaults to the sorted values, right for numbers). `nan`
    when undefined (no cases, or both raters always give the same one label).
    """
    _pairs(a, b)
    if not a:
        return math.nan
    m = confusion_matrix(a, b, labels).astype(float)
    n = m.sum()
    expected = np.outer(m.sum(axis=1), m.sum(axis=0)) / n
    w = _weights(len(m), weights)
    denom = float((w * expected).sum())
    if denom == 0.0:
        return math.nan
    return 1.0 - float((w * m).sum()) / denom


def _units(units: Sequence[Sequence[Any]]) -> list[list[Any]]:
    return [[v for v in u if v is not None] for u in units]


def krippendorff_alpha(
    units: Sequence[Sequence[Any]],
    *,
    level: AlphaLevel = "nominal",
    labels: Sequence[Any] | None = None,
) -> float:
    """Krippendorff's alpha for cases rated by any number of annotators.

    `units[i]` holds the labels case `i` received (any count; `None` is a
    missing label); cases with fewer than two labels are not pairable and are
    skipped. `level` picks the distance: `"nominal"` (labels match or not),
    `"ordinal"` (ranks by `labels` order, or sorted values) or `"interval"`
    (numbers, or positions in `labels`). `alpha = 1 - D_o / D_e`: 1 is perfect
    agreement, 0 chance level. `nan` with no pairable case or a single value.
    """
    pairable = [u for u in _units(units) if len(u) >= 2]
    if not pairable:
        return math.nan
    order = label_order(labels, *pairable)
    index = {v: i for i, v in enumerate(order)}
    k = len(order)
    o = np.zeros((k, k))
    for u in pairable:
        idx = [index[v] for v in u]
        share = 1.0 / (len(u) - 1)
        for p in range(len(idx)):
            for q in range(len(idx)):
                if p != q:
                    o[idx[p], idx[q]] += share
    n_c = o.sum(axis=1)
    n = n_c.sum()
    if level == "nominal":
        delta = 1.0 - np.eye(k)
    elif level == "interval":
        pos = (
            np.asarray(order, float)
            if labels is None and all(_is_number(v) for v in order)
            else np.arange(k, dtype=float)
        )
        delta = (pos[:, None] - pos[None, :]) ** 2
    elif level == "ordinal":
        delta = np.zeros((k, k))
        for c in range(k):
            for d in range(k):
                lo, hi = min(c, d), max(c, d)
                delta[c, d] = (n_c[lo : hi + 1].sum() - (n_c[c] + n_c[d]) / 2.0) ** 2
    else:
        raise ValueError(f"level must be 'nominal', 'ordinal' or 'interval', got {level!r}")
    d_o = float((o * delta).sum()) / n
    d_e = float((np.outer(n_c, n_c) * delta).sum()) / (n * (n - 1))
    if d_e == 0.0:
        return math.nan
    return float(1.0 - d_o / d_e)


def fleiss_kappa(units: Sequence[Sequence[Any]], *, labels: Sequence[Any] | None = None) -> float:
    """Fleiss' kappa: every case rated by the same number (at least two) of annotators.

    Raises `ValueError` when the number of labels differs between cases (use
    `krippendorff_alpha` then). `nan` when undefined (a single label overall).
    """
    rows = _units(units)
    if not rows:
        return math.nan
    sizes = {len(u) for u in rows}
    if len(sizes) != 1 or min(sizes) < 2:
        raise ValueError(f"Fleiss' kappa needs the same number (>= 2) of labels per case: {sizes}")
    r = sizes.pop()
    order = label_order(labels, *rows)
    index = {v: i for i, v in enumerate(order)}
    counts = np.zeros((len(rows), len(order)))
    for i, u in enumerate(rows):
        for v in u:
            counts[i, index[v]] += 1
    p_i = ((counts * (counts - 1)).sum(axis=1)) / (r * (r - 1))
    p_j = counts.sum(axis=0) / counts.sum()
    p_bar, p_e = float(p_i.mean()), float((p_j**2).sum())
    if p_e == 1.0:
        return math.nan
    return (p_bar - p_e) / (1.0 - p_e)


def pairwise_agreement(units: Sequence[Sequence[Any]]) -> float:
    """Share of agreeing label pairs within cases (all pairs of each case's labels)."""
    agree = total = 0
    for u in _units(units):
        for x, y in combinations(u, 2):
            total += 1
            agree += x == y
    return agree / total if total else math.nan


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)
