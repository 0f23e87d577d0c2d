"""The LangGraph graphs that use the memory, and their nodes: judging and aligning.

- `judge`: embed the case, load guidelines and retrieve episodes, then judge;
- `align`: the align and unalign graphs, and `AlignNodes`, which builds their steps
  (`classify`, `forget`, `reflect`, `merge`, `consolidate`, ...: each a class in its
  module, given what it uses); `align_state`: their state, by the step that writes it;
- `validate`: new guidelines graded on seen cases; `calibrate`: seen cases graded for
  score calibration; `seen_cases`: grading a seen case as unseen, for both;
- `pairs`: contrast pairs for reflection; `provenance`: checks on proposals;
  `injection`: graded text that addresses the grader; `query_vector`: the check of a
  vector a parent graph puts in the judge graph's state;
- `_weak`: nodes that do not keep their judge alive; `_failures`: which failed model calls
  a step absorbs (an unusable answer) and which end the call (a provider error).

What the graphs send to a model is in `langchain_memalign.prompting`; the runs around
the align graph in `langchain_memalign.alignment`, the steps around the judge graph in
`langchain_memalign.chain_steps`.
"""
