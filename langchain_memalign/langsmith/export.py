"""The aligned judge as a LangSmith online evaluator, created through the SDK.

`export_evaluator(judge, project=...)` (or `judge.to_langsmith_evaluator(...)`)
makes LangSmith run the judge server-side on a project's traffic:

1. the judge's prompt (instructions, rules as prose, checks as questions, the
   output schema on the judge's key and scale) is committed to the prompt hub;
2. an LLM-as-judge online evaluator points at that commit
   (`client.evaluators` / `online_evaluators.create`);
3. a run rule attaches it to the project with a filter and a sampling rate, and
   uses its corrections dataset as few-shot examples (`use_corrections_dataset`,
   `num_few_shot_examples`);
4. every episode of the judge's memory becomes an example of that corrections
   dataset, keyed by its episode id.

Exporting again with an unchanged memory changes nothing: no commit, no update,
no example written. After `align` or `unalign`, an export commits the new prompt,
points the evaluator at it, and adds, updates or removes examples to match the
episodes. The feedback key gets the workspace feedback config of the judge's scale.

The evaluator writes its verdicts as `auto_eval` feedback on the judge's key; a
reviewer's correction of one in LangSmith joins the corrections dataset (LangSmith
does that) and comes back to the judge through `LangSmithFeedbackSource` as the
strongest expert feedback. See docs/langsmith.md#export-to-a-langsmith-online-evaluator
for what the exported evaluator keeps of the judge and what it loses.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from langsmith import Client
from pydantic import BaseModel, Field

from langchain_memalign.langsmith._api import LangSmithAPI
from langchain_memalign.langsmith._export_prompt import (
    episode_example,
    evaluator_prompt,
    manifest,
)
from langchain_memalign.langsmith._fields import feedback_config

if TYPE_CHECKING:
    from langchain_memalign.feedback import Feedback
    from langchain_memalign.judge import MemAlignJudge

__all__ = ["EvaluatorExport", "export_evaluator"]

_OWNER = "-"  # the prompt hub's name for the caller's own workspace
_PAGE = 100
# Episodes the evaluator's own corrections taught: LangSmith already put each of them
# in the corrections dataset when the reviewer corrected the verdict.
_LANGSMITH_CORRECTION = "auto_eval"


class EvaluatorExport(BaseModel):
    """What an export made or changed in LangSmith."""

    name: str = Field(description="The evaluator's name (and its prompt's handle).")
    evaluator_id: str
    rule_id: str = Field(description="The run rule attaching it to the project.")
    project_id: str
    dataset_id: str = Field(description="Its corrections dataset.")
    prompt: str = Field(description="The prompt commit it runs: `handle:commit`.")
    key: str = Field(description="The feedback key its verdicts are written on.")
    rules: int = Field(default=0, description="Rules written into the prompt.")
    checks: int = Field(default=0, description="Rules whose check's questions are in it.")
    episodes: int = Field(default=0, description="Episodes in the corrections dataset.")
    created: list[str] = Field(
        default_factory=list, description="What was created: prompt, evaluator, rule."
    )
    updated: list[str] = Field(
        default_factory=list, description="What was changed: prompt (a new commit), "
        "evaluator, rule.",
    )  # fmt: skip
    examples_added: int = 0
    examples_updated: int = 0
    examples_removed: int = 0
    left_to_langsmith: int = Field(
        default=0,
        description="Episodes learned from corrections of this evaluator's verdicts: "
        "LangSmith keeps them in the dataset itself.",
    )

    @property
    def changed(self) -> bool:
        """Whether the export changed anything in LangSmith."""
        return bool(
            self.created
            or self.updated
            or self.examples_added
            or self.examples_updated
            or self.examples_removed
        )

    def summary(self) -> str:
        """The export in one line."""
        what = ", ".join(
            [f"created {', '.join(self.created)}"] * bool(self.created)
            + [f"updated {', '.join(self.updated)}"] * bool(self.updated)
        )
        examples = (
            f"examples +{self.examples_added} ~{self.examples_updated} -{self.examples_removed}"
        )
        state = f"{what}; {examples}" if self.changed else "nothing changed"
        return (
            f"evaluator {self.name} ({self.evaluator_id}) on key {self.key!r}: {self.rules} "
            f"rules, {self.checks} checks, {self.episodes} episodes as few-shot corrections; "
            f"{state}"
        )


def export_name(judge_name: str) -> str:
    """The default evaluator name of a judge: a valid prompt-hub handle."""
    slug = re.sub(r"[^a-z0-9_-]+", "-", judge_name.lower()).strip("-")
    return f"memalign-{slug or 'judge'}"


def export_evaluator(
    judge: MemAlignJudge,
    *,
    project: str | uuid.UUID,
    client: Client | None = None,
    name: str | None = None,
    sampling_rate: float = 1.0,
    filter: str | None = None,
    num_few_shot_examples: int = 5,
    model_config_id: str | None = None,
) -> EvaluatorExport:
    """Create or update the judge's LangSmith online evaluator (see the module doc).

    Args:
        judge: The aligned judge.
        project: The tracing project (name or id) whose runs the evaluator grades.
        client: A `langsmith.Client` (default: from the environment).
        name: The evaluator's name and its prompt's hub handle (default:
            `memalign-<judge name>`). The export updates the evaluator of that name.
        sampling_rate: The share of the project's runs LangSmith grades, 0 to 1.
        filter: A LangSmith run filter: only matching runs are graded (e.g.
            `eq(is_root, true)`).
        num_few_shot_examples: How many corrections LangSmith puts in each prompt
            (it picks them itself: not the most similar cases, as the judge does).
        model_config_id: A model configuration saved in the workspace (its
            playground settings id) the evaluator calls; without it, LangSmith's default.

    Raises:
        ValueError: A sampling rate outside 0-1 or a negative few-shot count.
        FeedbackConfigMismatchError: The workspace reads the judge's key on another scale.
    """
    if not 0.0 <= sampling_rate <= 1.0:
        raise ValueError(f"sampling_rate must be from 0 to 1, got {sampling_rate!r}")
    if num_few_shot_examples < 0:
        raise ValueError("num_few_shot_examples must be at least 0")
    client = client or Client()
    return _Export(judge, client, name or export_name(judge.config.name)).run(
        project=project,
        sampling_rate=sampling_rate,
        filter=filter,
        num_few_shot_examples=num_few_shot_examples,
        model_config_id=model_config_id,
    )


class _Export:
    """One export: the SDK calls, each made only when what LangSmith has differs."""

    def __init__(self, judge: MemAlignJudge, client: Client, name: str) -> None:
        self.judge = judge
        self.client = client
        self.name = name
        self.api = LangSmithAPI.of(client)
        # The generated resources (online evaluators, rules, the hub) on their sync client,
        # which shares the client's credentials (`_api_base.APIBase._openapi`).
        openapi = self.api._openapi()
        if openapi is None:
            raise RuntimeError("exporting an evaluator needs langsmith>=0.15 (its OpenAPI client)")
        self.openapi: Any = openapi
        self.created: list[str] = []
        self.updated: list[str] = []

    def run(
        self,
        *,
        project: str | uuid.UUID,
        sampling_rate: float,
        filter: str | None,
        num_few_shot_examples: int,
        model_config_id: str | None,
    ) -> EvaluatorExport:
        key = self.judge.config.name
        scale = self.judge.scale
        project_id = str(self.api.project(project).id)
        self.api.ensure_feedback_config(key, feedback_config(scale))
        rules = self.judge.rules.list()
        prompt, mapping = evaluator_prompt(key, self.judge.config.instructions, scale, rules)
        commit = self._commit(manifest(prompt))
        llm: dict[str, Any] = {
            "prompt_repo_handle": self.name,
            "commit_hash_or_tag": commit,
            "variable_mapping": mapping,
        }
        if model_config_id is not None:
            llm["playground_settings_id"] = model_config_id
        metadata = {"memalign_export": self.name, "memalign_judge": key}
        evaluator_id = self._evaluator(llm, metadata)
        rule = self._rule(
            evaluator_id,
            {
                "display_name": self.name,
                "session_id": project_id,
                "evaluator_id": evaluator_id,
                "sampling_rate": sampling_rate,
                "filter": filter,
                "is_enabled": True,
                "use_corrections_dataset": True,
                "num_few_shot_examples": num_few_shot_examples,
            },
        )
        dataset_id = rule.corrections_dataset_id
        if not dataset_id:
            raise RuntimeError(
                f"LangSmith made no corrections dataset for run rule {rule.id}: "
                "it cannot hold the judge's episodes"
            )
        report = EvaluatorExport(
            name=self.name,
            evaluator_id=evaluator_id,
            rule_id=str(rule.id),
            project_id=project_id,
            dataset_id=str(dataset_id),
            prompt=f"{self.name}:{commit}",
            key=key,
            rules=len(rules),
            checks=sum(1 for r in rules if r.check is not None and r.check.covered_by is None),
        )
        self._examples(report, list(mapping))
        report.created, report.updated = self.created, self.updated
        return report

    # -- the prompt --------------------------------------------------------------------

    def _commit(self, wanted: dict[str, Any]) -> str:
        """The hash of the prompt commit holding `wanted`, committed if not the latest."""
        import langsmith

        try:
            self.openapi.repos.retrieve(self.name, owner=_OWNER)
        except langsmith.NotFoundError:
            self.openapi.repos.create(
                repo_handle=self.name,
                is_public=False,
                repo_type="prompt",
                description=f"The MemAlign judge {self.judge.config.name!r}, exported.",
            )
            self.created.append("prompt")
        latest = self.openapi.commits.list(self.name, owner=_OWNER, limit=1).commits
        if latest and latest[0].manifest == wanted:
            return str(latest[0].commit_hash)
        made = self.openapi.commits.create(
            self.name,
            owner=_OWNER,
            manifest=wanted,
            **({"parent_commit": latest[0].commit_hash} if latest else {}),
        )
        if latest:
            self.updated.append("prompt")
        return str(made.commit.commit_hash)

    # -- the evaluator and its rule -----------------------------------------------------

    def _evaluator(self, llm: dict[str, Any], metadata: dict[str, Any]) -> str:
        found = [
            e
            for e in self.openapi.online_evaluators.list(
                metadata=json.dumps({"memalign_export": self.name}), type="llm", limit=_PAGE
            ).evaluators
            if e.name == self.name
        ]
        if not found:
            made = self.openapi.online_evaluators.create(
                type="llm", name=self.name, llm_evaluator=llm, metadata=metadata
            )
            self.created.append("evaluator")
            return str(made.evaluator.id)
        current = found[0]
        have = current.llm_evaluator
        same = have is not None and all(getattr(have, k, None) == v for k, v in llm.items())
        if not same or (current.metadata or {}) != metadata:
            self.openapi.online_evaluators.update(
                str(current.id), llm_evaluator=llm, metadata=metadata
            )
            self.updated.append("evaluator")
        return str(current.id)

    def _rule(self, evaluator_id: str, wanted: dict[str, Any]) -> Any:
        from langsmith.types.evaluator import Evaluator

        rules = list(
            self.openapi.evaluators.list_v2(
                evaluator_id=evaluator_id, project_id=wanted["session_id"], page_size=_PAGE
            )
        )
        if not rules:
            # The SDK has no typed create for run rules: the request it documents
            # (`Evaluator`, the run-rule schema) posted on its client.
            made = self.openapi.post("/api/v1/runs/rules", cast_to=Evaluator, body=wanted)
            self.created.append("rule")
            return made
        rule = rules[0]
        seen = rule.model_dump()
        seen["session_id"] = seen.get("project_id")
        if any(seen.get(k) != v for k, v in wanted.items()):
            rule = self.openapi.patch(
                f"/api/v1/runs/rules/{rule.id}", cast_to=Evaluator, body=wanted
            )
            self.updated.append("rule")
        return rule

    # -- the corrections dataset --------------------------------------------------------

    def _episodes(self) -> Iterator[Feedback]:
        ids = self.judge.feedback_ids
        for i in range(0, len(ids), _PAGE):
            found = self.judge.memory.feedback(ids[i : i + _PAGE])
            yield from (found[fid] for fid in ids[i : i + _PAGE] if fid in found)

    def _examples(self, report: EvaluatorExport, variables: Sequence[str]) -> None:
        key, scale = self.judge.config.name, self.judge.scale
        wanted: dict[str, dict[str, Any]] = {}
        for fb in self._episodes():
            source = ((fb.metadata or {}).get("langsmith") or {}).get("source_type")
            if source == _LANGSMITH_CORRECTION:
                report.left_to_langsmith += 1
                continue
            example = episode_example(self.name, key, scale, fb, variables)
            wanted[example["id"]] = example
        report.episodes = len(wanted) + report.left_to_langsmith
        ours: dict[str, Any] = {}
        for stored in self.client.list_examples(dataset_id=report.dataset_id):
            # Examples of other exports, and those LangSmith added from corrections, stay.
            if (stored.metadata or {}).get("memalign_export") == self.name:
                ours[str(stored.id)] = stored
        new = [ex for eid, ex in wanted.items() if eid not in ours]
        if new:
            # `reference_outputs`: the SDK's name for an example's outputs on create.
            uploads = [
                {k: v for k, v in ex.items() if k != "outputs"}
                | {"reference_outputs": ex["outputs"]}
                for ex in new
            ]
            self.client.create_examples(dataset_id=report.dataset_id, examples=uploads)
        for eid, ex in wanted.items():
            have = ours.get(eid)
            if have is None or _same(have, ex):
                continue
            self.client.update_example(
                eid,
                inputs=ex["inputs"],
                outputs=ex["outputs"],
                metadata=ex["metadata"],
                dataset_id=report.dataset_id,
            )
            report.examples_updated += 1
        gone = [eid for eid in ours if eid not in wanted]
        if gone:
            self.client.delete_examples(gone)
        report.examples_added, report.examples_removed = len(new), len(gone)


def _same(have: Any, want: dict[str, Any]) -> bool:
    """Whether a stored example already says what the episode does (as JSON)."""

    def norm(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    return (
        norm(have.inputs) == norm(want["inputs"])
        and norm(have.outputs) == norm(want["outputs"])
        # Only our own metadata: the service adds its own (the example's split).
        and all((have.metadata or {}).get(k) == v for k, v in want["metadata"].items())
    )
