"""The prompt hub, online evaluators and run rules of the fake LangSmith server.

`LangSmithTestServer` holds one `PlatformAPI` (``server.platform``) and serves its
routes; this module keeps them apart from the tracing and feedback endpoints. Paths
arrive without their ``/api/v1`` prefix (the v2 rule listing as ``/v2/...``):

* prompt hub: ``GET /repos/{owner}/{repo}``, ``POST /repos``,
  ``GET/POST /commits/{owner}/{repo}`` (owner ``-`` is the caller's workspace)
* online evaluators: ``POST/GET /platform/evaluators``,
  ``GET/PATCH/DELETE /platform/evaluators/{id}``
* run rules: ``POST /runs/rules``, ``PATCH/DELETE /runs/rules/{id}``,
  ``GET /v2/runs/rules`` (cursor pages)

Strict like the SDK documents them: request bodies are checked against the SDK's own
request types (`OnlineEvaluatorCreateParams`, `OnlineEvaluatorUpdateParams`,
`RepoCreateParams`, `CommitCreateParams`: an unknown field is refused with 422, as is
a value of the wrong type), run rules against the fields of the SDK's run-rule schema
(`langsmith.types.evaluator.Evaluator`), and every answer is validated against the SDK
model the client parses it with before it is sent. The hub refuses a commit whose
manifest is the latest one's ("Nothing to commit"). A rule created with
``use_corrections_dataset`` gets a corrections dataset, as LangSmith creates one;
`run_evaluator` writes an evaluator's verdict on a run as LangSmith does (source
``auto_eval``), and a correction of such a verdict adds the corrected case to the
rule's corrections dataset.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, get_type_hints

import pydantic
from typing_extensions import is_typeddict

if TYPE_CHECKING:
    from langsmith_server import LangSmithTestServer

JSON = dict[str, Any]
Query = dict[str, list[str]]
Handler = Callable[[re.Match[str], Query, Any], tuple[int, Any]]

# What the server sets on a run rule; a client sending one is refused.
_RULE_SERVER_FIELDS = frozenset(
    {
        "id", "tenant_id", "created_at", "updated_at", "corrections_dataset_id",
        "evaluator_name", "evaluator_type", "session_name", "dataset_name",
        "add_to_annotation_queue_name", "add_to_dataset_name", "trace_count", "spend_usd",
        "effective_spend_limit", "is_managed_evaluator", "backfill_completed_at",
        "backfill_error", "backfill_id", "backfill_progress", "backfill_status",
        "evaluator_version",
    }
)  # fmt: skip
# Fields of the v1 run-rule schema that the v2 `Rule` names otherwise.
_RULE_V2_NAMES = {"session_id": "project_id", "session_name": "project_name"}


def _http_error(status: int, detail: str) -> Exception:
    from langsmith_server import HTTPError

    return HTTPError(status, detail)


def _check_typed_dict(cls: Any, body: Any, what: str, *, skip: tuple[str, ...] = ()) -> None:
    """Refuse a body with a field `cls` (an SDK request TypedDict) lacks, or a wrong value."""
    if not isinstance(body, dict):
        raise _http_error(422, f"{what} must be an object")
    hints = get_type_hints(cls)
    unknown = sorted(set(body) - set(hints) - set(skip))
    if unknown:
        raise _http_error(422, f"{what}: unknown fields {unknown}")
    for key, value in body.items():
        if is_typeddict(hints.get(key)) and isinstance(value, dict):
            _check_typed_dict(hints[key], value, f"{what}.{key}")
    try:
        pydantic.TypeAdapter(cls).validate_python({k: v for k, v in body.items() if k not in skip})
    except pydantic.ValidationError as exc:
        raise _http_error(422, f"{what}: {exc}") from exc


def _sdk_out(model: Any, data: JSON) -> JSON:
    """`data`, once the SDK model the client parses it with accepts it (else a 500)."""
    model.model_validate(data)
    return data


class PlatformAPI:
    """The fake server's prompt hub, online evaluators and run rules (see the module doc)."""

    def __init__(self, server: LangSmithTestServer) -> None:
        self.server = server
        self.repos: dict[str, JSON] = {}  # by repo handle
        self.commits: dict[str, list[JSON]] = {}  # by repo handle, oldest first
        self.evaluators: dict[str, JSON] = {}
        self.rules: dict[str, JSON] = {}

    def reset(self) -> None:
        """Forget every prompt, evaluator and rule."""
        for store in (self.repos, self.commits, self.evaluators, self.rules):
            store.clear()

    def routes(self, uuid_re: str) -> list[tuple[str, str, Handler]]:
        """The route table entries of these endpoints."""
        name = r"[^/]+"
        return [
            ("GET", rf"/repos/(?P<owner>{name})/(?P<repo>{name})", self._get_repo),
            ("POST", r"/repos", self._create_repo),
            ("GET", rf"/commits/(?P<owner>{name})/(?P<repo>{name})", self._list_commits),
            ("POST", rf"/commits/(?P<owner>{name})/(?P<repo>{name})", self._create_commit),
            ("POST", r"/platform/evaluators", self._create_evaluator),
            ("GET", r"/platform/evaluators", self._list_evaluators),
            ("GET", rf"/platform/evaluators/(?P<id>{uuid_re})", self._read_evaluator),
            ("PATCH", rf"/platform/evaluators/(?P<id>{uuid_re})", self._update_evaluator),
            ("DELETE", rf"/platform/evaluators/(?P<id>{uuid_re})", self._delete_evaluator),
            ("POST", r"/runs/rules", self._create_rule),
            ("GET", r"/v2/runs/rules", self._list_rules_v2),
            ("PATCH", rf"/runs/rules/(?P<id>{uuid_re})", self._update_rule),
            ("DELETE", rf"/runs/rules/(?P<id>{uuid_re})", self._delete_rule),
        ]

    # -- the prompt hub ----------------------------------------------------------------

    def _handle(self, owner: str, repo: str) -> str:
        if owner != "-":
            raise _http_error(404, f"no workspace with handle {owner!r}")
        return repo

    def _repo_out(self, repo: JSON) -> JSON:
        from langsmith.types.repo_with_lookups import RepoWithLookups

        commits = self.commits.get(repo["repo_handle"], [])
        out = {
            **repo,
            "num_commits": len(commits),
            "last_commit_hash": commits[-1]["commit_hash"] if commits else None,
        }
        return _sdk_out(RepoWithLookups, copy.deepcopy(out))

    def _get_repo(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        repo = self.repos.get(self._handle(match["owner"], match["repo"]))
        if repo is None:
            raise _http_error(404, f"repo {match['repo']} not found")
        return 200, {"repo": self._repo_out(repo)}

    def _create_repo(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        from langsmith.types.repo_create_params import RepoCreateParams

        _check_typed_dict(RepoCreateParams, body, "repo")
        handle = body["repo_handle"]
        if handle in self.repos:
            raise _http_error(409, f"repo {handle!r} already exists")
        now = _now_iso()
        self.repos[handle] = {
            "id": str(uuid.uuid4()),
            "repo_handle": handle,
            "full_name": handle,
            "owner": None,
            "description": body.get("description"),
            "readme": body.get("readme"),
            "is_public": body["is_public"],
            "is_archived": False,
            "repo_type": body.get("repo_type") or "prompt",
            "tags": list(body.get("tags") or []),
            "tenant_id": self.server.tenant_id,
            "created_at": now,
            "updated_at": now,
            "num_downloads": 0,
            "num_likes": 0,
            "num_views": 0,
        }
        self.commits[handle] = []
        return 200, {"repo": self._repo_out(self.repos[handle])}

    def _list_commits(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        from langsmith.types.commit_with_lookups import CommitWithLookups

        handle = self._handle(match["owner"], match["repo"])
        if handle not in self.repos:
            raise _http_error(404, f"repo {handle} not found")
        newest_first = list(reversed(self.commits[handle]))
        offset = int((query.get("offset") or ["0"])[0])
        limit = int((query.get("limit") or ["20"])[0])
        page = [
            _sdk_out(CommitWithLookups, copy.deepcopy(c))
            for c in newest_first[offset : offset + limit]
        ]
        return 200, {"commits": page, "total": len(newest_first)}

    def _create_commit(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        from langsmith.types.commit_create_params import CommitCreateParams
        from langsmith.types.commit_with_lookups import CommitWithLookups

        handle = self._handle(match["owner"], match["repo"])
        if handle not in self.repos:
            raise _http_error(404, f"repo {handle} not found")
        # `owner` is a path parameter of the SDK's create, not a body field.
        _check_typed_dict(CommitCreateParams, {"owner": match["owner"], **(body or {})}, "commit")
        commits = self.commits[handle]
        latest = commits[-1] if commits else None
        if latest is not None and latest["manifest"] == body["manifest"]:
            raise _http_error(409, "Nothing to commit")
        parent = body.get("parent_commit")
        if latest is not None and parent not in (None, latest["commit_hash"]):
            raise _http_error(409, f"parent commit {parent} is not the latest commit")
        text = json.dumps(body["manifest"], sort_keys=True)
        commit_hash = hashlib.sha256(f"{handle}:{len(commits)}:{text}".encode()).hexdigest()[:8]
        commit = {
            "id": str(uuid.uuid4()),
            "commit_hash": commit_hash,
            "manifest": copy.deepcopy(body["manifest"]),
            "parent_commit_hash": latest["commit_hash"] if latest else None,
            "repo_id": self.repos[handle]["id"],
            "created_at": _now_iso(),
            "updated_at": _now_iso(),
            "description": body.get("description"),
        }
        commits.append(commit)
        self.repos[handle]["updated_at"] = commit["created_at"]
        return 200, {"commit": _sdk_out(CommitWithLookups, copy.deepcopy(commit))}

    def manifest(self, handle: str, commit: str | None = None) -> JSON:
        """The manifest of a prompt's commit (its latest by default)."""
        commits = self.commits[handle]
        if commit is None:
            return dict(commits[-1]["manifest"])
        return dict(next(c for c in commits if c["commit_hash"] == commit)["manifest"])

    # -- online evaluators -------------------------------------------------------------

    def _check_prompt(self, llm: JSON) -> None:
        handle = llm.get("prompt_repo_handle")
        if handle is None:
            return
        if handle not in self.repos:
            raise _http_error(404, f"prompt {handle!r} not found")
        ref = llm.get("commit_hash_or_tag")
        hashes = {c["commit_hash"] for c in self.commits[handle]}
        if ref not in (None, "latest") and ref not in hashes:
            raise _http_error(404, f"prompt {handle!r} has no commit {ref!r}")

    def _feedback_keys(self, llm: JSON) -> list[str]:
        """The keys of the prompt's output schema, as LangSmith reads them (not `comment`)."""
        handle = llm.get("prompt_repo_handle")
        if not handle or not self.commits.get(handle):
            return []
        ref = llm.get("commit_hash_or_tag")
        manifest = self.manifest(handle, None if ref in (None, "latest") else ref)
        schema = (manifest.get("kwargs") or {}).get("schema_") or {}
        return [k for k in (schema.get("properties") or {}) if k != "comment"]

    def _evaluator_out(self, ev: JSON) -> JSON:
        from langsmith.types.online_evaluator import OnlineEvaluator

        out = {k: v for k, v in ev.items() if not k.startswith("_")}
        rules = [r for r in self.rules.values() if r.get("evaluator_id") == ev["id"]]
        out["run_rules"] = [
            {
                "id": r["id"],
                "session_id": r.get("session_id"),
                "dataset_id": r.get("dataset_id"),
                "corrections_dataset_id": r.get("corrections_dataset_id"),
                "num_few_shot_examples": r.get("num_few_shot_examples"),
                "use_corrections_dataset": r["use_corrections_dataset"],
            }
            for r in rules
        ]
        if out.get("llm_evaluator") is not None:
            llm = dict(out["llm_evaluator"])
            llm["evaluator_id"] = ev["id"]
            # Derived from the evaluator's run rules (shared by all of them); None without.
            llm["use_corrections_dataset"] = rules[0]["use_corrections_dataset"] if rules else None
            llm["num_few_shot_examples"] = rules[0].get("num_few_shot_examples") if rules else None
            llm["corrections_dataset_id"] = (
                rules[0].get("corrections_dataset_id") if rules else None
            )
            out["llm_evaluator"] = llm
            out["feedback_keys"] = self._feedback_keys(llm)
        return _sdk_out(OnlineEvaluator, copy.deepcopy(out))

    def _evaluator_or_404(self, evaluator_id: str) -> JSON:
        ev = self.evaluators.get(str(uuid.UUID(evaluator_id)))
        if ev is None:
            raise _http_error(404, f"evaluator {evaluator_id} not found")
        return ev

    def _create_evaluator(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        from langsmith.types.create_online_evaluator_response import (
            CreateOnlineEvaluatorResponse,
        )
        from langsmith.types.online_evaluator_create_params import OnlineEvaluatorCreateParams

        _check_typed_dict(OnlineEvaluatorCreateParams, body, "evaluator")
        kind = body.get("type") or "llm"
        if kind == "llm" and not body.get("llm_evaluator"):
            raise _http_error(422, "an llm evaluator needs llm_evaluator")
        if kind == "llm":
            self._check_prompt(body["llm_evaluator"])
        now = _now_iso()
        ev = {
            "id": str(uuid.uuid4()),
            "name": body.get("name"),
            "type": kind,
            "metadata": body.get("metadata"),
            "llm_evaluator": dict(body.get("llm_evaluator") or {}) if kind == "llm" else None,
            "code_evaluator": body.get("code_evaluator"),
            "tenant_id": self.server.tenant_id,
            "created_at": now,
            "updated_at": now,
        }
        self.evaluators[ev["id"]] = ev
        out = {"evaluator": self._evaluator_out(ev)}
        return 200, _sdk_out(CreateOnlineEvaluatorResponse, out)

    def _list_evaluators(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = sorted(self.evaluators.values(), key=lambda e: e["created_at"], reverse=True)
        if (contains := (query.get("name_contains") or [None])[0]) is not None:
            items = [e for e in items if contains.lower() in (e.get("name") or "").lower()]
        if (kind := (query.get("type") or [None])[0]) is not None:
            items = [e for e in items if e["type"] == kind]
        if (meta := (query.get("metadata") or [None])[0]) is not None:
            wanted = json.loads(meta)
            items = [
                e for e in items if all((e.get("metadata") or {}).get(k) == v
                                        for k, v in wanted.items())
            ]  # fmt: skip
        out = [self._evaluator_out(e) for e in items]
        if (key := (query.get("feedback_key") or [None])[0]) is not None:
            out = [e for e in out if key in (e.get("feedback_keys") or [])]
        offset = int((query.get("offset") or ["0"])[0])
        limit = int((query.get("limit") or ["100"])[0])
        if not 1 <= limit <= 100:
            raise _http_error(422, "limit must be 1-100")
        return 200, {"evaluators": out[offset : offset + limit], "total": len(out)}

    def _read_evaluator(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        return 200, self._evaluator_out(self._evaluator_or_404(match["id"]))

    def _update_evaluator(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        from langsmith.types.online_evaluator_update_params import OnlineEvaluatorUpdateParams
        from langsmith.types.update_online_evaluator_response import (
            UpdateOnlineEvaluatorResponse,
        )

        ev = self._evaluator_or_404(match["id"])
        _check_typed_dict(OnlineEvaluatorUpdateParams, body, "evaluator update")
        if "llm_evaluator" in body:
            if ev["type"] != "llm":
                raise _http_error(422, "not an llm evaluator")
            llm = dict(body["llm_evaluator"])
            # Shared by all the evaluator's rules: set on each of them.
            for field in ("use_corrections_dataset", "num_few_shot_examples"):
                if field in llm:
                    value = llm.pop(field)
                    for rule in self.rules.values():
                        if rule.get("evaluator_id") == ev["id"]:
                            rule[field] = value
            merged = {**(ev["llm_evaluator"] or {}), **llm}
            self._check_prompt(merged)
            ev["llm_evaluator"] = merged
        for field in ("name", "metadata"):
            if field in body:
                ev[field] = body[field]
        ev["updated_at"] = _now_iso()
        out = {"evaluator": self._evaluator_out(ev)}
        return 200, _sdk_out(UpdateOnlineEvaluatorResponse, out)

    def _delete_evaluator(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        ev = self._evaluator_or_404(match["id"])
        rules = [r for r in self.rules.values() if r.get("evaluator_id") == ev["id"]]
        if rules and (query.get("delete_run_rules") or ["false"])[0] != "true":
            raise _http_error(409, "run rules still reference the evaluator")
        for rule in rules:
            del self.rules[rule["id"]]
        del self.evaluators[ev["id"]]
        return 200, None

    # -- run rules ---------------------------------------------------------------------

    def _rule_fields(self, body: Any, what: str) -> JSON:
        from langsmith.types.evaluator import Evaluator

        if not isinstance(body, dict):
            raise _http_error(422, f"{what} must be an object")
        allowed = set(Evaluator.model_fields) - _RULE_SERVER_FIELDS
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise _http_error(422, f"{what}: unknown or read-only fields {unknown}")
        return dict(body)

    def _rule_check(self, rule: JSON) -> None:
        rate = rule.get("sampling_rate")
        if not isinstance(rate, int | float) or isinstance(rate, bool) or not 0 <= rate <= 1:
            raise _http_error(422, f"sampling_rate must be a number from 0 to 1: {rate!r}")
        if (rule.get("session_id") is None) == (rule.get("dataset_id") is None):
            raise _http_error(422, "a rule needs exactly one of session_id and dataset_id")
        if rule.get("session_id") is not None:
            self.server._session_or_404(str(rule["session_id"]))
        if rule.get("evaluator_id") is not None:
            self._evaluator_or_404(str(rule["evaluator_id"]))
        n = rule.get("num_few_shot_examples")
        if n is not None and (not isinstance(n, int) or n < 0):
            raise _http_error(422, f"num_few_shot_examples must be a whole number: {n!r}")
        if rule.get("filter"):
            from langsmith_server import _compile_filter

            _compile_filter(rule["filter"])  # a filter the service could not parse: 422
        try:
            self._rule_v1(rule)
        except pydantic.ValidationError as exc:
            raise _http_error(422, f"run rule: {exc}") from exc

    def _rule_v1(self, rule: JSON) -> JSON:
        from langsmith.types.evaluator import Evaluator

        out = copy.deepcopy(rule)
        ev = self.evaluators.get(str(rule.get("evaluator_id")))
        out["evaluator_name"] = ev["name"] if ev else None
        out["evaluator_type"] = ev["type"] if ev else None
        session = self.server.sessions.get(str(rule.get("session_id")))
        out["session_name"] = session["name"] if session else None
        Evaluator.model_validate(out)
        return out

    def _rule_v2(self, rule: JSON) -> JSON:
        from langsmith.types.rule import Rule

        out = {_RULE_V2_NAMES.get(k, k): v for k, v in self._rule_v1(rule).items()}
        for field in (
            "extend_only",
            "include_extended_stats",
            "is_tracing_disabled",
            "transient",
            "is_managed_evaluator",
            "add_to_dataset_prefer_correction",
        ):
            out[field] = bool(out.get(field))  # fmt: skip
        return _sdk_out(Rule, out)

    def _new_corrections_dataset(self, rule: JSON) -> str:
        body = {"name": f"{rule['display_name']} corrections {rule['id'][:8]}"}
        _, ds = self.server._create_dataset(None, {}, body)  # type: ignore[arg-type]
        return str(ds["id"])

    def _create_rule(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        fields = self._rule_fields(body, "run rule")
        if not fields.get("display_name"):
            raise _http_error(422, "a run rule needs a display_name")
        now = _now_iso()
        rule: JSON = {
            "sampling_rate": 1.0,
            "is_enabled": True,
            "use_corrections_dataset": False,
            **fields,
            "id": str(uuid.uuid4()),
            "tenant_id": self.server.tenant_id,
            "created_at": now,
            "updated_at": now,
            "evaluator_version": 3,
        }
        self._rule_check(rule)
        if rule["use_corrections_dataset"]:
            rule["corrections_dataset_id"] = self._new_corrections_dataset(rule)
        self.rules[rule["id"]] = rule
        return 200, self._rule_v1(rule)

    def _rule_or_404(self, rule_id: str) -> JSON:
        rule = self.rules.get(str(uuid.UUID(rule_id)))
        if rule is None:
            raise _http_error(404, f"run rule {rule_id} not found")
        return rule

    def _update_rule(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        rule = self._rule_or_404(match["id"])
        updated = {**rule, **self._rule_fields(body, "run rule update"), "updated_at": _now_iso()}
        self._rule_check(updated)
        if updated["use_corrections_dataset"] and not updated.get("corrections_dataset_id"):
            updated["corrections_dataset_id"] = self._new_corrections_dataset(updated)
        self.rules[rule["id"]] = updated
        return 200, self._rule_v1(updated)

    def _delete_rule(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        del self.rules[self._rule_or_404(match["id"])["id"]]
        return 200, {}

    def _list_rules_v2(self, match: re.Match[str], query: Query, body: Any) -> tuple[int, Any]:
        items = sorted(self.rules.values(), key=lambda r: (r["updated_at"], r["id"]), reverse=True)
        for param, field in (("evaluator_id", "evaluator_id"), ("project_id", "session_id"),
                             ("dataset_id", "dataset_id")):  # fmt: skip
            if (value := (query.get(param) or [None])[0]) is not None:
                items = [r for r in items if str(r.get(field)) == str(uuid.UUID(value))]
        if ids := set(query.get("id") or []):
            items = [r for r in items if r["id"] in ids]
        if (contains := (query.get("name_contains") or [None])[0]) is not None:
            items = [r for r in items if contains.lower() in r["display_name"].lower()]
        size = int((query.get("page_size") or ["50"])[0])
        start = int((query.get("cursor") or ["0"])[0])
        page = items[start : start + size]
        more = start + size < len(items)
        return 200, {
            "items": [self._rule_v2(r) for r in page],
            "next_cursor": str(start + size) if more else None,
        }

    # -- what LangSmith does with a rule -----------------------------------------------

    def run_evaluator(
        self,
        rule_id: str,
        run_id: str,
        *,
        score: Any = None,
        value: Any = None,
        comment: str | None = None,
    ) -> JSON:
        """Write the rule's evaluator's verdict on a run, as LangSmith's online evaluation does.

        The feedback is on the evaluator's feedback key, with source type ``auto_eval``
        and the rule and evaluator in its source metadata.
        """
        with self.server.lock:
            rule = self.rules[rule_id]
            ev = self.evaluators[rule["evaluator_id"]]
            keys = self._feedback_keys(ev["llm_evaluator"] or {})
            if len(keys) != 1:
                raise AssertionError(f"the evaluator scores {keys}, not one key")
            body = {
                "run_id": run_id,
                "key": keys[0],
                "score": score,
                "value": value,
                "comment": comment,
                "feedback_source": {
                    "type": "auto_eval",
                    "metadata": {"rule_id": rule_id, "evaluator_id": ev["id"]},
                },
            }
            return self.server._store_feedback(body, stamp_user=False)

    def after_feedback_update(self, fb: JSON, body: JSON) -> None:
        """A correction of an evaluator's verdict joins its rule's corrections dataset."""
        source = fb.get("feedback_source") or {}
        correction = body.get("correction")
        if source.get("type") != "auto_eval" or not isinstance(correction, dict):
            return
        rule = self.rules.get(str((source.get("metadata") or {}).get("rule_id")))
        if rule is None or not rule.get("corrections_dataset_id"):
            return
        run = self.server.runs.get(fb.get("run_id") or "") or {}
        label = correction.get("value", correction.get("score"))
        self.server._store_example(
            {
                "dataset_id": rule["corrections_dataset_id"],
                "inputs": {"inputs": run.get("inputs"), "outputs": run.get("outputs")},
                "outputs": {
                    fb["key"]: label,
                    "few_shot_explanation": correction.get("explanation") or "",
                },
                "metadata": {"correction_feedback_id": fb["id"]},
                "source_run_id": fb.get("run_id"),
            }
        )


def _now_iso() -> str:
    import datetime as dt

    return dt.datetime.now(dt.UTC).isoformat()
