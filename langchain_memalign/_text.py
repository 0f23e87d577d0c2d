"""Rendering of judge inputs and outputs to text, truncation and token estimates.

Also text read as a model reads it (`read_as_model`: Unicode look-alikes and invisible
characters folded), for the injection check and the prompts alike.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

_WS = re.compile(r"\s+")


def render(value: Any) -> str:
    """Render inputs/outputs as text for prompts and embeddings.

    The same function is used when an episode is stored and when a new case is
    looked up, so retrieval always compares like with like.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if len(value) == 1:
            # {"question": "..."}: the key adds nothing but noise to an embedding.
            return render(next(iter(value.values())))
        return "\n".join(label + text for label, text in _fields(value))
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        if all(_is_message(m) for m in value):
            return "\n".join(_render_message(m) for m in value)
        return "\n".join(render(v) for v in value)
    if hasattr(value, "content") and hasattr(value, "type"):  # a LangChain message
        return _render_message(value)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _fields(value: Mapping[Any, Any]) -> list[tuple[str, str]]:
    """(label, text) of each field of a mapping, as `render` shows one of several fields."""
    return [(f"{k}: ", render(v)) for k, v in value.items()]


def _is_message(m: Any) -> bool:
    if isinstance(m, Mapping):
        return "content" in m and ("role" in m or "type" in m)
    return hasattr(m, "content") and hasattr(m, "type")


def _render_message(m: Any) -> str:
    if isinstance(m, Mapping):
        role = m.get("role") or m.get("type")
        content = m.get("content")
    else:
        role, content = m.type, m.content
    return f"{role}: {render(content)}"


# What `truncate` appends where it cut: the model is told text is missing, and a guideline
# that ends in it copied a cut text (graphs/provenance.py).
CUT_MARK = "..."


def truncate(text: str, max_chars: int) -> str:
    """Cut `text` to `max_chars`, marking the cut so the model knows text is missing."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    if max_chars <= len(CUT_MARK):
        return text[:max_chars]
    return text[: max_chars - len(CUT_MARK)].rstrip() + CUT_MARK


# What `truncate_middle` puts where it cut the middle out of a text.
MIDDLE_MARK = " [...] "


def truncate_middle(text: str, max_chars: int) -> str:
    """Cut `text` to `max_chars` by removing its middle, marking the cut.

    A case's ends say the most: a conversation's last turn is the question being
    answered, an answer's last lines its conclusion; a head-only cut loses both.
    """
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    keep = max_chars - len(MIDDLE_MARK)
    if keep < 40:  # too short to show two useful ends
        return truncate(text, max_chars)
    head = (keep + 1) // 2
    return text[:head].rstrip() + MIDDLE_MARK + text[len(text) - (keep - head) :].lstrip()


def fair_shares(sizes: Sequence[int], total: int) -> list[int]:
    """Split `total` characters among texts of these sizes.

    A text shorter than an equal share keeps all of it and leaves the rest to the
    longer ones (water-filling), so no room is wasted on a short field while a long
    one is cut.
    """
    shares = [0] * len(sizes)
    left = max(0, total)
    order = sorted(range(len(sizes)), key=lambda i: sizes[i])
    for n, i in enumerate(order):
        shares[i] = min(sizes[i], left // (len(order) - n))
        left -= shares[i]
    return shares


def render_within(value: Any, max_chars: int) -> str:
    """`render(value)` cut to about `max_chars`, every field of a mapping keeping a share.

    Cutting the rendered text of `{"instruction": <long>, "rubric": ...}` would show only
    the instruction's first lines; a past case is useful only if each field shows.
    """
    text = render(value)
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    if not (isinstance(value, Mapping) and len(value) > 1):
        return truncate_middle(text, max_chars)
    fields = _fields(value)
    markup = sum(len(label) for label, _ in fields) + len(fields) - 1
    shares = fair_shares([len(v) for _, v in fields], max_chars - markup)
    return "\n".join(
        # A field left no room at all still says it was there and was cut.
        label + (truncate_middle(v, share) if share > 0 else CUT_MARK)
        for (label, v), share in zip(fields, shares, strict=True)
    )


def estimate_tokens(text: str) -> int:
    """Estimate tokens without a tokenizer (about four characters a token)."""
    return (len(text) + 3) // 4


def normalize(text: str) -> str:
    """Normalize a guideline for duplicate detection."""
    return _WS.sub(" ", text).strip().strip(".").lower()


def stable_hash(value: Any) -> str:
    """Hash JSON-able content deterministically."""
    blob = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def extract_json(text: str) -> Any:
    """Parse the first JSON object in free text (code fences and prose allowed)."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start = text.find("{")
    if start < 0:
        raise ValueError("no JSON object in the model output")
    decoder = json.JSONDecoder()
    obj, _ = decoder.raw_decode(text[start:])
    return obj


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def tidy_rationale(text: str, max_chars: int) -> str:
    """A model's rationale with repeated sentences dropped, ending on a whole sentence.

    Small models loop ("The reply is polite. The reply is polite. ...") until a length
    limit cuts them mid-word; a reader should get each sentence once and no stump. A text
    shorter than the limit is whole even without a full stop.
    """
    flat = " ".join(text.split())
    seen: set[str] = set()
    sentences: list[str] = []
    for s in _SENTENCE_END.split(flat):
        key = normalize(s)
        if s and key not in seen:
            seen.add(key)
            sentences.append(s)
    cut_off = len(flat) >= max_chars - 20 and not flat.endswith((".", "!", "?"))
    if cut_off and len(sentences) > 1:
        sentences.pop()  # the stump the limit left
        cut_off = False
    out = " ".join(sentences)
    if len(out) > max_chars:
        head = out[:max_chars]
        end = max(head.rfind(". "), head.rfind("! "), head.rfind("? "))
        if end > 0:
            return head[: end + 1]
        out, cut_off = head, True
    if cut_off:
        space = out.rfind(" ")
        out = (out[:space] if space > 0 else out).rstrip(",;: ") + "…"
    return out


# Latin look-alikes from Cyrillic and Greek that NFKC leaves as they are: "Ignоre"
# with a Cyrillic о reads as "Ignore" to a model, and must to the patterns too.
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁӏАВЕКМНОРСТХІЈЅαβεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijsdlABEKMHOPCTXIJSabeiknoptuxABEZHIKMNOPTYX",
)


class _Invisible(dict[int, int | None]):
    """`str.translate` table that drops format characters and combining marks.

    Filled as characters are met: a table of every code point would take a
    second to build at import.
    """

    def __missing__(self, code: int) -> int | None:
        kept = None if unicodedata.category(chr(code)) in ("Cf", "Mn") else code
        self[code] = kept
        return kept


_INVISIBLE = _Invisible()


def read_as_model(text: str) -> str:
    """`text` as a model reads it: NFKC, no invisible characters, marks and look-alikes folded.

    The injection patterns (`graphs.injection.normalize`) and the prompts' tag check
    (`prompting.prompts`) read text so.

    Invisible format characters (zero-width space, joiner, soft hyphen, word joiner,
    byte-order mark, bidirectional controls: Unicode category Cf) are removed, so a
    zero-width space inside "Ignore" does not split the word. Combining marks are
    removed too (an underlined "I̲g̲n̲o̲r̲e̲"), and the Cyrillic and Greek letters drawn
    like Latin ones are read as those.
    """
    if text.isascii():  # most text: nothing to fold, and NFKC leaves ASCII as it is
        return text
    kept = unicodedata.normalize("NFKD", text).translate(_INVISIBLE)
    return unicodedata.normalize("NFKC", kept).translate(_CONFUSABLES)
