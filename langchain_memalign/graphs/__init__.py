"""The LangGraph graphs that use the memory: judging and aligning.

- `judge`: embed the case, load guidelines and retrieve episodes, then judge;
- `align`: reflect on feedback, merge it into memory, consolidate guidelines;
- `prompts`: every message the graphs send to a model;
- `structured`: structured output with retries and a JSON-in-text fallback.
"""
