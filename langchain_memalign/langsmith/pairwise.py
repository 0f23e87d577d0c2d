"""People's preferences between two runs, read from LangSmith as pairwise `Feedback`.

Two sources: a comparative experiment's feedback groups (`read_preferences`) and the
reviews of a pairwise annotation queue (`read_queue_preferences`).

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

A pairwise annotation queue, made in LangSmith from two experiments on one dataset,
shows reviewers the two experiments' runs of an example side by side; their choice ("A
is better", "B is better", "Equal") is recorded as binary feedback on both runs.
`read_queue_preferences` turns each reviewer's choice into one item, in the same case
and order, with an id derived from the pair and the reviewer:

```python
read = read_queue_preferences(client, "v1-vs-v2", key=judge.config.name)
judge.align(read.items, prior_verdicts=read.verdicts, prior_source="langsmith")
```
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from langsmith import Client
from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.feedback import Feedback
from langchain_memalign.langsmith._api import LangSmithAPI, RunRecord, as_uuid_str
from langchain_memalign.langsmith._api_base import EARLIEST, _chunks, _legacy, _time
from langchain_memalign.langsmith._api_runs import _start_and_id
from langchain_memalign.langsmith.comparative import PairPreparer, default_pair

__all__ = ["PreferenceRead", "SkippedPreference", "read_preferences", "read_queue_preferences"]

_ID_PREFIX = "langsmith-pair:"
"""Prefix of the `Feedback.id` of a preference: the rest is its feedback group's id."""

_HUMAN_SOURCE_TYPES = ("app", "api")


@dataclass(frozen=True)
class SkippedPreference:
    """Feedback records that gave no `Feedback` item: a group, a record, or a review."""

    feedback_group_id: str | None
    """The group's id; None for a record that is in no group, and for a queue's records."""
    feedback_ids: tuple[str, ...]
    """The LangSmith feedback records left out."""
    reason: str
    """Why it was skipped, in plain words."""


@dataclass
class PreferenceRead:
    """What `read_preferences` or `read_queue_preferences` read: items and what was left out."""

    items: list[Feedback] = field(default_factory=list)
    """One pairwise `Feedback` per complete human feedback group, or per reviewer of a
    queue's pair."""
    skipped: list[SkippedPreference] = field(default_factory=list)
    """Records that were incomplete, unreadable, replaced, unpaired, or stated no
    preference."""
    model_feedback: int = 0
    """Records not written by a person (e.g. a model evaluator's), left out."""
    verdicts: dict[str, str] = field(default_factory=dict)
    """A model evaluator's verdict on an item's pair of runs, by item id: from a
    complete group of model feedback (e.g. `comparative_evaluator`'s) on the same key
    and runs (and, for `read_preferences`, comparison), the latest if several. Pass it as
    `align`'s `prior_verdicts` (with `prior_source="langsmith"`) to record how often the
    judge agreed with the people before learning from them."""


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


def _source_type(fb: ls_schemas.Feedback) -> str:
    return str(getattr(fb.feedback_source, "type", "") or "").lower()


def _by_a_run(fb: ls_schemas.Feedback) -> bool:
    """Whether a run made the record (`source_run_id`: "the run that generated it").

    The SDK's comparative evaluation (`evaluate((a, b), ...)`, which runs
    `comparative_evaluator`) writes its verdicts as "api" feedback, the default type,
    naming the evaluator's run in `feedback_source.metadata["__run"]`.
    """
    metadata = getattr(fb.feedback_source, "metadata", None) or {}
    return bool(metadata.get("__run"))


def _is_review(fb: ls_schemas.Feedback, wanted: set[str]) -> bool:
    """A person's review: of a wanted source type, and made by no run."""
    return _source_type(fb) in wanted and not _by_a_run(fb)


def _is_verdict(fb: ls_schemas.Feedback) -> bool:
    """A model evaluator's verdict: model feedback, or feedback a run made."""
    return _source_type(fb) == "model" or _by_a_run(fb)


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
    `source_types`, and records a run made (a model evaluator's: the SDK's comparative
    evaluation writes `comparative_evaluator`'s verdicts as "api" feedback naming its
    run), are left out and counted in `model_feedback`; a model's verdict on the same
    pair of runs is in `verdicts`, for `align`'s `prior_verdicts`.

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
        if not _is_review(fb, wanted):
            read.model_feedback += 1
            if _is_verdict(fb) and fb.feedback_group_id is not None:
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


# -- pairwise annotation queues -----------------------------------------------------------

_QUEUE_ID_PREFIX = "langsmith-paq:"
"""Prefix of the `Feedback.id` of a queue review: the rest is a UUID of its pair and reviewer."""

# Fixed: an item's id must not change between versions, or a re-read would add it again.
_QUEUE_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_OID, "langchain-memalign/pairwise-annotation-queue")

_PairKey = tuple[str, str]
"""A queued pair: the first experiment's run id, then the second's."""


def read_queue_preferences(
    client: Client,
    queue: ls_schemas.AnnotationQueue | str | uuid.UUID,
    *,
    key: str,
    experiments: Sequence[str | uuid.UUID] | None = None,
    source_types: Sequence[str] = _HUMAN_SOURCE_TYPES,
    prepare: PairPreparer | None = None,
) -> PreferenceRead:
    """Reviews of a LangSmith pairwise annotation queue on `key`, as pairwise `Feedback`.

    A pairwise annotation queue is made from two experiments on one dataset; LangSmith
    pairs their runs and, for each rubric key, a reviewer chooses "A is better", "B is
    better" or "Equal", which the UI records as binary feedback on both runs. A pair here
    is the two experiments' runs of one dataset example (when an example was run more
    than once, the k-th run of each by start time, as LangSmith pairs runs in
    chronological order). Each reviewer's latest human score of each of a pair's two runs
    make one item: the case `comparative_evaluator` builds (output A is the run of the
    first experiment), the label `"A"` or `"B"` for the run scored higher, `"tie"` for
    equal scores (whether "Equal" is recorded as 1 and 1 or as 0 and 0, both runs were
    judged alike), the records' comments as the rationale, the reviewer as annotator, and
    in `metadata["langsmith"]` the queue, the reviewer, the two runs and experiments, the
    feedback records and the example. How the queue lists its pairs (an item per run or
    per pair, in which order) does not matter: only the runs it holds are read.

    The item's id (`"langsmith-paq:<uuid>"`) is derived from the pair's two runs and the
    reviewer: aligning a re-read after a reviewer changed their mind updates the item,
    whether LangSmith updated their records or wrote new ones (their latest counts; the
    earlier ones are reported skipped). Two reviewers of one pair give two items.

    Which experiment is A: `experiments=(a, b)` when given; otherwise the queue must hold
    runs of exactly two experiments, and the one created first is A (LangSmith does not
    document which one its UI shows on the left: pass `experiments` to match it). A queue
    that also holds pairs of other experiments is read two experiments at a time.

    Skipped, and said why in `PreferenceRead.skipped` (with `feedback_group_id` None):
    a reviewer's score of only one run of a pair; scores that name no reviewer, more than
    one on a run (whose go together is unknown); a score on a run outside the two
    experiments, on no example, or with no counterpart on its example; a reviewer's
    earlier score replaced by a later one; a run or example that cannot be read; scores
    that state no preference. Records not of `source_types`, and records a run made (a
    model evaluator's: the SDK's comparative evaluation writes `comparative_evaluator`'s
    verdicts as "api" feedback naming its run), are left out and counted in
    `model_feedback`; a model's verdict on a pair (a complete feedback group of them) is
    in `verdicts`, for `align`'s `prior_verdicts`.

    Args:
        client: The `langsmith.Client` to read with.
        queue: The queue: its id, its name, or the `AnnotationQueue` the SDK returns.
        key: The rubric's feedback key the reviewers chose on (usually the judge's name).
        experiments: The two experiments whose pairs to read, the one shown as A first.
        source_types: The feedback source types that count as a person's review.
        prepare: Builds the case from the two runs (A first) and the example, as
            `comparative_evaluator`'s `prepare` does; pass the same function to both.

    Raises:
        ValueError: No queue has that name; the queue is not a pairwise queue; without
            `experiments`, its runs are of other than two experiments; `experiments`
            does not name two experiments, or names one with no runs in the queue.
    """
    api = LangSmithAPI.of(client)
    qid = _queue_id(api, queue)
    kind = api.queue_type(qid)
    if kind != "pairwise":
        raise ValueError(
            f"annotation queue {qid} is not a pairwise annotation queue (its queue_type is "
            f"{kind!r}): read a single-run queue with LangSmithFeedbackSource or "
            "JudgeAnnotationQueue"
        )
    hints: dict[str, tuple[str | None, dt.datetime | None]] = {}
    for rid, item in api.queue_items(qid, None):
        project = getattr(item, "project_id", None)  # the items API has it; legacy: None
        hints[rid] = (str(project) if project else None, _time(getattr(item, "start_time", None)))
    records = api.read_runs(list(hints), hints)
    held = {p for rid, (hint, _) in hints.items() if (p := _project(records, rid, hint))}
    order = _queue_order(api, qid, held, experiments)
    pair_of, unpaired = _pair_runs(records, order)

    wanted = {s.lower() for s in source_types}
    read = PreferenceRead()
    reviews: dict[tuple[_PairKey, str | None], list[ls_schemas.Feedback]] = {}
    model_groups: dict[str, list[ls_schemas.Feedback]] = {}
    for fb in _feedback_on(client, list(hints), key):
        rid = str(fb.run_id) if fb.run_id is not None else ""
        if fb.key != key or rid not in hints:
            continue  # the filters are the server's: checked again, as read_preferences does
        if not _is_review(fb, wanted):
            read.model_feedback += 1
            if _is_verdict(fb) and fb.feedback_group_id is not None:
                model_groups.setdefault(str(fb.feedback_group_id), []).append(fb)
            continue
        pair = pair_of.get(rid)
        if pair is None:
            reason = unpaired.get(rid, f"run {rid} was not found")
            read.skipped.append(SkippedPreference(None, (str(fb.id),), reason))
            continue
        user = getattr(fb.feedback_source, "user_id", None)
        reviews.setdefault((pair, str(user) if user else None), []).append(fb)

    build = prepare or default_pair
    runs: dict[str, ls_schemas.Run | None] = {}
    examples: dict[str, ls_schemas.Example | None] = {}
    for (pair, reviewer), group in reviews.items():
        fids = tuple(sorted(str(r.id) for r in group))
        try:
            current = _current_scores(pair, reviewer, group, read.skipped)
            fids = tuple(sorted(str(r.id) for r in current.values()))
            scored: dict[str, tuple[ls_schemas.Feedback, ls_schemas.Run]] = {}
            for experiment, rid in zip(order, pair, strict=True):
                run = _read_once(runs, rid, lambda r: _read_run(client, records[r]))
                if run is None:
                    raise _Skip(f"run {rid} was not found")
                scored[experiment] = (current[rid], run)
            item_id = _queue_item_id(pair, reviewer)
            meta = {"annotation_queue_id": qid, "reviewer": reviewer}
            read.items.append(_pair_item(client, item_id, order, scored, build, examples, meta))
        except _Skip as skip:
            read.skipped.append(SkippedPreference(None, fids, str(skip)))
    read.verdicts = _model_verdicts(read.items, model_groups)
    return read


def _queue_id(api: LangSmithAPI, queue: ls_schemas.AnnotationQueue | str | uuid.UUID) -> str:
    """The queue's id, looked up by name when it is not one."""
    if isinstance(queue, ls_schemas.AnnotationQueue):
        return str(queue.id)
    qid = as_uuid_str(queue)
    if qid is not None:
        return qid
    found = api.find_queue(str(queue))
    if found is None:
        raise ValueError(f"no annotation queue is named {str(queue)!r}")
    return str(found.id)


def _project(records: dict[str, RunRecord], rid: str, hint: str | None) -> str | None:
    record = records.get(rid)
    return record.project_id if record is not None and record.project_id else hint


def _queue_order(
    api: LangSmithAPI,
    qid: str,
    held: set[str],
    experiments: Sequence[str | uuid.UUID] | None,
) -> tuple[str, str]:
    """The two experiments to read, A first: those given, or the queue's by creation."""
    if experiments is not None:
        ids = [_uuid(e, "experiments") for e in experiments]
        if len(ids) != 2 or ids[0] == ids[1]:
            raise ValueError(
                f"a pairwise judge compares two experiments; experiments= names {len(set(ids))}"
            )
        for e in ids:
            if e not in held:
                raise ValueError(f"experiment {e} has no runs in annotation queue {qid}")
        return ids[0], ids[1]
    if len(held) != 2:
        n = len(held)
        listed = f": {', '.join(sorted(held))}" if held else ""
        raise ValueError(
            f"pairwise annotation queue {qid} holds runs of {n} experiment"
            f"{'' if n == 1 else 's'}{listed}; a pairwise judge compares two: pass "
            "experiments=(a, b) to read the pairs of two of them"
        )
    # LangSmith does not document which experiment its UI shows as A. The one created
    # first (a baseline is usually older than its candidate) makes the order reproducible.
    first, second = sorted(
        (api.project(p) for p in held), key=lambda s: (_time(s.start_time) or EARLIEST, str(s.id))
    )
    return str(first.id), str(second.id)


def _pair_runs(
    records: dict[str, RunRecord], order: tuple[str, str]
) -> tuple[dict[str, _PairKey], dict[str, str]]:
    """Each queued run's pair, and why each other queued run has none.

    A pair is the two experiments' runs of one example (LangSmith's docs: the queue
    compares two experiments on one dataset); an example run more than once pairs its
    runs in chronological order, the k-th of one experiment with the k-th of the other.
    """
    sides: dict[str, tuple[list[RunRecord], list[RunRecord]]] = {}
    unpaired: dict[str, str] = {}
    for record in records.values():
        if record.project_id not in order:
            unpaired[record.id] = f"run {record.id} is in neither experiment read"
        elif record.reference_example_id is None:
            unpaired[record.id] = f"run {record.id} is on no dataset example"
        else:
            side = sides.setdefault(record.reference_example_id, ([], []))
            side[order.index(record.project_id)].append(record)
    pair_of: dict[str, _PairKey] = {}
    for example, (firsts, seconds) in sides.items():
        if len(firsts) != len(seconds):
            for record in firsts + seconds:
                unpaired[record.id] = (
                    f"the queue holds {len(firsts)} run(s) of experiment {order[0]} and "
                    f"{len(seconds)} of {order[1]} on example {example}: which are paired "
                    "is unknown"
                )
            continue
        firsts.sort(key=_start_and_id)
        seconds.sort(key=_start_and_id)
        for a, b in zip(firsts, seconds, strict=True):
            pair_of[a.id] = pair_of[b.id] = (a.id, b.id)
    return pair_of, unpaired


def _feedback_on(client: Client, run_ids: list[str], key: str) -> Iterator[ls_schemas.Feedback]:
    """Every feedback record on `key` on the runs (all source types)."""
    for chunk in _chunks(sorted(run_ids), 50):  # 50 run ids keep the query string short
        yield from client.list_feedback(run_ids=chunk, feedback_key=[key])


def _current_scores(
    pair: _PairKey,
    reviewer: str | None,
    records: list[ls_schemas.Feedback],
    skipped: list[SkippedPreference],
) -> dict[str, ls_schemas.Feedback]:
    """A reviewer's latest record on each run of the pair; raises `_Skip` if incomplete.

    Earlier records of the reviewer on a run are reported in `skipped`: LangSmith does
    not document whether choosing again updates a record or writes a new one.
    """
    by_run: dict[str, list[ls_schemas.Feedback]] = {}
    for record in records:
        by_run.setdefault(str(record.run_id), []).append(record)
    if reviewer is None and any(len(rs) > 1 for rs in by_run.values()):
        raise _Skip(
            f"{len(records)} scores of the pair of runs {pair[0]} and {pair[1]} name no "
            "reviewer: which go together is unknown"
        )
    current: dict[str, ls_schemas.Feedback] = {}
    for rid, scores in by_run.items():
        scores.sort(key=lambda r: (_time(r.modified_at or r.created_at) or EARLIEST, str(r.id)))
        latest = current[rid] = scores[-1]
        for earlier in scores[:-1]:
            reason = f"replaced by a later review of {reviewer} on the same run ({latest.id})"
            skipped.append(SkippedPreference(None, (str(earlier.id),), reason))
    if len(current) < 2:
        [rid] = current
        other = pair[1] if rid == pair[0] else pair[0]
        who = reviewer or "a reviewer"
        raise _Skip(f"incomplete: {who} scored run {rid} but not run {other} of the pair")
    return current


def _read_run(client: Client, record: RunRecord) -> ls_schemas.Run:
    # The full run for `prepare`, as comparative_evaluator gets it; its project and
    # start time let SmithDB-only deployments find it.
    with _legacy():
        run: ls_schemas.Run = client.read_run(
            record.id, project_id=record.project_id, start_time=record.start_time
        )
    return run


def _queue_item_id(pair: _PairKey, reviewer: str | None) -> str:
    # From the runs in either order (the same review read with the experiments given the
    # other way round is the same item) and the reviewer: not from feedback ids, which a
    # changed review may replace.
    name = "|".join([*sorted(pair), reviewer or ""])
    return f"{_QUEUE_ID_PREFIX}{uuid.uuid5(_QUEUE_NAMESPACE, name)}"
