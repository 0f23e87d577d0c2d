"""Which failed model calls a step of align, unalign or calibrate absorbs, and which end it.

A step that asks the model many things (grading seen cases, re-deriving guidelines)
batches them with `return_exceptions=True`, so that an answer still unusable after its
retries (`MalformedOutputError`) costs only its own item, and the report names it. Any
other error, most often the provider failing (a connection error, a timeout, a rate
limit), ends the call: its unit is rolled back and the caller gets `AlignFailedError`
(`langchain_memalign.alignment`). Absorbing it would commit what the outage left behind:
calibration pairs dropped, a guideline kept or dropped on part of its evidence, a
verdict missing from the agreement series for good.
"""

from __future__ import annotations

from collections.abc import Iterable

from langchain_memalign.errors import MalformedOutputError


def raise_unless_unusable(outcomes: Iterable[object]) -> None:
    """Raise the first error among a batch's outcomes that is not an unusable answer."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, MalformedOutputError):
            raise outcome
