"""What the benchmark scripts share: they import it as `harness` (their folder is on `sys.path`).

- `datasets`: the shared data sets and scenarios by name, and one loader of a run's cases;
- `shared_data`: the data sets' JSONL format, each data set's scale and instructions;
- `options`: judge options named by their dotted place, as the command lines name them;
- `provenance`: what every result file records (commit, models, data checksums, machine);
- `fakes`: offline stand-ins for the chat and embedding servers (`--fake`).
"""
