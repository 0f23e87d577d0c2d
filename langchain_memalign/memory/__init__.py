"""The judge's memory: state only, no model calls.

- `base`: the `Store` contract every storage backend implements;
- `store`: the SQLite backend (a folder, or in process);
- `postgres`: the PostgreSQL backend, one database shared by many processes;
- `backends`: `open_store`, which picks the backend a location names (`location`);
- `dump`: every row of a memory, to copy it between backends;
- `semantic`: guidelines and their selection within a token budget;
- `episodic`: past cases and their FAISS index;
- `judge_memory`: both memories over one store, as the graphs read and write them.

Those modules are internal. Public (`__all__`): the memory records, `Guideline` (what
`MemAlignJudge.guidelines` lists) and `Episode` (a past case).
"""

from langchain_memalign.memory.episodic import Episode
from langchain_memalign.memory.semantic import Guideline

__all__ = ["Episode", "Guideline"]
