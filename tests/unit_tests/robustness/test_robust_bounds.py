"""Numbers read from a folder are bounded; true/false is no score on a numeric scale ."""

from __future__ import annotations

import json
import re
import sqlite3
import typing
from pathlib import Path
from typing import Any

import pytest
from conftest import HOURS
from fakes import HashEmbeddings, RoleResponder
from pydantic import ValidationError

from langchain_memalign import MalformedOutputError, MemAlignJudge, MemoryFormatError
from langchain_memalign.memory.store import DB_FILE
from langchain_memalign.scale import Scale


def _set_config(folder: Path, **changes: Any) -> None:
    """Change the stored configuration; a dotted key (`options.reflection.batch_size`)
    changes a nested field."""
    with sqlite3.connect(folder / DB_FILE) as conn:
        (raw,) = conn.execute("SELECT value FROM meta WHERE key='config'").fetchone()
        config = json.loads(raw)
        for path, value in changes.items():
            *parents, leaf = path.split(".")
            target = config
            for p in parents:
                target = target[p]
            target[leaf] = value
        conn.execute("UPDATE meta SET value=? WHERE key='config'", (json.dumps(config),))


# Two keys earlier versions stored flat, and where they are read now.
STORED_FLAT = {
    "reflect_batch_size": "options.reflection.batch_size",
    "max_retries": "options.max_retries",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("options.max_retries", 1e9),
        ("options.max_retries", 10**9),
        ("k", 10**9),
        ("options.reflection.guideline_token_budget", 10**12),
        ("options.retrieval.episode_max_chars", 10**10),
        ("options.retrieval.embed_max_chars", -5),
        ("options.reflection.batch_size", 10**7),
        ("options.retrieval.hnsw_ef_search", 10**9),
        ("options.validation.max_calls", 10**9),
        ("options.reflection.contrast", 1000),
        ("options.retrieval.min_similarity", 2.0),
        ("k", float("nan")),
        ("k", True),
        ("k", "5"),
        # a flat key of earlier versions is checked where it is read, in its group
        ("reflect_batch_size", 10**7),
        ("max_retries", 10**9),
    ],
)
def test_out_of_bounds_numbers_in_a_folder_raise_memory_format_error(
    make_judge: Any, model: Any, tmp_path: Path, field: str, value: Any
) -> None:
    judge = make_judge(path=tmp_path)
    judge.align([HOURS])
    judge.close()
    _set_config(tmp_path, **{field: value})
    where = STORED_FLAT.get(field, field)
    with pytest.raises(MemoryFormatError, match=re.escape(f"meta.config.{where} = ")):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    with pytest.raises(MemoryFormatError, match=re.escape(where)):
        make_judge(path=tmp_path)  # reopening through the constructor reads it too


def test_garbage_config_raises_memory_format_error(
    make_judge: Any, model: Any, tmp_path: Path
) -> None:
    make_judge(path=tmp_path).close()
    _set_config(tmp_path, scale={"kind": "nonsense"})
    with pytest.raises(MemoryFormatError, match="scale"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())
    with sqlite3.connect(tmp_path / DB_FILE) as conn:
        conn.execute("UPDATE meta SET value='[1, 2]' WHERE key='config'")
    with pytest.raises(MemoryFormatError, match="config"):
        MemAlignJudge.load(tmp_path, model=model, embeddings=HashEmbeddings())


def test_bounds_hold_for_new_judges_too(make_judge: Any) -> None:
    """A judge that could be created but not reopened would be a trap."""
    from langchain_memalign.memory.judge_memory import CONFIG_BOUNDS

    with pytest.raises(ValueError, match="k = 5000"):
        make_judge(k=5000)
    for field, (low, high) in CONFIG_BOUNDS.items():
        assert low <= high, field


def _unannotated(t: Any) -> Any:
    return typing.get_args(t)[0] if typing.get_origin(t) is typing.Annotated else t


def test_every_number_of_the_config_is_bounded() -> None:
    from pydantic import BaseModel

    from langchain_memalign.config import JudgeConfig
    from langchain_memalign.memory.judge_memory import CONFIG_BOUNDS

    def numbers(model: type[BaseModel], prefix: str) -> set[str]:
        out = set()
        for name, f in model.model_fields.items():
            t = f.annotation
            if name == "scale":
                continue  # the scale's own bounds are the scale's
            if isinstance(t, type) and issubclass(t, BaseModel):
                out |= numbers(t, f"{prefix}{name}.")
            elif {int, float} & {t, *(_unannotated(a) for a in typing.get_args(t))}:
                out.add(prefix + name)
        return out

    found = numbers(JudgeConfig, "")
    assert found <= set(CONFIG_BOUNDS), found - set(CONFIG_BOUNDS)
    assert len(found) == 18  # k and the 17 numeric options


@pytest.mark.parametrize("spec", [(1, 5), (1, 50), (0.0, 1.0)])
def test_true_is_not_a_score_on_a_numeric_scale(spec: Any) -> None:
    schema = Scale.of(spec).verdict_schema()
    with pytest.raises(ValidationError, match="not a score on a numeric scale"):
        schema.model_validate({"rationale": "ok", "score": True})
    with pytest.raises(ValidationError):
        schema.model_validate_json('{"rationale": "ok", "score": false}')
    assert schema.model_validate({"rationale": "ok", "score": 1}).score == 1


def test_a_model_answering_true_on_a_1_to_5_scale_is_retried_then_refused(
    make_judge: Any, responder: RoleResponder
) -> None:
    responder.judge_rule = lambda case, memory: {"rationale": "fine", "score": True}
    judge = make_judge(scale=(1, 5), options={"max_retries": 1})
    with pytest.raises(MalformedOutputError):
        judge.invoke({"inputs": "q", "outputs": "a"})
