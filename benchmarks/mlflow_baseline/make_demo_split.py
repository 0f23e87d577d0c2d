"""Deterministic small split of a shared/data file for the MLflow demo-size run.

    python make_demo_split.py [--src /work/shared/data/halubench.jsonl] [--n-train 5]
        [--n-test 5] [--max-chars 1000] [--seed 13] [--out-dir data]

Keeps cases whose JSON inputs+outputs are under --max-chars characters (the chat server
has 4,096 tokens per slot and the aligned judge prompt carries up to k retrieved examples),
shuffles each label group with random.Random(seed), and deals labels round-robin so train
and test are as balanced as possible. Writes <name>_train<N>.jsonl and <name>_test<N>.jsonl.
"""
import argparse
import json
import os
import random
from collections import defaultdict

ap = argparse.ArgumentParser()
ap.add_argument("--src", default="/work/shared/data/halubench.jsonl")
ap.add_argument("--n-train", type=int, default=5)
ap.add_argument("--n-test", type=int, default=5)
ap.add_argument("--max-chars", type=int, default=1000)
ap.add_argument("--seed", type=int, default=13)
ap.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
a = ap.parse_args()

rows = [json.loads(line) for line in open(a.src) if line.strip()]
groups = defaultdict(list)
for r in rows:
    if len(json.dumps(r["inputs"])) + len(json.dumps(r["outputs"])) < a.max_chars:
        groups[json.dumps(r["label"])].append(r)
rng = random.Random(a.seed)
keys = sorted(groups)
for k in keys:
    rng.shuffle(groups[k])
dealt = []
i = 0
while len(dealt) < a.n_train + a.n_test:
    k = keys[i % len(keys)]
    if groups[k]:
        dealt.append(groups[k].pop())
    i += 1
name = os.path.splitext(os.path.basename(a.src))[0]
os.makedirs(a.out_dir, exist_ok=True)
for part, cases in (("train", dealt[: a.n_train]), ("test", dealt[a.n_train:])):
    path = os.path.join(a.out_dir, f"{name}_{part}{len(cases)}.jsonl")
    with open(path, "w") as fh:
        for c in cases:
            fh.write(json.dumps(c, ensure_ascii=False) + "\n")
    print(path, [c["label"] for c in cases])
