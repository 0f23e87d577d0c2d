"""The errors page (docs/errors.md, which call raises which) names real, exported errors,
and every error the package defines."""

from __future__ import annotations

import re
from pathlib import Path

import langchain_memalign
from langchain_memalign import errors

PAGE = Path(__file__).resolve().parents[3] / "docs" / "errors.md"
# Not the package's own, and named on the page as such.
FOREIGN = {"ValidationError", "OutputParserException", "TypeError", "ValueError", "KeyError",
           "OSError", "ConnectionError", "TimeoutError"}  # fmt: skip


def _named_errors() -> set[str]:
    names = set(re.findall(r"`([A-Z][A-Za-z]*(?:Error|Exception))`", PAGE.read_text()))
    return names - FOREIGN


def test_every_error_on_the_page_exists_and_is_exported() -> None:
    names = _named_errors()
    assert "AlignFailedError" in names and "LimitExceededError" in names
    for name in names:
        cls = getattr(errors, name, None)
        assert isinstance(cls, type) and issubclass(cls, errors.MemAlignError), name
        # every error is exported by `langchain_memalign.errors`; those callers catch most
        # by the top level too (test_imports.py pins which)
        assert name in errors.__all__, name
        top = getattr(langchain_memalign, name, None)
        assert top is cls or (top is None and name not in langchain_memalign.__all__), name


def test_every_package_error_is_on_the_page() -> None:
    defined = {
        n
        for n, v in vars(errors).items()
        if isinstance(v, type)
        and issubclass(v, errors.MemAlignError)
        and v is not errors.MemAlignError
    }
    assert defined <= _named_errors()
