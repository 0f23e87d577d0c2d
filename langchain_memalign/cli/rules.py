"""`memalign rules`: experts list, add, edit, pin, unpin and reject the judge's rules.

`list` reads the memory only (no model); the actions open the judge, since a
stated or edited rule is embedded as learned guidelines are.
"""

from __future__ import annotations

import json
from typing import Any

from langchain_memalign.cli.context import Context
from langchain_memalign.cli.io import echo
from langchain_memalign.cli.judge_file import EXIT_OK, CLIError
from langchain_memalign.errors import InvalidRuleError, MemoryFormatError, UnknownRuleError
from langchain_memalign.memory.backends import open_store
from langchain_memalign.memory.rulebook import Rule, load_rulebook
from langchain_memalign.rules import rules_in_store

AUTHOR_ENV = "MEMALIGN_AUTHOR"


def describe_rule(rule: Rule) -> str:
    """A rule as `rules list` prints it: id and marks, text, then its sources or author."""
    marks = [f"pinned by {rule.pinned_by}" if rule.pinned else ""]
    marks.append(f"edited by {rule.edited_by}" if rule.edited else "")
    head = rule.id + "".join(f"  [{m}]" for m in marks if m)
    origin = [f"stated by {rule.author}"] if rule.author else []
    if rule.source_ids:
        origin.append("from feedback " + ", ".join(rule.source_ids))
    out = f"{head}\n  {rule.text}\n  " + ("; ".join(origin) or "no sources left")
    check = rule.check
    if check is not None:
        by = f" (written by {check.author})" if check.author else ""
        test = check.test.describe() if check.test else "not tested on the experts' cases yet"
        out += f"\n  check{by}: {check.describe()}\n  test: {test}"
    return out


def _list(ctx: Context) -> int:
    args = ctx.args
    try:
        store = open_store(ctx.memory(), create=False)
    except MemoryFormatError as e:
        raise CLIError(str(e)) from e
    try:
        rules = rules_in_store(store)
        state = load_rulebook(store)
    finally:
        store.close()
    if args.json:
        out = {
            "rules": [
                {**r.model_dump(mode="json"), "pinned": r.pinned, "edited": r.edited} for r in rules
            ],
            "rejected": [r.model_dump(mode="json") for r in state.rejected],
            "changes": [c.model_dump(mode="json", exclude_none=True) for c in state.changes],
        }
        echo(json.dumps(out, indent=2, ensure_ascii=False))
        return EXIT_OK
    echo("\n".join(describe_rule(r) for r in rules) if rules else "(no rules yet)")
    if args.rejected:
        echo(f"\nRejected ({len(state.rejected)}):")
        for r in state.rejected:
            echo(f"{r.id}  rejected by {r.author} at {r.at}: {r.reason}\n  {r.text}")
    if args.history:
        echo(f"\nChanges ({len(state.changes)}):")
        for c in state.changes:
            why = f": {c.reason}" if c.reason else ""
            echo(f"{c.at}  {c.author} {c.action} {c.rule_id}{why}")
    return EXIT_OK


def _consequence(text: str | None) -> Any:
    """A verdict typed on the command line: JSON (`false`, `3`, `"bad"`) or a bare label."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def cmd_rules(ctx: Context) -> int:
    """Run one `memalign rules` action."""
    args = ctx.args
    if args.rules_action == "list":
        return _list(ctx)
    if not args.author:
        raise CLIError(f"say who makes the change: --author NAME (or set ${AUTHOR_ENV})")
    judge = ctx.judge()
    try:
        rules = judge.rules
        action = args.rules_action
        try:
            if action == "add":
                rule = rules.add(args.text, author=args.author)
                echo(f"Added {rule.id}: {rule.text}")
            elif action == "edit":
                rule = rules.edit(args.id, args.text, author=args.author, reason=args.reason)
                echo(f"Edited {rule.id}: {rule.text}")
            elif action in ("pin", "unpin"):
                change = rules.pin if action == "pin" else rules.unpin
                rule = change(args.id, author=args.author, reason=args.reason)
                echo(f"{'Pinned' if rule.pinned else 'Unpinned'} {rule.id}: {rule.text}")
            elif action == "check":
                rule = rules.set_check(
                    args.id, broken=args.broken, applies=args.applies, exception=args.exception,
                    broken_when=args.broken_when == "yes",
                    consequence=_consequence(args.consequence), author=args.author,
                    reason=args.reason,
                )  # fmt: skip
                echo(f"Checked {rule.id}: {rule.check.describe() if rule.check else ''}")
            elif action == "uncheck":
                rule = rules.remove_check(args.id, author=args.author, reason=args.reason)
                echo(f"Removed the check of {rule.id}")
            else:
                rejected = rules.reject(args.id, reason=args.reason, author=args.author)
                echo(f"Rejected {rejected.id}: {rejected.text}")
        except (UnknownRuleError, InvalidRuleError) as e:
            raise CLIError(f"{e}; nothing changed") from e
    finally:
        judge.close()
    return EXIT_OK
