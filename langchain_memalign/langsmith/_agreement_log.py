"""The judge's agreement with the reviews it learned, written back to LangSmith.

Every align fed from LangSmith (a feedback source's `sync`, so a queue's `pull` and a
watch's cycle too) records in the judge's agreement series, for each review new to the
judge on a run that carries the judge's verdict, that verdict beside the review, before
learning it (`langchain_memalign.prequential`): a test on a case the judge had not
learned. `review_agreements` reads those points back (no model call), and
`write_agreement` writes them to a project or experiment as one feedback record, so a
team follows alignment where it works:

- key `<judge name>_agreement` (`agreement_key`), on the project (no run), source type
  "model";
- score: the share of the reviews the judge agreed with before learning them;
- value: `{"agreed": 1, "reviews": 2, "previous": {"agreed": 14, "reviews": 20}}`, where
  `previous` is the judge's agreement over the `PREVIOUS` reviews its series recorded
  before these (None before the first): the level these reviews are read against;
- source info: the judge's name, the reviews scored and the misaligned ones (run, link to
  the run, the judge's verdict, the reviewer's, the feedback id), `MAX_CASES` of each.

The record carries no "after": the judge graded again on the reviews it just learned
finds them in its own memory (their cases are their own nearest examples), which
measures memorization, at a model call each. The next record is the honest "after": it
scores the judge, as the align left it, on reviews it had not learned.

The record's id comes from the judge's name and the reviews it scores, so writing it
again (a retry whose first attempt reached the server, the same reviews learned again by
a replica) finds the first record instead of adding a second. Writing is best effort: a
refusal is logged as a warning and the align stands; the series in the judge's memory
keeps the agreement whatever LangSmith says.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any

from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.judge import MemAlignJudge
from langchain_memalign.langsmith._api import LangSmithAPI
from langchain_memalign.langsmith._fields import distance
from langchain_memalign.langsmith._source_types import ReviewAgreement

logger = logging.getLogger(__name__)

PREVIOUS = 20
"""Reviews of the series before a record's that its `previous` agreement covers: the
window of `MemAlignJudge.agreement_history` and `memalign show --curve`."""
MAX_CASES = 100
"""Reviews, and misaligned reviews, a record lists at most (a feedback record is small)."""
_NS = uuid.UUID("5b0c5d52-4a53-4b0e-9d0e-7d1c3f2a6e41")  # the watch's since its first record


def agreement_key(judge_name: str) -> str:
    """The feedback key of a judge's agreement with the reviews it learned."""
    return f"{judge_name}_agreement"


def review_agreements(judge: MemAlignJudge, feedback_ids: Sequence[str]) -> list[ReviewAgreement]:
    """Each review of `feedback_ids` scored from LangSmith, beside the judge's earlier verdict.

    Read back from the judge's agreement series (the sync recorded the verdict it read on
    the run before learning the review): no call. `feedback_ids` are those an align
    recorded (`AlignReport.agreement_recorded`); a review recorded twice (unaligned, then
    learned again) counts with its latest point.
    """
    if not feedback_ids:
        return []
    latest = {p["feedback_id"]: p for p in judge.memory.store.prequential(feedback_ids)}
    stored = judge.memory.feedback([fid for fid in latest if fid])
    scale = judge.scale
    out: list[ReviewAgreement] = []
    for fid, p in latest.items():
        item = stored.get(fid or "")
        if item is None or p["source"] != "langsmith":
            continue
        meta = (item.metadata or {}).get("langsmith") or {}
        if meta.get("run_id"):
            out.append(
                ReviewAgreement(
                    run_id=str(meta["run_id"]),
                    feedback_id=item.id,
                    judge=p["judge"],
                    expert=p["expert"],
                    agrees=distance(scale, p["judge"], p["expert"]) == 0,
                    project_id=str(meta["project_id"]) if meta.get("project_id") else None,
                )
            )
    return out


def session_url(session: ls_schemas.TracerSession) -> str | None:
    """Where a project or experiment opens in the LangSmith app (None: unknown).

    An experiment opens in its dataset's comparison view, as `evaluate` links it.
    """
    url = session.url
    if url is None or session.reference_dataset_id is None:
        return url
    base = url.split("/projects/p/")[0]
    return f"{base}/datasets/{session.reference_dataset_id}/compare?selectedSessions={session.id}"


def write_agreement(
    api: LangSmithAPI,
    judge: MemAlignJudge,
    project: ls_schemas.TracerSession | str,
    agreement: Sequence[ReviewAgreement],
) -> str | None:
    """Write `agreement` as project-level feedback on `project`; the record's id, or None.

    `project` is a project or experiment (or its id). None when LangSmith refused the
    write, or when `agreement` is empty (no record). See the module doc.
    """
    if not agreement:
        return None
    name = judge.config.name
    fid = str(uuid.uuid5(_NS, name + ":" + ",".join(sorted(a.feedback_id for a in agreement))))
    agreed = sum(a.agrees for a in agreement)
    previous = _previous(judge, agreement)
    earlier = (
        ""
        if previous is None
        else f" Over the {previous['reviews']} review(s) before these it had agreed with "
        f"{previous['agreed']}."
    )
    try:
        session = project if isinstance(project, ls_schemas.TracerSession) else api.project(project)
        misaligned = [_case(session, a) for a in agreement if not a.agrees][:MAX_CASES]
        api.client.create_feedback(
            None,
            agreement_key(name),
            score=agreed / len(agreement),
            value={"agreed": agreed, "reviews": len(agreement), "previous": previous},
            comment=f"The judge agreed with {agreed} of {len(agreement)} review(s) before "
            f"learning them.{earlier}",
            feedback_source_type="model",
            source_info={
                "memalign_judge": name,
                "reviews": [a.model_dump(mode="json") for a in agreement[:MAX_CASES]],
                "misaligned": misaligned,
            },
            feedback_id=fid,
            project_id=session.id,
        )
    except ls_utils.LangSmithConflictError:  # written before (see the module doc)
        return fid
    except ls_utils.LangSmithError as e:  # a rate limit too: the align is done, not redone
        logger.warning("the judge's agreement could not be written to LangSmith: %s", e)
        return None
    return fid


def _previous(judge: MemAlignJudge, agreement: Sequence[ReviewAgreement]) -> dict[str, int] | None:
    """The judge's agreement over the `PREVIOUS` reviews its series recorded before these."""
    ids = {a.feedback_id for a in agreement}
    reviews = [r for r in judge.memory.store.prequential() if r["kind"] == "review"]
    latest = {r["feedback_id"]: r["seq"] for r in reviews}
    start = min((seq for fid, seq in latest.items() if fid in ids), default=None)
    if start is None:
        return None
    window = [r for r in reviews if r["seq"] < start][-PREVIOUS:]
    if not window:
        return None
    scale = judge.scale
    agreed = sum(distance(scale, r["judge"], r["expert"]) == 0 for r in window)
    return {"agreed": agreed, "reviews": len(window)}


def _case(session: ls_schemas.TracerSession, a: ReviewAgreement) -> dict[str, Any]:
    """A misaligned review as the record lists it, with a link to its run when known."""
    case = a.model_dump(mode="json", exclude={"agrees", "project_id"})
    # Only a run of this project is linked: a watch's queue may hold runs of others.
    if session.url and a.project_id == str(session.id):
        case["url"] = f"{session.url}/r/{a.run_id}"
    return case
