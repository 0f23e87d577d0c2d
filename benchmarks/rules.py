"""Rule learning: can a judge learn a team's unwritten rule from 8 rationales and apply it?

On `rules.jsonl` (six domains, each with a hidden rule, 8 training cases with rationales and
16 test cases tagged adversarial / scope / plain; see the data set's RULES.md), per domain
and side by side on the same servers:

- `unaligned`: our judge with an empty memory (the domain's criterion only);
- `expert_rule`: no feedback; the domain's hidden rule stated by hand through the rulebook
  (`judge.rules.add`), as an expert who knows it would: how much of the gap to the
  oracle the rulebook closes without a single review;
- `few_shot`: every training case of the domain with its verdict and rationale in the prompt,
  laid out as the judge lays out past cases;
- `checks_oracle`: no feedback; the domain's hidden rule stated by hand with its hand-written
  check (`rules_checks.json` beside the data, the first phrasing; `judge.rules.set_check`):
  the ceiling of rules as checks;
- `ours`: `MemAlignJudge` at the package's defaults, aligned on the domain's 8 cases;
- `ours@N` for each N of `--curve`: the same, aligned on N of them (half passing, half
  failing, in file order): the learning curve;
- `ours~N` for each N of `--stream`: one judge aligned step by step as feedback arrives in
  use (the items of the first N, then those of the next N added, ...), judged after each
  step: the learning curve of incremental aligns (`ours~8` against `ours`: the same
  feedback in steps or at once);
- `ours_<name>` for each `--ablation name:option=value;...`: the same, one mechanism changed;
- `ours_<name>` for each `--judge-ablation name:option=value;...`: `ours`' own memory (the same
  repeat's, saved after its alignment) judged with these options changed: the same guidelines
  and past cases, so only the judging differs; with `_relearn_checks=true` among the options,
  the memory's checks are first learned again from scratch with these options (the same
  guidelines and cases, so only the check learning differs: its cost is recorded as `relearn`;
  `_judge=false` records only that);
- `mlflow`: MLflow 3.18's `MemAlignOptimizer` (its own venv, through the counting proxy).

Every system judges the 16 test cases and, with expert-verdict reuse off, the 8 seen cases
of every domain, `--repeats` times (each repeat aligns afresh). Recorded per judgment: the
verdict, its rationale, prompt tokens and a hash of the prompt; per alignment: chat calls,
tokens, seconds, guidelines. The summary counts correct verdicts per kind (adversarial of
48, scope of 24, plain of 24, seen of 48), per domain, and the run-to-run difference of
identical prompts (verdicts that changed between repeats where the prompt did not).

    python benchmarks/rules.py --data ../shared/data/rules.jsonl --repeats 2 --mlflow \\
        --out benchmarks/results/rules/rules.json

The result file is written after every (system, repeat, domain) and a rerun skips what it
holds, so an interrupted run resumes. `--fake` smoke-tests the harness offline.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from uuid import UUID

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.options import judge_kwargs
from harness.provenance import file_sha256, run_info
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage
from langchain_core.outputs import LLMResult
from side_by_side import (
    FewShotJudge,
    add_model_args,
    build_models,
    mlflow_instructions,
    start_proxy,
)

import langchain_memalign
from langchain_memalign import AlignReport, Feedback, MemAlignJudge, Scale
from langchain_memalign import _ablation as ablation_hook
from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback
from langchain_memalign.memory.rulebook import load_rulebook
from langchain_memalign.memory.semantic import Guideline

ROOT = Path(__file__).resolve().parents[1]
MLFLOW_DIR = ROOT / "benchmarks" / "mlflow_baseline"
KINDS = ("adversarial", "scope", "plain")
SCALE = Scale.of(bool)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- data --------------------------------------------------------------------------------------


class Domain:
    """One domain of rules.jsonl: its criterion, training feedback and test cases."""

    def __init__(self, name: str, rows: list[dict[str, Any]]) -> None:
        self.name = name
        criteria = {r["criterion"] for r in rows}
        if len(criteria) != 1:
            raise SystemExit(f"domain {name}: {len(criteria)} criteria, expected one")
        self.criterion = criteria.pop()
        self.train = [r for r in rows if r["split"] == "train"]
        self.test = [r for r in rows if r["split"] == "test"]
        self.kind = {r["id"]: r["kind"] for r in rows}
        # For analysis and the oracle ablation only: never shown to a published system.
        self.rule = rows[0]["meta"]["rule"]

    def feedback(self) -> list[Feedback]:
        return [as_feedback(r) for r in self.train]


def as_feedback(row: dict[str, Any]) -> Feedback:
    # The request as the case's inputs: what `{inputs}` in the criterion stands for.
    return Feedback(
        id=row["id"], inputs=row["inputs"]["request"], outputs=row["outputs"],
        value=bool(row["label"]), rationale=row.get("feedback"),
    )  # fmt: skip


def balanced(feedback: list[Feedback], n: int) -> list[Feedback]:
    """The first `n` items, half passing and half failing (in file order)."""
    passing = [fb for fb in feedback if fb.value is True]
    failing = [fb for fb in feedback if fb.value is False]
    picked = passing[: n - n // 2] + failing[: n // 2]
    return [fb for fb in feedback if fb in picked]


def load_domains(path: Path, only: list[str]) -> list[Domain]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["domain"]].append(r)
    names = only or list(by)
    unknown = set(names) - set(by)
    if unknown:
        raise SystemExit(f"unknown domains {sorted(unknown)}; known: {sorted(by)}")
    return [Domain(n, by[n]) for n in names]


# -- judging with per-case prompt records ------------------------------------------------------


class PromptRecorder(BaseCallbackHandler):
    """Per case (the `case_id` in the run's metadata): prompt hash, prompt and output tokens."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._case: dict[UUID, str] = {}
        self.records: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"calls": 0, "prompt_tokens": 0, "output_tokens": 0, "prompt_hash": ""}
        )

    def on_chat_model_start(
        self, serialized: Any, messages: list[list[BaseMessage]], *, run_id: UUID,
        metadata: dict[str, Any] | None = None, **kwargs: Any,
    ) -> None:  # fmt: skip
        case = (metadata or {}).get("case_id")
        if case is None:
            return
        text = json.dumps([[(m.type, m.content) for m in ms] for ms in messages], default=str)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self._lock:
            self._case[run_id] = case
            rec = self.records[case]
            rec["prompt_hash"] = (rec["prompt_hash"] + digest)[-16:] if rec["calls"] else digest
            rec["calls"] += 1
            if "messages" not in rec:
                rec["messages"] = [[(m.type, m.content) for m in ms] for ms in messages]

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            case = self._case.get(run_id)
            if case is None:
                return
            for gens in response.generations:
                for g in gens:
                    meta = getattr(getattr(g, "message", None), "usage_metadata", None) or {}
                    self.records[case]["prompt_tokens"] += int(meta.get("input_tokens", 0))
                    self.records[case]["output_tokens"] += int(meta.get("output_tokens", 0))


def judge_rows(judge: Any, rows: list[dict[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    """Judge each row; one record per row (a failed judgment is recorded, and counts wrong)."""
    recorder = PromptRecorder()
    cases = [{"inputs": r["inputs"]["request"], "outputs": r["outputs"]} for r in rows]
    configs = [{"callbacks": [recorder], "metadata": {"case_id": r["id"]}} for r in rows]
    results = judge.batch(cases, configs, return_exceptions=True, max_concurrency=concurrency)
    out = []
    for i, (r, res) in enumerate(zip(rows, results, strict=True)):
        rec = recorder.records[r["id"]]
        err = f"{type(res).__name__}: {res}" if isinstance(res, Exception) else None
        verdict = None if err else res.get("score")
        out.append({
            "id": r["id"], "kind": r.get("kind"), "label": bool(r["label"]),
            "verdict": verdict, "correct": verdict is not None and verdict == bool(r["label"]),
            "rationale": None if err else res.get("comment"), "error": err,
            "prompt_tokens": rec["prompt_tokens"], "output_tokens": rec["output_tokens"],
            "prompt_hash": rec["prompt_hash"],
            **({"messages": rec.get("messages")} if i < 2 else {}),
            "episode_ids": None if err else (res.get("metadata") or {}).get("episode_ids"),
            "check_fired": None if err else (res.get("metadata") or {}).get("check_fired"),
            "checks_asked": None if err else len((res.get("metadata") or {}).get("checks") or []),
            "calls": rec["calls"],
        })  # fmt: skip
    return out


# -- the result file ---------------------------------------------------------------------------


class Results:
    """`runs[system#repeat][domain]` = {align, test, seen}; rewritten atomically after each."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        if path.exists():
            self.data = json.loads(path.read_text(encoding="utf-8"))
            if self.data.get("data_sha256") != header["data_sha256"]:
                raise SystemExit(f"{path} was measured on other data; use another --out")
        else:
            self.data = {**header, "invocations": [], "runs": {}}
        self.data["invocations"].append(header["run_info"])
        self.save()

    def get(self, run: str, domain: str) -> dict[str, Any] | None:
        return self.data["runs"].get(run, {}).get(domain)

    def put(self, run: str, domain: str, entry: dict[str, Any]) -> None:
        self.data["runs"].setdefault(run, {})[domain] = entry
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, self.path)


# -- systems -----------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, models: tuple[Any, Any, Any]) -> None:
        self.args = args
        self.judge_llm, self.reflect_llm, self.emb = models

    def new_judge(self, d: Domain, options: dict[str, Any]) -> MemAlignJudge:
        return MemAlignJudge(
            name=d.name, instructions=d.criterion, model=self.judge_llm, embeddings=self.emb,
            scale=bool, reflection_model=self.reflect_llm,
            **judge_kwargs(
                {"retrieval.reuse_expert_verdicts": False}, self.args.judge_options, options
            ),
        )  # fmt: skip

    def judge_all(self, judge: Any, d: Domain, seen: bool) -> dict[str, Any]:
        c = self.args.max_concurrency
        started = time.perf_counter()
        test = judge_rows(judge, d.test, c)
        entry: dict[str, Any] = {
            "test": test,
            "test_seconds": round(time.perf_counter() - started, 1),
        }
        if seen:
            entry["seen"] = judge_rows(judge, d.train, c)
        return entry

    def run_stream(self, d: Domain, points: list[int]) -> dict[int, dict[str, Any]]:
        """`ours` aligned step by step on the items of each point, judged after each step.

        Each point's entry records the alignment so far: the calls and tokens of every
        step up to it, and its guidelines and checks after it.
        """
        judge = self.new_judge(d, {})
        out: dict[int, dict[str, Any]] = {}
        spent: dict[str, float] = defaultdict(float)
        done: list[Feedback] = []
        try:
            for n in sorted(points):
                known = {fb.id for fb in done}
                new = [fb for fb in balanced(d.feedback(), n) if fb.id not in known]
                counter = UsageCallbackHandler()
                started = time.perf_counter()
                rep = judge.align(new, with_callback(None, counter), raise_on_failure=False)
                u = counter.usage()
                spent["seconds"] += time.perf_counter() - started
                spent["llm_calls"] += u.llm_calls
                spent["input_tokens"] += u.input_tokens
                spent["output_tokens"] += u.output_tokens
                spent["embedding_calls"] += rep.usage.embedding_calls
                done += new
                log(f"  {d.name}: +{len(new)} items ({len(done)} in all), {u.llm_calls} calls, "
                    f"{len(judge.guidelines)} guidelines")  # fmt: skip
                align = {
                    **{k: round(v, 1) for k, v in spent.items()}, **learned(judge, rep),
                    "step": [fb.id for fb in new], "trained_on": [fb.id for fb in done],
                }  # fmt: skip
                # Seen cases are all of the domain's training items: judged once all are.
                seen = self.args.seen and len(done) == len(d.train)
                out[n] = {"align": align, **self.judge_all(judge, d, seen=seen)}
            return out
        finally:
            judge.close()

    def run_unaligned(self, d: Domain) -> dict[str, Any]:
        judge = self.new_judge(d, {})
        try:
            return self.judge_all(judge, d, seen=self.args.seen)
        finally:
            judge.close()

    def run_expert_rule(self, d: Domain) -> dict[str, Any]:
        """No feedback: the domain's hidden rule stated by an expert (`judge.rules.add`)."""
        judge = self.new_judge(d, {})
        try:
            judge.rules.add(d.rule, author="oracle")
            return self.judge_all(judge, d, seen=self.args.seen)
        finally:
            judge.close()

    def run_checks_oracle(self, d: Domain) -> dict[str, Any]:
        """No feedback: the hidden rule stated by hand, with its hand-written check."""
        spec = json.loads(Path(self.args.checks).read_text(encoding="utf-8"))[d.name]
        phrasing = spec["phrasings"][0]
        judge = self.new_judge(d, {})
        try:
            rule = judge.rules.add(d.rule, author="oracle")
            judge.rules.set_check(
                rule.id, applies=phrasing.get("applies"), broken=phrasing["broken"],
                broken_when=not phrasing.get("broken_is_kept", False),
                exception=phrasing.get("exception"), consequence=False, author="oracle",
            )  # fmt: skip
            return self.judge_all(judge, d, seen=self.args.seen)
        finally:
            judge.close()

    def run_few_shot(self, d: Domain) -> dict[str, Any]:
        # Laid out as the judge lays out past cases (its prompt layout and verdict order).
        probe = self.new_judge(d, {})
        style, first = ablation_hook.of(probe.config).layout, probe.config.score_first
        probe.close()
        judge = FewShotJudge(
            d.name, d.criterion, SCALE, self.judge_llm, d.feedback(),
            self.args.episode_max_chars, style=style, score_first=first,
        )  # fmt: skip
        return self.judge_all(judge, d, seen=self.args.seen)

    def run_judged_on(self, d: Domain, memory: Path, options: dict[str, Any]) -> dict[str, Any]:
        """`ours`' saved memory judged with other options (a copy: judging may write)."""
        scratch = Path(tempfile.mkdtemp(prefix="rules_judge_")) / d.name
        shutil.copytree(memory, scratch)
        options = dict(options)
        if options.pop("_no_guidelines", False):
            # The same past cases without the guidelines (an exploration ablation).
            with sqlite3.connect(scratch / "memory.sqlite") as db:
                db.execute("DELETE FROM guideline_sources")
                db.execute("DELETE FROM guidelines")
        oracle = options.pop("_oracle_rule", False)
        relearn = options.pop("_relearn_checks", False)
        judging = options.pop("_judge", True)
        judge = MemAlignJudge.load(scratch, self.judge_llm, self.emb,
                                   reflection_model=self.reflect_llm,
                                   **judge_kwargs(options))  # fmt: skip
        learned: dict[str, Any] = {}
        if relearn:
            learned = {"relearn": relearn_checks(judge)}
            log(f"  {d.name}: checks learned again, {learned['relearn']['llm_calls']} calls, "
                f"{learned['relearn']['input_tokens']} prompt tokens")  # fmt: skip
        if oracle:
            # The hidden rule itself as the only guideline: what a reflection that found it
            # would give (an exploration upper bound, never a published system).
            mem = judge.memory
            rule = Guideline(id="oracle", text=d.rule, source_ids=tuple(r["id"] for r in d.train))
            with mem.write() as w:
                w.delete_guidelines([g.id for g in mem.guidelines])
                w.put_guideline(rule, mem.embed([d.rule])[0], 0)
        try:
            judged = self.judge_all(judge, d, seen=self.args.seen) if judging else {}
            return {"judged_on": str(memory), **learned, **judged}
        finally:
            judge.close()
            shutil.rmtree(scratch.parent, ignore_errors=True)

    def run_ours(
        self,
        d: Domain,
        options: dict[str, Any],
        save: Path | None = None,
        train: int | None = None,
    ) -> dict[str, Any]:
        judge = self.new_judge(d, options)
        feedback = d.feedback() if train is None else balanced(d.feedback(), train)
        try:
            counter = UsageCallbackHandler()
            started = time.perf_counter()
            rep = judge.align(feedback, with_callback(None, counter), raise_on_failure=False)
            seconds = time.perf_counter() - started
            u = counter.usage()
            align = {
                "seconds": round(seconds, 1), "llm_calls": u.llm_calls,
                "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                "embedding_calls": rep.usage.embedding_calls, **learned(judge, rep),
                "trained_on": [fb.id for fb in feedback],
            }  # fmt: skip
            log(
                f"  {d.name}: aligned in {seconds:.0f}s, {u.llm_calls} calls, "
                f"{u.input_tokens}+{u.output_tokens} tokens, {len(judge.guidelines)} guidelines"
            )
            if save is not None:
                judge.save(save)
            return {"align": align, **self.judge_all(judge, d, seen=self.args.seen)}
        finally:
            judge.close()

    def run_mlflow(self, d: Domain, workdir: Path) -> dict[str, Any] | None:
        a = self.args
        python, runner = Path(a.mlflow_python), MLFLOW_DIR / "run_mlflow_memalign.py"
        if not python.exists():
            log(f"MLflow skipped: no {python} (benchmarks/mlflow_baseline/setup.sh)")
            return None
        workdir.mkdir(parents=True, exist_ok=True)
        train_p, test_p, out = (workdir / f"{d.name}_{x}" for x in ("train.jsonl", "test.jsonl",
                                                                     "out.json"))  # fmt: skip
        mlrow = lambda r: {"id": r["id"], "inputs": r["inputs"], "outputs": r["outputs"],  # noqa: E731
                           "label": bool(r["label"]), "feedback": r.get("feedback")}  # fmt: skip
        train_p.write_text("".join(json.dumps(mlrow(r)) + "\n" for r in d.train))
        # The seen cases are judged as test cases too (MLflow has no expert-verdict reuse).
        judged = d.test + d.train if a.seen else d.test
        test_p.write_text("".join(json.dumps(mlrow(r)) + "\n" for r in judged))
        cmd = [
            str(python), str(runner), "--train", str(train_p), "--test", str(test_p),
            "--scale-kind", "bool", "--instructions", mlflow_instructions(d.criterion),
            "--name", d.name, "--out", str(out), "--proxy", a.proxy,
            "--retrieval-k", str(a.mlflow_k), "--workers", str(a.max_concurrency),
            "--tracking-dir", str(workdir / f"mlflow_{d.name}"), "--stages", str(len(d.train)),
        ]  # fmt: skip
        with (workdir / f"{d.name}_mlflow.log").open("w") as logf:
            proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, check=False,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        if proc.returncode != 0 or not out.exists():
            log(f"MLflow failed on {d.name} (exit {proc.returncode}): {workdir}")
            return None
        res = json.loads(out.read_text())
        stage = res["stages"][str(len(d.train))]
        preds = {p["id"]: p for p in stage["predictions"]}
        phase = stage.get("predict") or {}
        per = (phase.get("prompt_tokens") or 0) / max(1, len(preds))

        def rows(src: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out_rows = []
            for r in src:
                p = preds.get(r["id"], {})
                v = p.get("value")
                if v is None or isinstance(v, bool):
                    verdict = v
                else:
                    verdict = str(v).strip().lower() in ("true", "yes", "pass")
                out_rows.append({
                    "id": r["id"], "kind": r.get("kind"), "label": bool(r["label"]),
                    "verdict": verdict, "correct": verdict == bool(r["label"]),
                    "rationale": p.get("rationale"), "error": p.get("error"),
                    "prompt_tokens": round(per), "output_tokens": None, "prompt_hash": None,
                    "episode_ids": p.get("retrieved_trace_ids"),
                })  # fmt: skip
            return out_rows

        al = stage.get("align") or {}
        align = {
            "seconds": al.get("seconds"), "llm_calls": al.get("chat_calls"),
            "input_tokens": al.get("prompt_tokens"), "output_tokens": al.get("completion_tokens"),
            "embedding_calls": al.get("embedding_calls"),
            "guidelines": (stage.get("memory") or {}).get("guidelines"),
        }  # fmt: skip
        return {"align": align, "test": rows(d.test), "seen": rows(d.train) if a.seen else [],
                "test_seconds": phase.get("seconds")}  # fmt: skip


# -- summary -----------------------------------------------------------------------------------


# The check-report actions of a rule that keeps a check (`CheckReport.action`).
KEPT = ("written", "rephrased", "covered", "tested")


def learned(judge: MemAlignJudge, rep: AlignReport) -> dict[str, Any]:
    """What an align left in the judge's memory and reported, for a result file."""
    return {
        "failed": rep.failed, "errors": rep.errors,
        "guidelines": [{"id": g.id, "text": g.text, "source_ids": list(g.source_ids)}
                       for g in judge.guidelines],
        "rejected": [r.model_dump() for r in rep.guidelines_rejected],
        "validation": [c.model_dump() for c in rep.validation],
        "checks": [c.model_dump() for c in rep.checks],
    }  # fmt: skip


def relearn_checks(judge: MemAlignJudge) -> dict[str, Any]:
    """The judge's checks dropped and learned again from its guidelines and cases; the cost."""
    # The package learns checks only inside an align or unalign; a benchmark reaches the
    # align's own learner so that nothing but the check learning runs again.
    memory = judge._align_nodes.memory
    state = load_rulebook(memory.store)
    state.checks = {}
    with memory.write() as w:
        w.put_rulebook(state)
    learner = judge._align_nodes.check_learner
    assert learner is not None
    counter = UsageCallbackHandler()
    started = time.perf_counter()
    reports, _, errors = learner.run([], with_callback(None, counter))
    u = counter.usage()
    return {
        "seconds": round(time.perf_counter() - started, 1), "llm_calls": u.llm_calls,
        "input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
        "checks": [c.model_dump() for c in reports], "errors": errors,
    }  # fmt: skip


def _counts(preds: list[dict[str, Any]]) -> dict[str, int]:
    c: dict[str, int] = defaultdict(int)
    for p in preds:
        c[p["kind"]] += bool(p["correct"])
        c[p["kind"] + "_n"] += 1
    return dict(c)


def summarize(data: dict[str, Any]) -> dict[str, Any]:
    """Per run: pooled counts per kind and per domain; per system: identical-prompt noise."""
    out: dict[str, Any] = {"runs": {}, "noise": {}}
    for run, domains in data["runs"].items():
        pooled: dict[str, int] = defaultdict(int)
        per_domain = {}
        align: dict[str, float] = defaultdict(float)
        relearn: dict[str, float] = defaultdict(float)
        tokens = judgments = 0
        for dname, e in domains.items():
            tc = _counts(e.get("test", []))
            seen = e.get("seen", [])
            tc["seen"] = sum(bool(p["correct"]) for p in seen)
            tc["seen_n"] = len(seen)
            tc["test"] = sum(tc.get(k, 0) for k in KINDS)
            tc["test_n"] = sum(tc.get(k + "_n", 0) for k in KINDS)
            tc["verdict_true"] = sum(p["verdict"] is True for p in e.get("test", []))
            per_domain[dname] = tc
            for k, v in tc.items():
                pooled[k] += v
            for k in ("llm_calls", "input_tokens", "output_tokens", "seconds"):
                align[k] += float((e.get("align") or {}).get(k) or 0)
                relearn[k] += float((e.get("relearn") or {}).get(k) or 0)
            for p in e.get("test", []):
                tokens += p.get("prompt_tokens") or 0
                judgments += 1
        out["runs"][run] = {
            "pooled": dict(pooled),
            "domains": per_domain,
            "align_total": dict(align),
            "align_per_domain": {k: round(v / max(1, len(domains)), 1) for k, v in align.items()},
            "prompt_tokens_per_judgment": round(tokens / max(1, judgments), 1),
        }
        if any(e.get("relearn") for e in domains.values()):
            out["runs"][run]["relearn_per_domain"] = {
                k: round(v / max(1, len(domains)), 1) for k, v in relearn.items()
            }
            out["runs"][run]["checks_kept"] = sum(
                c["action"] in KEPT
                for e in domains.values()
                for c in (e.get("relearn") or {}).get("checks", [])
            )
    # Run-to-run noise: the same system's repeats, case by case, where the prompt was the same.
    systems: dict[str, list[str]] = defaultdict(list)
    for run in data["runs"]:
        systems[run.split("#")[0]].append(run)
    for system, runs in systems.items():
        if len(runs) < 2:
            continue
        a, b = data["runs"][runs[0]], data["runs"][runs[1]]
        same = changed = differ_prompt = changed_any = n = 0
        for dname in set(a) & set(b):
            pa = {p["id"]: p for p in a[dname].get("test", []) + a[dname].get("seen", [])}
            pb = {p["id"]: p for p in b[dname].get("test", []) + b[dname].get("seen", [])}
            for cid in set(pa) & set(pb):
                n += 1
                flipped = pa[cid]["verdict"] != pb[cid]["verdict"]
                changed_any += flipped
                if pa[cid]["prompt_hash"] and pa[cid]["prompt_hash"] == pb[cid]["prompt_hash"]:
                    same += 1
                    changed += flipped
                else:
                    differ_prompt += 1
        out["noise"][system] = {
            "cases": n,
            "verdicts_changed": changed_any,
            "identical_prompts": same,
            "changed_with_identical_prompt": changed,
            "different_prompts": differ_prompt,
        }
    return out


def markdown(data: dict[str, Any], summary: dict[str, Any]) -> str:
    lines = [
        "| run | adversarial /48 | scope /24 | plain /24 | test /96 | seen /48 | "
        "align calls / domain | align tokens / domain | align s / domain | "
        "prompt tokens / judgment |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run, s in sorted(summary["runs"].items()):
        p, al = s["pooled"], s["align_per_domain"]
        tok = al.get("input_tokens", 0) + al.get("output_tokens", 0)
        lines.append(
            f"| {run} | {p.get('adversarial', 0)} | {p.get('scope', 0)} | {p.get('plain', 0)} | "
            f"{p.get('test', 0)} | {p.get('seen', 0)} | {al.get('llm_calls', 0):g} | {tok:g} | "
            f"{al.get('seconds', 0):g} | {s['prompt_tokens_per_judgment']:g} |"
        )
    domains = sorted({d for s in summary["runs"].values() for d in s["domains"]})
    lines += ["", "| run | " + " | ".join(f"{d} (adv/scope/plain, seen)" for d in domains) + " |",
              "|---|" + "---|" * len(domains)]  # fmt: skip
    for run, s in sorted(summary["runs"].items()):
        cells = []
        for d in domains:
            c = s["domains"].get(d)
            cells.append("–" if c is None else f"{c.get('adversarial', 0)}/{c.get('scope', 0)}/"
                         f"{c.get('plain', 0)}, {c.get('seen', 0)}")  # fmt: skip
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    relearned = {run: s for run, s in summary["runs"].items() if "relearn_per_domain" in s}
    if relearned:
        lines += ["", "| run (checks learned again) | calls / domain | prompt tokens / domain | "
                  "checks kept |", "|---|---|---|---|"]  # fmt: skip
        for run, s in sorted(relearned.items()):
            r = s["relearn_per_domain"]
            lines.append(f"| {run} | {r.get('llm_calls', 0):g} | "
                         f"{r.get('input_tokens', 0):g} | {s.get('checks_kept', 0)} |")  # fmt: skip
    if summary["noise"]:
        lines += ["", "| system | cases | verdicts changed between repeats | identical prompts | "
                  "changed with an identical prompt |", "|---|---|---|---|---|"]  # fmt: skip
        for system, nz in sorted(summary["noise"].items()):
            lines.append(
                f"| {system} | {nz['cases']} | {nz['verdicts_changed']} | "
                f"{nz['identical_prompts']} | {nz['changed_with_identical_prompt']} |"
            )
    return "\n".join(lines) + "\n"


# -- main --------------------------------------------------------------------------------------


def _ablation(text: str, ap: argparse.ArgumentParser) -> tuple[str, dict[str, Any]]:
    name, _, opts = text.partition(":")
    if not name:
        ap.error(f"--ablation {text!r}: expected NAME:OPTION=VALUE;...")
    return name, dict(_option(o, ap) for o in opts.split(";") if o.strip())


def _option(text: str, ap: argparse.ArgumentParser) -> tuple[str, Any]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        ap.error(f"{text!r}: expected NAME=VALUE")
    try:
        return name.strip(), json.loads(value)
    except json.JSONDecodeError:
        return name.strip(), value


def curve_points(summary: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Pooled correct verdicts per kind against training items a domain, repeats averaged.

    The unaligned judge is the curve at 0 items, `ours@N` at N, `ours` at all 8.
    """

    def items(system: str) -> int | None:
        if system.startswith("ours@"):
            return int(system.split("@")[1])
        return {"unaligned": 0, "ours": 8}.get(system)

    return _points(summary, items)


def stream_points(summary: dict[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """`curve_points` of incremental aligns: the unaligned judge at 0, `ours~N` at N."""

    def items(system: str) -> int | None:
        if system.startswith("ours~"):
            return int(system.split("~")[1])
        return 0 if system == "unaligned" else None

    points = _points(summary, items)
    return points if len(points["adversarial"]) > 1 else {}


def _points(
    summary: dict[str, Any], items: Callable[[str], int | None]
) -> dict[str, list[tuple[int, float]]]:
    """Each kind's pooled correct verdicts at `items(system)` training items, repeats averaged."""
    by_items: dict[int, list[dict[str, Any]]] = {}
    for run, entry in summary["runs"].items():
        n = items(run.split("#")[0])
        if n is not None:
            by_items.setdefault(n, []).append(entry["pooled"])
    return {
        kind: [
            (n, sum(p[kind] for p in pooled) / len(pooled))
            for n, pooled in sorted(by_items.items())
        ]
        for kind in ("adversarial", "scope", "plain")
    }


def plot_curve(summary: dict[str, Any], path: str) -> None:
    """Draw `curve_points` as one line per kind of test case (`stream_points` dashed)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    totals = next(iter(summary["runs"].values()))["pooled"]
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    stream = stream_points(summary)
    for kind, points in curve_points(summary).items():
        label = f"{kind} (of {totals.get(f'{kind}_n', '?')})"
        line = ax.plot([n for n, _ in points], [y for _, y in points], marker="o", label=label)
        if kind in stream:
            ax.plot(
                [n for n, _ in stream[kind]], [y for _, y in stream[kind]], marker="x",
                linestyle="--", color=line[0].get_color(), label=f"{kind}, step by step",
            )  # fmt: skip
    ax.set_xlabel("training items a domain (0: unaligned)")
    ax.set_ylabel("correct, pooled over 6 domains")
    ax.set_title("rules.jsonl: ours' learning curve")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, framealpha=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merge_results(paths: list[Path], out: Path) -> dict[str, Any]:
    """One result file from several runs on the same data (e.g. systems run in separate
    processes): a system's runs are renumbered as repeats in the order given, a run on
    other domains than its system's last repeat completes that repeat, and every file's
    invocations (commit, models, machine) are kept. A path written `FILE:SYSTEM,...`
    takes only those systems' runs from the file."""
    merged: dict[str, Any] = {}
    for given in paths:
        path, _, only = str(given).partition(":")
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if only:
            keep = set(only.split(","))
            data["runs"] = {r: d for r, d in data["runs"].items() if r.split("#")[0] in keep}
        if not merged:
            merged = {**data, "invocations": [], "runs": {}, "merged_from": []}
        elif data.get("data_sha256") != merged.get("data_sha256"):
            raise SystemExit(f"{path} was measured on other data than {paths[0]}")
        merged["merged_from"].append(str(given))
        merged["invocations"] += data.get("invocations", [])
        for run, domains in data["runs"].items():
            system = run.split("#")[0]
            repeat = sum(r.split("#")[0] == system for r in merged["runs"])
            last = merged["runs"].get(f"{system}#{repeat - 1}")
            if last is not None and not set(last) & set(domains):
                last.update(domains)  # the same repeat, measured domain by domain
            else:
                merged["runs"][f"{system}#{repeat}"] = domains
    merged.pop("summary", None)
    merged["summary"] = summarize(merged)
    out.write_text(json.dumps(merged, indent=1, default=str), encoding="utf-8")
    out.with_suffix(".md").write_text(markdown(merged, merged["summary"]), encoding="utf-8")
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "rules.jsonl"))
    ap.add_argument("--domains", default="", help="comma-separated (default: all six)")
    ap.add_argument("--systems", default="unaligned,few_shot,ours")
    ap.add_argument(
        "--ablation",
        action="append",
        default=[],
        metavar="NAME:OPT=VAL;...",
        help="one more aligned judge, `ours_NAME`, with these options changed",
    )
    ap.add_argument(
        "--judge-ablation",
        action="append",
        default=[],
        metavar="NAME:OPT=VAL;...",
        help="`ours`' saved memory judged again with these options, as `ours_NAME`",
    )
    ap.add_argument(
        "--judge-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an option for every judge of the run (use with another --out)",
    )
    ap.add_argument(
        "--curve",
        default="",
        metavar="N,N,...",
        help="also `ours@N`: ours aligned on N training items per domain (learning curve)",
    )
    ap.add_argument(
        "--stream",
        default="",
        metavar="N,N,...",
        help="also `ours~N`: one judge aligned step by step up to N items a domain, judged "
        "after each step (incremental aligns)",
    )
    ap.add_argument(
        "--checks",
        default=None,
        help="hand-written checks for `checks_oracle` (default: rules_checks.json beside --data)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument(
        "--no-seen",
        dest="seen",
        action="store_false",
        help="skip the seen cases (exploration runs)",
    )
    ap.add_argument(
        "--episode-max-chars",
        type=int,
        default=900,
        help="a past case shown by the few-shot judge (the package's default)",
    )
    ap.add_argument("--max-concurrency", type=int, default=2)
    add_model_args(ap)
    ap.add_argument("--mlflow", action="store_true", help="also run MLflow 3.18's MemAlign")
    ap.add_argument("--mlflow-k", type=int, default=5, help="MLflow's retrieval_k (its default)")
    ap.add_argument("--mlflow-python", default=str(ROOT / ".venv-mlflow" / "bin" / "python"))
    ap.add_argument("--proxy-port", type=int, default=8017)
    ap.add_argument("--fake", action="store_true", help="offline fake models (smoke test)")
    ap.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="RESULT",
        help="only merge these result files into --out (and its .md table); no model call; "
        "FILE:SYSTEM,... takes only those systems' runs of FILE",
    )
    ap.add_argument(
        "--plot",
        default=None,
        metavar="PNG",
        help="with --merge: the learning curve (unaligned at 0, ours@N, ours at 8) as an image",
    )
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "rules" / "rules.json"))
    args = ap.parse_args(argv)
    if args.merge:
        merged = merge_results(args.merge, Path(args.out))
        print(markdown(merged, merged["summary"]))
        if args.plot:
            plot_curve(merged["summary"], args.plot)
        return 0
    args.judge_options = dict(_option(o, ap) for o in args.judge_option)
    ablations = dict(_ablation(a, ap) for a in args.ablation)
    judge_ablations = dict(_ablation(a, ap) for a in args.judge_ablation)
    if set(ablations) & set(judge_ablations):
        ap.error("an ablation name is used twice")

    data_path = Path(args.data)
    args.checks = args.checks or str(data_path.with_name("rules_checks.json"))
    domains = load_domains(data_path, [d for d in args.domains.split(",") if d])
    if args.fake:
        from harness.fakes import HashEmbeddings, SchemaFakeChat

        fake = SchemaFakeChat()
        models: tuple[Any, Any, Any] = (fake, fake, HashEmbeddings())
        args.mlflow = False
        model_names = {"chat": "fake", "embeddings": "fake"}
    else:
        models = build_models(args)
        model_names = {"chat": f"{args.chat_model} @ {args.chat_url}",
                       "embeddings": f"{args.embedding_model} @ {args.emb_url}"}  # fmt: skip
    header = {
        "data": data_path.name,
        "data_sha256": {data_path.name: file_sha256(data_path)},
        "models": model_names,
        "judge_options": args.judge_options,
        "ablations": ablations,
        "judge_ablations": judge_ablations,
        "run_info": {
            **run_info(models=model_names, data={data_path.name: file_sha256(data_path)}),
            "package": str(Path(langchain_memalign.__file__).parent),
        },
    }
    results = Results(Path(args.out), header)
    bench = Bench(args, models)
    workdir = Path(tempfile.mkdtemp(prefix="rules_"))
    proxy = None
    if args.mlflow:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", args.proxy_port)) == 0:
                ap.error(f"port {args.proxy_port} is taken; pass --proxy-port")
        proxy = start_proxy(args, MLFLOW_DIR / "proxy.py", workdir)
    systems = [s for s in args.systems.split(",") if s] + [f"ours_{n}" for n in ablations]
    systems += [f"ours_{n}" for n in judge_ablations]
    systems += [f"ours@{int(n)}" for n in args.curve.split(",") if n.strip()]
    stream = sorted(int(n) for n in args.stream.split(",") if n.strip())
    # One run of the whole stream fills every point's entry: the largest point comes first.
    systems += [f"ours~{n}" for n in reversed(stream)]
    memories = Path(args.out).with_suffix(".memories")
    if args.mlflow:
        systems.append("mlflow")
    try:
        # Repeat-major: a run cut short still holds one whole repeat of every system.
        for repeat in range(args.repeats):
            for system in systems:
                run = f"{system}#{repeat}"
                for d in domains:
                    if results.get(run, d.name) is not None:
                        continue
                    log(f"{run} {d.name}")
                    if system == "unaligned":
                        entry = bench.run_unaligned(d)
                    elif system == "expert_rule":
                        entry = bench.run_expert_rule(d)
                    elif system == "checks_oracle":
                        entry = bench.run_checks_oracle(d)
                    elif system.startswith("ours~"):
                        points = bench.run_stream(d, stream)
                        for n, got in points.items():
                            if f"ours~{n}" != system:
                                results.put(f"ours~{n}#{repeat}", d.name, got)
                        entry = points[int(system.removeprefix("ours~"))]
                    elif system.startswith("ours@"):
                        entry = bench.run_ours(d, {}, train=int(system.removeprefix("ours@")))
                    elif system == "few_shot":
                        entry = bench.run_few_shot(d)
                    elif system == "ours":
                        entry = bench.run_ours(d, {}, memories / f"ours#{repeat}" / d.name)
                    elif system.removeprefix("ours_") in judge_ablations:
                        saved = memories / f"ours#{repeat}" / d.name
                        if not saved.exists():
                            log(f"  skipped: no saved memory {saved} (run `ours` first)")
                            continue
                        opts = judge_ablations[system.removeprefix("ours_")]
                        entry = bench.run_judged_on(d, saved, opts)
                    elif system.startswith("ours_"):
                        entry = bench.run_ours(d, ablations[system.removeprefix("ours_")])
                    elif system == "mlflow":
                        got = bench.run_mlflow(d, workdir / run)
                        if got is None:
                            continue
                        entry = got
                    else:
                        ap.error(f"unknown system {system!r}")
                    results.put(run, d.name, entry)
                    c = _counts(entry.get("test", []))
                    log(
                        f"  {run} {d.name}: adv "
                        f"{c.get('adversarial', 0)}/{c.get('adversarial_n', 0)}"
                        f" scope {c.get('scope', 0)}/{c.get('scope_n', 0)} plain "
                        f"{c.get('plain', 0)}/{c.get('plain_n', 0)} seen "
                        f"{sum(p['correct'] for p in entry.get('seen', []))}/"
                        f"{len(entry.get('seen', []))}"
                    )
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
    summary = summarize(results.data)
    results.data["summary"] = summary
    results.save()
    md = markdown(results.data, summary)
    Path(args.out).with_suffix(".md").write_text(md, encoding="utf-8")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
