"""The LangGraph graphs that use the memory: judging and aligning.

- `judge`: embed the case, load guidelines and retrieve episodes, then judge;
- `align`: reflect on feedback, merge it into memory, validate new guidelines, consolidate;
- `alignment`: one align or unalign run (what `MemAlignJudge.align` and `unalign` do);
- `forget`: the unalign step (remove feedback, re-derive what it fed);
- `validate`: new guidelines graded on seen cases; `provenance`: checks on proposals;
- `schemas`: what the alignment model calls return;
- `cases`: the steps around the judge graph (input cases in, one result out);
- `prompts`: every message the graphs send to a model;
- `structured`: structured output with retries and a JSON-in-text fallback.
"""
