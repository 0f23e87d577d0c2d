"""The judge's memory: state only, no model calls.

- `store`: the SQLite source of truth (config, feedback, episodes, guidelines, history);
- `semantic`: guidelines and their selection within a token budget;
- `episodic`: past cases and their FAISS index;
- `judge_memory`: both memories over one store, as the graphs read and write them.
"""
