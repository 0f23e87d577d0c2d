"""What the graphs send to a model, and how they read its answer.

- `prompts`: every message the graphs send to a model;
- `budget`: what alignment prompts show, chosen to fit `limits.PROMPT_TOKEN_BUDGET`;
- `schemas`: what the alignment model calls return;
- `structured`: structured output with retries and a JSON-in-text fallback.
"""
