"""People's preferences between two runs, read from a LangSmith comparative experiment.

A comparative experiment puts two experiments on one dataset side by side. For each
example a reviewer (in the comparison view, or through the API) scores the two runs
on one feedback key: the preferred run 1 and the other 0, a tie 0.5 each, the two
records sharing a `feedback_group_id`. `read_preferences` turns each such pair of
human records into one `Feedback` item for a pairwise judge:

```python
comparison = client.create_comparative_experiment(
    "a-vs-b", experiments=[exp_a.id, exp_b.id], reference_dataset=dataset.id
)
# ... reviewers state their preferences in LangSmith ...
read = read_preferences(client, comparison, key=judge.config.name)
judge.align(read.items)
```

The case is the one `comparative_evaluator` gives the judge: the example's inputs, the
first experiment's run as output A and the second's as output B, the example's
outputs as reference. A review and a judgment of the same pair therefore see the same
case. Each item's id is derived from the feedback group, so reading again after a
reviewer changed their mind updates the item when aligned rather than adding another.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.feedback import Feedback
from langchain_memalign.langsmith.comparative import PairPreparer, default_pair

__all__ = ["PreferenceRead", "SkippedPreference", "read_preferences"]

_ID_PREFIX = "langsmith-pair:"
"""Prefix of the `Feedback.id` of a preference: the rest is its feedback group's id."""

_HUMAN_SOURCE_TYPES = ("app", "api")


@dataclass(frozen=True)
class SkippedPreference:
    """A feedback group (or a record without one) that gave no `Feedback` item."""

    feedback_group_id: str | None
    """The group's id; None for a record that is in no group."""
    feedback_ids: tuple[str, ...]
    """The LangSmith feedback records of the group."""
    reason: str
    """Why it was skipped, in plain words."""


@dataclass
class PreferenceRead:
    """What `read_preferences` read: the items to align and what it left out."""

    items: list[Feedback] = field(default_factory=list)
    """One pairwise `Feedback` per complete human feedback group."""
    skipped: list[SkippedPreference] = field(default_factory=list)
    """Groups that were incomplete, not human, unreadable, or stated no preference."""
    model_feedback: int = 0
    """Records not written by a person (e.g. a model evaluator's), left out."""
    verdicts: dict[str, str] = field(default_factory=dict)
    """A model evaluator's verdict on an item's pair of runs, by item id: from a
    complete group of model feedback (e.g. `comparative_evaluator`'s) on the same key,
    runs and comparison, the latest if several. Pass it as `align`'s `prior_verdicts`
    (with `prior_source="langsmith"`) to record how often the judge agreed with the
    people before learning from them."""


class _Skip(Exception):
    """A feedback group gives no item; the message says why."""


def _uuid(value: str | uuid.UUID, what: str) -> str:
    try:
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
    except ValueError:
        raise ValueError(f"{what} must be an id (a UUID), not {value!r}") from None


def _experiment_order(
    comparative_experiment: ls_schemas.ComparativeExperiment | str | uuid.UUID,
    experiments: Sequence[str | uuid.UUID] | None,
) -> tuple[str, tuple[str, str]]:
    """The comparative experiment's id and its two experiments' ids, first one first."""
    if isinstance(comparative_experiment, ls_schemas.ComparativeExperiment):
        cid = str(comparative_experiment.id)
        info = comparative_experiment.experiments_info or []
        order = [str(e["id"]) for e in info if isinstance(e, dict) and e.get("id")]
        if experiments is None:
            experiments = order
    else:
        cid = _uuid(comparative_experiment, "comparative_experiment")
        if experiments is None:
            raise ValueError(
                "read_preferences needs the order of the comparative experiment's "
                "experiments: pass the ComparativeExperiment that "
                "create_comparative_experiment returned, or experiments=(first, second)"
            )
    ids = [_uuid(e, "experiments") for e in experiments]
    if len(ids) != 2 or ids[0] == ids[1]:
        raise ValueError(
            f"a pairwise judge compares two experiments; comparative experiment {cid} "
            f"holds {len(set(ids))}"
        )
    return cid, (ids[0], ids[1])


def _label(score_a: Any, score_b: Any) -> str | None:
    """A, B or tie from the two runs' scores; None when they state no preference."""
    if not isinstance(score_a, int | float) or not isinstance(score_b, int | float):
        return None
    # LangSmith's comparison view prefers the higher score; equal scores prefer neither.
    if score_a > score_b:
        return "A"
    if score_b > score_a:
        return "B"
    return "tie"


def read_preferences(
    client: Client,
    comparative_experiment: ls_schemas.ComparativeExperiment | str | uuid.UUID,
    *,
    key: str,
    experiments: Sequence[str | uuid.UUID] | None = None,
    source_types: Sequence[str] = _HUMAN_SOURCE_TYPES,
    prepare: PairPreparer | None = None,
) -> PreferenceRead:
    """Human preferences between two runs on `key`, as `Feedback` for a pairwise judge.

    Reads the feedback on `key` filed under the comparative experiment, groups it by
    `feedback_group_id`, and turns each group of one human record per run into an
    item: the case `comparative_evaluator` builds (output A is the run of the first
    experiment), the label `"A"`, `"B"` or `"tie"` from the higher score (equal scores
    are a tie), the records' comments as the rationale, the reviewer as annotator, and
    in `metadata["langsmith"]` the comparative experiment, the feedback group, the two
    runs and experiments and the feedback records. The item's id is
    `"langsmith-pair:<feedback_group_id>"`: aligning a re-read replaces the old item.

    Skipped, and said why in `PreferenceRead.skipped`: a record in no group; a group
    that does not hold exactly one record for a run of each experiment; a group whose
    runs or example cannot be read; a group whose scores are missing. Records not of
    `source_types` (a model evaluator's, such as `comparative_evaluator`'s) are left
    out and counted in `model_feedback`; a model's verdict on the same pair of runs is
    in `verdicts`, for `align`'s `prior_verdicts`.

    Each reviewer's group is its own item, so two people who compared the same pair
    give two items (with their annotators). Records updated in place (a changed score or
    comment) update their item; a new group is a new item.

    Args:
        client: The `langsmith.Client` to read with.
        comparative_experiment: The `ComparativeExperiment` that
            `client.create_comparative_experiment` returned (its experiments are in
            order), or its id together with `experiments`.
        key: The feedback key the reviewers scored (usually the judge's name).
        experiments: The two experiments' ids, the one shown first first; overrides
            the order of a `ComparativeExperiment`, required with a bare id.
        source_types: The feedback source types that count as a person's review.
        prepare: Builds the case from the two runs (A first) and the example, as
            `comparative_evaluator`'s `prepare` does; pass the same function to both.

    Raises:
        ValueError: The experiments' order is unknown, or there are not two of them.
    """
    cid, order = _experiment_order(comparative_experiment, experiments)
    build = prepare or default_pair
    wanted = {s.lower() for s in source_types}
    read = PreferenceRead()
    groups: dict[str, list[ls_schemas.Feedback]] = {}
    model_groups: dict[str, list[ls_schemas.Feedback]] = {}
    for fb in client.list_feedback(feedback_key=[key], comparative_experiment_id=cid):
        # The filter is the server's; checking again keeps a server that ignores an
        # unknown filter from mixing in other comparisons.
        if str(fb.comparative_experiment_id or "") != cid or fb.key != key:
            continue
        source = fb.feedback_source
        source_type = str(getattr(source, "type", "") or "").lower()
        if source_type not in wanted:
            read.model_feedback += 1
            if source_type == "model" and fb.feedback_group_id is not None:
                model_groups.setdefault(str(fb.feedback_group_id), []).append(fb)
            continue
        if fb.feedback_group_id is None:
            read.skipped.append(
                SkippedPreference(None, (str(fb.id),), "the feedback is in no feedback group")
            )
            continue
        groups.setdefault(str(fb.feedback_group_id), []).append(fb)
    runs: dict[str, ls_schemas.Run | None] = {}
    examples: dict[str, ls_schemas.Example | None] = {}
    for gid, records in groups.items():
        try:
            read.items.append(_item(client, cid, order, gid, records, build, runs, examples))
        except _Skip as skip:
            fids = tuple(sorted(str(r.id) for r in records))
            read.skipped.append(SkippedPreference(gid, fids, str(skip)))
    read.verdicts = _model_verdicts(read.items, model_groups)
    return read


def _model_verdicts(
    items: Sequence[Feedback], model_groups: dict[str, list[ls_schemas.Feedback]]
) -> dict[str, str]:
    """The latest complete model verdict on each item's two runs, by item id."""
    latest: dict[frozenset[str], tuple[str, dict[str, Any]]] = {}
    for records in model_groups.values():
        scores = {str(r.run_id): r.score for r in records if r.run_id is not None}
        if len(records) != 2 or len(scores) != 2:
            continue  # incomplete, or two scores for one run: no verdict on a pair
        stamp = max(str(r.created_at or "") for r in records)
        pair = frozenset(scores)
        if pair not in latest or stamp >= latest[pair][0]:
            latest[pair] = (stamp, scores)
    verdicts: dict[str, str] = {}
    for item in items:
        run_a, run_b = item.metadata["langsmith"]["run_ids"]
        found = latest.get(frozenset((run_a, run_b)))
        if found is not None and (label := _label(found[1][run_a], found[1][run_b])):
            verdicts[item.id] = label
    return verdicts


_Read = TypeVar("_Read")


def _read_once(
    cache: dict[str, _Read | None], key: str, read: Callable[[str], _Read]
) -> _Read | None:
    """`read(key)` the first time a key is asked, None if LangSmith has no such object."""
    if key not in cache:
        try:
            cache[key] = read(key)
        except ls_utils.LangSmithNotFoundError:
            cache[key] = None
    return cache[key]


def _item(
    client: Client,
    cid: str,
    order: tuple[str, str],
    gid: str,
    records: list[ls_schemas.Feedback],
    build: PairPreparer,
    runs: dict[str, ls_schemas.Run | None],
    examples: dict[str, ls_schemas.Example | None],
) -> Feedback:
    """The group's item; raises `_Skip` with the reason when it gives none."""
    by_experiment: dict[str, tuple[ls_schemas.Feedback, ls_schemas.Run]] = {}
    for record in records:
        rid = str(record.run_id) if record.run_id else None
        if rid is None:
            raise _Skip(f"feedback {record.id} is not on a run")
        run = _read_once(runs, rid, client.read_run)
        if run is None:
            raise _Skip(f"run {rid} was not found")
        experiment = str(run.session_id)
        if experiment not in order:
            raise _Skip(f"run {rid} is in neither experiment of the comparison")
        if experiment in by_experiment:
            raise _Skip(f"more than one score for the run of experiment {experiment}")
        by_experiment[experiment] = (record, run)
    if set(by_experiment) != set(order):
        raise _Skip(f"incomplete: {len(records)} of the 2 runs scored")
    meta = {"comparative_experiment_id": cid, "feedback_group_id": gid}
    return _pair_item(client, f"{_ID_PREFIX}{gid}", order, by_experiment, build, examples, meta)


def _pair_item(
    client: Client,
    item_id: str,
    order: tuple[str, str],
    scored: dict[str, tuple[ls_schemas.Feedback, ls_schemas.Run]],
    build: PairPreparer,
    examples: dict[str, ls_schemas.Example | None],
    meta: dict[str, Any],
) -> Feedback:
    """The item of one person's scores of a pair of runs (`scored` by experiment).

    Raises `_Skip` with the reason when it gives none. `meta` goes into
    `metadata["langsmith"]` with the experiments, runs, feedback records and example.
    """
    (fa, run_a), (fb, run_b) = scored[order[0]], scored[order[1]]
    label = _label(fa.score, fb.score)
    if label is None:
        raise _Skip("the scores state no preference")
    example: ls_schemas.Example | None = None
    if run_a.reference_example_id is not None:
        eid = str(run_a.reference_example_id)
        example = _read_once(examples, eid, client.read_example)
        if example is None:
            raise _Skip(f"example {eid} was not found")
    case = build([run_a, run_b], example)
    comments = [c for c in dict.fromkeys((fa.comment or "", fb.comment or "")) if c.strip()]
    source = fa.feedback_source or fb.feedback_source
    user = getattr(source, "user_id", None)
    stamps = [t for r in (fa, fb) for t in (r.modified_at, r.created_at) if t is not None]
    return Feedback(
        id=item_id,
        inputs=case.get("inputs"),
        outputs=case.get("outputs"),
        reference_outputs=case.get("reference_outputs"),
        value=label,
        rationale="\n".join(comments) or None,
        annotator=str(user) if user else None,
        created_at=max(stamps) if stamps else None,
        metadata={
            "langsmith": {
                **meta,
                "experiment_ids": list(order),
                "run_ids": [str(run_a.id), str(run_b.id)],
                "feedback_ids": [str(fa.id), str(fb.id)],
                "example_id": str(example.id) if example is not None else None,
            }
        },
    )
