"""Feedback listing and feedback configs of the LangSmith calls.

`FeedbackAPI` lists the feedback records on a key (by project or by run,
all pages, with reviewers' names), checks whether a record still exists,
and makes sure the workspace's feedback config for a key is on the judge's
scale, raising `FeedbackConfigMismatchError` (built by `_mismatch`) when it
is not.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any, cast

from langsmith import schemas as ls_schemas
from langsmith import utils as ls_utils

from langchain_memalign.errors import FeedbackConfigMismatchError
from langchain_memalign.langsmith._api_base import (
    APIBase,
    _chunks,
    _is_unsupported,
    _status,
)
from langchain_memalign.langsmith._fields import describe_config, same_config


class FeedbackAPI(APIBase):
    """Feedback records and feedback configs."""

    # -- feedback ------------------------------------------------------------------------

    def list_feedback(
        self,
        *,
        key: str,
        source_types: Sequence[str],
        project_ids: Sequence[str] | None = None,
        run_ids: Sequence[str] | None = None,
        created_since: dt.datetime | None = None,
    ) -> Iterator[ls_schemas.Feedback]:
        """Every feedback record on `key` in the projects or on the runs, all pages.

        Reviewers' names are requested (`include_user_names`): without it the service
        returns only their user ids. `created_since` keeps the records created at or
        after that time (the only time filter `GET /feedback` has).
        """
        # Plain strings: the FeedbackSourceType enum is serialized as
        # "FeedbackSourceType.API" in query strings, which servers reject.
        sources = cast(Any, list(source_types))
        # "true", not True: requests would send "True", which strict parsers refuse
        kwargs: dict[str, Any] = {"include_user_names": "true"}
        if created_since is not None:
            kwargs["min_created_at"] = created_since.isoformat()
        if run_ids is not None:
            for chunk in _chunks(list(run_ids), 50):
                yield from self.client.list_feedback(
                    run_ids=chunk, feedback_key=[key], feedback_source_type=sources, **kwargs
                )
            return
        if project_ids:
            kwargs["session"] = list(project_ids)
        yield from self.client.list_feedback(
            feedback_key=[key], feedback_source_type=sources, **kwargs
        )

    def feedback_exists(self, feedback_id: str) -> bool:
        """Whether a feedback record still exists (only a not-found answer says it doesn't)."""
        try:
            self.client.read_feedback(feedback_id)
        except ls_utils.LangSmithNotFoundError:
            return False
        return True

    # -- feedback configs ----------------------------------------------------------------

    def ensure_feedback_config(self, key: str, config: ls_schemas.FeedbackConfig) -> str | None:
        """The id of the workspace config that reads `key` as `config`, created if needed.

        Raises `FeedbackConfigMismatchError` when the workspace keeps another config for
        the key and will not take a second one (HTTP 400, or 409 next to an enforced
        config), or when the key's enforced config is another: reviews would be given on
        a scale the judge cannot read. None when the server has no feedback configs.
        """
        existing = self._configs(key)
        for entry in existing:
            if entry.is_enforced and not same_config(entry.feedback_config, config):
                raise _mismatch(key, entry.feedback_config, config, enforced=True)
        for entry in existing:
            if same_config(entry.feedback_config, config):
                return str(entry.id) if entry.id else None
        try:
            created = self.client.create_feedback_config(key, feedback_config=config)
        except ls_utils.LangSmithError as e:
            if _status(e) in (400, 409) or "already exists" in str(e):
                other = existing[0].feedback_config if existing else None
                raise _mismatch(key, other, config, enforced=_status(e) == 409) from e
            if _is_unsupported(e):
                return None
            raise
        if not same_config(created.feedback_config, config):  # the service kept its own
            raise _mismatch(key, created.feedback_config, config, enforced=False)
        return str(created.id) if created.id else None

    def _configs(self, key: str) -> list[ls_schemas.FeedbackConfigSchema]:
        def listed(**extra: Any) -> list[ls_schemas.FeedbackConfigSchema]:
            found = self.client.list_feedback_configs(feedback_key=[key], **extra)
            return [c for c in found if c.feedback_key == key and not c.is_deleted]

        try:
            return listed(include_all_configs=True)
        except ls_utils.LangSmithError as e:
            if _is_unsupported(e):
                return []
            if _status(e) not in (400, 422):
                raise
        # Servers that predate `include_all_configs` may refuse the parameter (400/422):
        # without it they list the key's one config.
        try:
            return listed()
        except ls_utils.LangSmithError as e:
            if _is_unsupported(e):
                return []
            raise


def _mismatch(
    key: str, existing: Any, wanted: ls_schemas.FeedbackConfig, *, enforced: bool
) -> FeedbackConfigMismatchError:
    have = describe_config(existing) if existing else "another config"
    kind = "an enforced" if enforced else "a"
    return FeedbackConfigMismatchError(
        f"the LangSmith workspace has {kind} feedback config for {key!r} on another scale "
        f"({have}) than the judge's ({describe_config(wanted)}): reviews given on it could "
        "not be read. Delete or change that config, name the judge differently, or give "
        "it the workspace's scale.",
        key=key,
        existing=existing,
        wanted=wanted,
    )
