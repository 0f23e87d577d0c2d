"""Quality benchmark (issue 10): learning curves of every system side by side, resumable.

Per data set and seed, on the same chat and embedding servers:

1. split: a training pool of --n-train (or all there is) and a test set of --n-test cases.
   Bool, categorical and pairwise scales get a test set with balanced labels where the data
   allows (each label an equal share, capped by what the label has); numeric scales a
   stratified one. The pool keeps the remaining cases' label proportions in every prefix,
   in an order shuffled by the seed. Scenario folders (`support-apology`) keep their own
   train/test files (the seed only reorders the pool).
2. stages (--stages 0,10,50): each aligned system is aligned incrementally on the first N
   cases of the pool, then judges the test set and, with expert-verdict reuse off, the N
   seen cases. Systems:
   - `unaligned`: our judge with an empty memory (judged once per seed, at stage 0;
     --repeat-identical R judges it R more times on the same test set: run-to-run noise);
   - `few_shot`: every stage case with its label and rationale in the prompt (up to
     --few-shot-max-chars of examples, the server has 4,096 tokens a slot; the count that
     fit is recorded);
   - `ours`: `MemAlignJudge` with default options;
   - `ours_no_<mechanism>` for each of --ablations, a separate judge aligned from scratch
     on the same feedback with one mechanism off: validate (validation.mode="off"),
     provenance (reflection.source_support=None), contrast (reflection.contrast=0), turns
     (prompt.layout="plain"), pairwise_separate (prompt.pairwise_mode="both_orders"),
     pairwise_orders (prompt.pairwise_mode="one_order"; the two pairwise ones on pairwise
     scales only, and also judged at stage 0 since they change the unaligned judge too),
     score_first (prompt.verdict_order="rationale_first": the rationale before the score;
     judged at stage 0 too, and on every data set, rationales or not), reasoned_floor
     (retrieval.min_similarity_with_rationale=0.9: a bool judge shows past cases with a
     rationale only when they are near duplicates, the default since Nov 29; bool scales
     only), and, named only, reasoned_any (retrieval.min_similarity_with_rationale=None:
     the bool default before);
   - with --mlflow, MLflow 3.18's MemAlign (`mlflow`, stage 0 = MLflow's unaligned
     `make_judge`) through `mlflow_baseline/run_mlflow_memalign.py --stages` in the MLflow
     venv, behind the counting proxy.
3. per system and stage: accuracy (failures count as wrong) with a Wilson 95% interval,
   balanced accuracy with a bootstrap 95% interval, accuracy per label, `collapsed` (one
   verdict for >= 90% of the test cases), κ / weighted κ / CCC / MAE where they apply,
   seen-case accuracy, alignment LLM calls, tokens and seconds (per stage and cumulative),
   judge seconds and tokens per judgment, and per guideline its text, sources and
   validation result (fixed, broken, action), plus the rejected proposals.

One result file per data set (--out-dir/quality_<dataset>.json) records `run_info` (commit,
models, sha256 of the data, machine, command) of every invocation that wrote to it. Every
(system, stage) is written as soon as it is measured and skipped when the file already has
it; aligned judges are saved after each stage's alignment (--out-dir/work/...), so an
interrupted run resumes where it stopped.

    python benchmarks/quality.py \\
        --datasets halubench,pandalm,prometheus,feedbackqa,support-apology \\
        --seeds 0,1 --stages 0,10,50 --n-train 50 --n-test 60 --repeat-identical 1 --mlflow

`--fake` runs everything against offline fake models (smoke test, no server). `--plan` prints
the judge calls a full run would make per data set (and hours at given seconds a call), with
no model call. `--ablation-stages -1` judges the ablations at the last stage only.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.datasets import (
    DERIVED,
    FILES,
    DatasetSpec,
    dataset_spec,
    load_derived,
    load_jsonl,
    load_scenario,
)
from harness.options import judge_kwargs
from harness.provenance import file_sha256, run_info
from side_by_side import (
    FewShotJudge,
    add_model_args,
    build_models,
    mlflow_instructions,
    mlflow_rows,
)

import langchain_memalign
from langchain_memalign import Feedback, MemAlignJudge
from langchain_memalign.evaluation.agreement import (
    AgreementReport,
    agreement_report,
    evaluate_agreement,
)
from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback
from langchain_memalign.reports import Usage

ROOT = Path(__file__).resolve().parents[1]
MLFLOW_DIR = ROOT / "benchmarks" / "mlflow_baseline"
ABLATIONS: dict[str, dict[str, Any]] = {
    "validate": {"validation.mode": "off"},
    "provenance": {"reflection.source_support": None},
    "contrast": {"reflection.contrast": 0},
    "turns": {"prompt.layout": "plain"},
    "pairwise_separate": {"prompt.pairwise_mode": "both_orders"},
    "pairwise_orders": {"prompt.pairwise_mode": "one_order"},
    "score_first": {"prompt.verdict_order": "rationale_first"},
    # Past cases with a rationale shown only when near duplicates: a bool judge's default
    # before the eighth session and again since the floor decision of Nov 29
    # (config.DEFAULT_FLOOR); kept so that the manifest's older entries still run.
    "reasoned_floor": {"retrieval.min_similarity_with_rationale": 0.9},
    # The k nearest past cases with a rationale, however far: a bool judge's default
    # between those two (docs/decisions.md#past-cases-with-a-rationale-on-bool-scales).
    "reasoned_any": {"retrieval.min_similarity_with_rationale": None},
}
# Pairwise ablations exist only for pairwise scales, and change how an empty-memory judge
# judges (so they are measured at stage 0 too).
PAIRWISE_ABLATIONS = {"pairwise_separate", "pairwise_orders"}
# Ablations of how the judge answers: they change an empty-memory judge too, and matter
# whether or not the feedback has rationales.
ANSWER_ABLATIONS = {"score_first"}
STAGE0_ABLATIONS = PAIRWISE_ABLATIONS | ANSWER_ABLATIONS
# Ablations of a default that only bool scales changed: elsewhere the judge equals ours.
BOOL_ABLATIONS = {"reasoned_floor", "reasoned_any"}
COLLAPSE_SHARE = 0.9


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- split -------------------------------------------------------------------------------------


def _interleave(groups: dict[str, list[Feedback]]) -> list[Feedback]:
    """Labels dealt in proportion: the j-th of a group of m sits at (j + 0.5) / m."""
    ranked = [
        ((j + 0.5) / len(groups[k]), n, fb)
        for n, k in enumerate(sorted(groups))
        for j, fb in enumerate(groups[k])
    ]
    return [fb for _, _, fb in sorted(ranked, key=lambda r: (r[0], r[1]))]


def _balanced_quotas(sizes: dict[str, int], n: int) -> dict[str, int]:
    """An equal share of n per label, capped by each label's size (water-filling)."""
    quotas = dict.fromkeys(sizes, 0)
    left = n
    open_ = [k for k in sorted(sizes) if sizes[k] > 0]
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for k in list(open_):
            take = min(share, sizes[k] - quotas[k], left)
            quotas[k] += take
            left -= take
            if quotas[k] >= sizes[k]:
                open_.remove(k)
            if left == 0:
                break
    return quotas


def split(
    data: list[Feedback], n_train: int, n_test: int, seed: int, balanced: bool
) -> tuple[list[Feedback], list[Feedback]]:
    """(training pool in arrival order, test set); see the module docstring."""
    rng = random.Random(seed)
    groups: dict[str, list[Feedback]] = defaultdict(list)
    for fb in data:
        groups[json.dumps(fb.value)].append(fb)
    for k in sorted(groups):
        rng.shuffle(groups[k])
    total = len(data)
    if n_train + n_test > total:
        # Too few cases: the test set keeps n_test if the pool still gets half its size,
        # else the two share the data (a warning goes to the log).
        n_train = min(n_train, total - n_test) if total - n_test >= n_train / 2 else total // 2
        n_test = min(n_test, total - n_train)
        log(f"only {total} cases: training pool {n_train}, test {n_test}")
    # Each label keeps at least its proportional share of the pool.
    reserve = {k: min(len(g), math.ceil(n_train * len(g) / total)) for k, g in groups.items()}
    if balanced:
        spare = {k: len(g) - reserve[k] for k, g in groups.items()}
        quotas = _balanced_quotas(spare, n_test)
        test = [fb for k in sorted(groups) for fb in groups[k][: quotas[k]]]
        rest = {k: g[quotas[k] :] for k, g in groups.items()}
        rng.shuffle(test)
    else:
        ordered = _interleave(groups)
        test = ordered[:n_test]
        ids = {fb.id for fb in test}
        rest = {k: [fb for fb in g if fb.id not in ids] for k, g in groups.items()}
    pool = _interleave({k: g for k, g in rest.items() if g})[:n_train]
    return pool, test


# -- metrics -----------------------------------------------------------------------------------


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float | None, float | None]:
    """Wilson score 95% interval for k successes in n."""
    if n == 0:
        return None, None
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)


def _balanced(pairs: list[tuple[str, bool]]) -> float | None:
    by: dict[str, list[bool]] = defaultdict(list)
    for label, ok in pairs:
        by[label].append(ok)
    if not by:
        return None
    return sum(sum(v) / len(v) for v in by.values()) / len(by)


def bootstrap(pairs: list[tuple[str, bool]], n_boot: int = 1000, seed: int = 0) -> list[Any]:
    """Percentile bootstrap 95% interval of balanced accuracy (cases resampled)."""
    if len(pairs) < 2:
        return [None, None]
    rng = random.Random(seed)
    stats = sorted(
        b
        for b in (_balanced([rng.choice(pairs) for _ in pairs]) for _ in range(n_boot))
        if b is not None
    )
    return [round(stats[int(0.025 * len(stats))], 4), round(stats[int(0.975 * len(stats)) - 1], 4)]


class Recorder:
    """A judge that keeps the results of its last `batch` (for their metadata)."""

    def __init__(self, judge: Any) -> None:
        self.judge, self.results = judge, []
        self.name = getattr(judge, "name", None)
        self.memory = getattr(judge, "memory", None)
        self.scale = getattr(judge, "scale", None)

    def batch(self, cases: Any, config: Any = None, **kw: Any) -> list[Any]:
        self.results = self.judge.batch(cases, config, **kw)
        return self.results


def uncalibrated(result: Any) -> Any:
    """A judge result with the judge's own score back where calibration replaced it."""
    cal = (result.get("metadata") or {}).get("calibration") if isinstance(result, dict) else None
    if not cal:
        return result
    return {**result, "score": cal["judge_score"]}


def metrics(report: AgreementReport) -> dict[str, Any]:
    """Everything recorded about one set of judgments."""
    cases = report.cases
    n = len(cases)
    pairs = [(json.dumps(c.human), bool(c.correct)) for c in cases]
    k = sum(ok for _, ok in pairs)
    per_label: dict[str, dict[str, Any]] = {}
    for label in sorted({lab for lab, _ in pairs}):
        oks = [ok for lab, ok in pairs if lab == label]
        per_label[label] = {"n": len(oks), "accuracy": round(sum(oks) / len(oks), 4)}
    verdicts = Counter(json.dumps(c.judge) for c in cases if c.judge is not None)
    top, top_n = verdicts.most_common(1)[0] if verdicts else (None, 0)
    usage = report.usage
    bal = _balanced(pairs)
    return {
        "n": n,
        "n_scored": report.n_scored,
        "failed": n - report.n_scored,
        "correct": k,
        "accuracy": round(k / n, 4) if n else None,
        "accuracy_ci95": list(wilson(k, n)),
        "balanced_accuracy": None if bal is None else round(bal, 4),
        "balanced_accuracy_ci95": bootstrap(pairs),
        "accuracy_per_label": per_label,
        "verdict_counts": dict(verdicts),
        "top_verdict_share": round(top_n / n, 4) if n else None,
        "collapsed": bool(n and top_n / n >= COLLAPSE_SHARE),
        "collapsed_to": top if n and top_n / n >= COLLAPSE_SHARE else None,
        "kappa": report.kappa,
        "weighted_kappa": report.weighted_kappa,
        "ccc": report.ccc,
        "mae": report.mae,
        "confusion": report.confusion.model_dump() if report.confusion else None,
        "seconds": round(report.seconds, 2),
        "llm_calls": usage.llm_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "seconds_per_judgment": round(report.seconds / n, 3) if n else None,
        "tokens_per_judgment": round(usage.total_tokens / n, 1) if n else None,
        "predictions": [
            {
                "id": c.id,
                "human": c.human,
                "judge": c.judge,
                "error": c.error,
                "rationale": c.judge_rationale,
            }
            for c in cases
        ],
    }


def usage_dict(usage: Usage, seconds: float) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 2),
        "llm_calls": usage.llm_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "embedding_calls": usage.embedding_calls,
        "embedded_texts": usage.embedded_texts,
    }


# -- the result file ---------------------------------------------------------------------------


class ResultFile:
    """One data set's results: loaded if present, rewritten (atomically) after every entry."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        if path.exists():
            self.data = json.loads(path.read_text(encoding="utf-8"))
            for key in ("dataset", "protocol", "models"):
                if key in self.data and self.data[key] != header[key]:
                    raise SystemExit(
                        f"{path} was written with another {key}: {self.data.get(key)!r} vs "
                        f"{header[key]!r}; use another --out-dir or delete it"
                    )
        else:
            self.data = {**header, "invocations": [], "seeds": {}}
        self.data["run_info"] = header["run_info"]
        self.data["invocations"].append(header["run_info"])
        self.save()

    def seed(self, seed: int) -> dict[str, Any]:
        return self.data["seeds"].setdefault(str(seed), {"entries": {}})

    def has(self, seed: int, key: str, part: str = "test") -> bool:
        return part in self.seed(seed)["entries"].get(key, {})

    def put(self, seed: int, key: str, **parts: Any) -> None:
        self.seed(seed)["entries"].setdefault(key, {}).update(parts)
        self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=str), encoding="utf-8")
        os.replace(tmp, self.path)


def seen_sample(seen: list[Feedback], most: int | None) -> list[Feedback]:
    """At most `most` of the seen cases, evenly spread over the order they were aligned in.

    Judging all 50 seen cases of a stage costs as much as 50 test judgments (more on pairwise
    scales); a spread keeps early and late feedback in the sample, which a prefix would not.
    """
    if most is None or len(seen) <= most:
        return list(seen)
    return [seen[i * len(seen) // most] for i in range(most)]


def entry_key(system: str, stage: int, repeat: int = 0) -> str:
    return f"{system}@{stage}" + (f"#{repeat}" if repeat else "")


# -- one data set ------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, models: tuple[Any, Any, Any]) -> None:
        self.args = args
        self.judge_llm, self.reflect_llm, self.emb = models

    def options(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        a = self.args
        return {
            "k": a.k, "retrieval.episode_max_chars": a.episode_max_chars,
            "retrieval.embed_max_chars": a.embed_max_chars,
            "reflection.batch_size": a.reflect_batch_size,
            "retrieval.reuse_expert_verdicts": False, **a.judge_options, **(extra or {}),
        }  # fmt: skip

    def new_judge(self, spec: DatasetSpec, extra: dict[str, Any]) -> MemAlignJudge:
        return MemAlignJudge(
            name=spec.name, instructions=spec.instructions, model=self.judge_llm,
            embeddings=self.emb, scale=spec.scale, reflection_model=self.reflect_llm,
            **judge_kwargs(self.options(extra)),
        )  # fmt: skip

    def load_judge(self, snapshot: Path, scratch: Path) -> MemAlignJudge:
        # Work on a copy: the judge writes to its folder, the snapshot must stay as saved.
        if scratch.exists():
            shutil.rmtree(scratch)
        shutil.copytree(snapshot, scratch)
        return MemAlignJudge.load(
            scratch, self.judge_llm, self.emb, reflection_model=self.reflect_llm
        )

    def evaluate(self, judge: Any, cases: list[Feedback], spec: DatasetSpec) -> dict[str, Any]:
        recorder = Recorder(judge)
        rep = evaluate_agreement(
            recorder, cases, scale=spec.scale, ordinal=spec.ordinal,
            max_concurrency=self.args.max_concurrency,
        )  # fmt: skip
        out = metrics(rep)
        # Score calibration replaces some scores; the judge's own ones, from the same
        # judgments, are the ablation without it (no second run, no run-to-run noise).
        raw = [uncalibrated(r) for r in recorder.results]
        changed = sum(r is not x for r, x in zip(raw, recorder.results, strict=True))
        if changed:
            out["calibrated"] = changed
            out["uncalibrated"] = metrics(
                agreement_report(cases, raw, spec.scale, ordinal=spec.ordinal, usage=rep.usage,
                                 seconds=rep.seconds)
            )  # fmt: skip
        return out

    # -- systems -------------------------------------------------------------------------------

    def run_unaligned(self, rf: ResultFile, seed: int, spec: DatasetSpec, test: list[Feedback]):
        for r in range(1 + self.args.repeat_identical):
            key = entry_key("unaligned", 0, r)
            if rf.has(seed, key):
                continue
            judge = self.new_judge(spec, {})
            log(f"{spec.name} seed {seed}: {key} on {len(test)} test cases")
            m = self.evaluate(judge, test, spec)
            judge.close()
            rf.put(seed, key, system="unaligned", stage=0, repeat=r, test=m)
            log(f"  {key}: acc {m['accuracy']} bal {m['balanced_accuracy']} "
                f"{m['seconds_per_judgment']}s/judgment")  # fmt: skip

    def run_few_shot(self, rf, seed: int, spec: DatasetSpec, pool, test, stages: list[int]):
        for n in stages:
            key = entry_key("few_shot", n)
            if n == 0 or rf.has(seed, key):
                continue
            examples, used = [], 0
            for fb in pool[:n]:  # the stage's feedback in arrival order, while it fits
                text = f"{fb.inputs}{fb.outputs}{fb.rationale or ''}"
                size = min(len(text), self.args.episode_max_chars) + 100
                if used + size > self.args.few_shot_max_chars:
                    break
                examples.append(fb)
                used += size
            judge = FewShotJudge(spec.name, spec.instructions, spec.scale, self.judge_llm,
                                 examples, self.args.episode_max_chars)  # fmt: skip
            log(f"{spec.name} seed {seed}: {key} ({len(examples)} of {n} examples fit)")
            m = self.evaluate(judge, test, spec)
            rf.put(seed, key, system="few_shot", stage=n, test=m,
                   examples_in_prompt=len(examples), examples_given=n)  # fmt: skip
            log(f"  {key}: acc {m['accuracy']} bal {m['balanced_accuracy']}")

    def run_aligned(
        self, rf: ResultFile, seed: int, spec: DatasetSpec, pool: list[Feedback],
        test: list[Feedback], stages: list[int], system: str, extra: dict[str, Any],
        workdir: Path,
    ) -> None:  # fmt: skip
        todo = [
            n for n in stages
            if (n > 0 or (system != "ours" and system.removeprefix("ours_no_") in STAGE0_ABLATIONS))
            and not rf.has(seed, entry_key(system, n))
        ]  # fmt: skip
        if system != "ours" and self.args.ablation_stages:
            # Ablations judged only at these stages (they are still aligned through the others).
            keep = {int(x) for x in self.args.ablation_stages.split(",") if x.strip()}
            todo = [n for n in todo if n in keep or n == 0 or (n == stages[-1] and -1 in keep)]
        if not todo:
            return
        folder = workdir / f"seed{seed}" / system
        scratch = folder / "current"
        judge: MemAlignJudge | None = None
        done_n = 0
        cumulative = Usage()
        cum_seconds = 0.0
        checks: dict[str, Any] = {}  # the latest validation of each guideline, over stages
        for n in stages:
            key = entry_key(system, n)
            snap = folder / f"stage{n}"
            entry = rf.seed(seed)["entries"].get(key, {})
            if n > todo[-1]:
                break
            if n == 0 and n not in todo:
                judge = judge or self.new_judge(spec, extra)
                continue
            if "align" in entry and snap.exists():
                # Aligned before (and maybe judged): resume from the saved judge.
                if judge is not None:
                    judge.close()
                judge = self.load_judge(snap, scratch)
                done_n = n
                cumulative = Usage.model_validate(entry["align"]["cumulative_usage"])
                cum_seconds = entry["align"]["cumulative_seconds"]
                checks.update({g["id"]: g["validation"] for g in entry.get("guidelines", [])
                               if g.get("validation")})  # fmt: skip
            else:
                if judge is None:
                    judge = self.new_judge(spec, extra)
                new = pool[done_n:n]
                if new:
                    counter = UsageCallbackHandler()
                    log(f"{spec.name} seed {seed}: {system} aligning {len(new)} (stage {n})")
                    started = time.perf_counter()
                    rep = judge.align(new, with_callback(None, counter), raise_on_failure=False)
                    seconds = time.perf_counter() - started
                    counted = counter.usage()
                    usage = Usage(
                        llm_calls=counted.llm_calls, input_tokens=counted.input_tokens,
                        output_tokens=counted.output_tokens,
                        embedding_calls=rep.usage.embedding_calls,
                        embedded_texts=rep.usage.embedded_texts,
                    )  # fmt: skip
                    cumulative = cumulative + usage
                    cum_seconds += seconds
                    checks.update({c.guideline_id: c.model_dump() for c in rep.validation})
                    align = {
                        **usage_dict(usage, seconds),
                        "cumulative_usage": cumulative.model_dump(),
                        "cumulative_seconds": round(cum_seconds, 2),
                        "failed": rep.failed,
                        "errors": rep.errors,
                        "guidelines_added": rep.guidelines_added,
                        "guidelines_removed": rep.guidelines_removed,
                        "guidelines_updated": rep.guidelines_updated,
                        "validation": [c.model_dump() for c in rep.validation],
                        "rejected": [r.model_dump() for r in rep.guidelines_rejected],
                        "calibration": rep.calibration and rep.calibration.model_dump(),
                    }
                    log(f"  aligned in {seconds:.0f}s, {usage.llm_calls} calls, "
                        f"{len(judge.guidelines)} guidelines, "
                        f"{len(rep.guidelines_rejected)} rejected")  # fmt: skip
                else:
                    align = usage_dict(Usage(), 0.0)
                    align.update(cumulative_usage=Usage().model_dump(), cumulative_seconds=0.0)
                guidelines = [
                    {
                        "id": g.id, "text": g.text, "sources": list(g.source_ids),
                        "validation": checks.get(g.id),
                    }
                    for g in judge.guidelines
                ]  # fmt: skip
                if snap.exists():
                    shutil.rmtree(snap)
                judge.save(snap)
                parts = {"align": align, "guidelines": guidelines, "stats": dict(judge.stats())}
                if "test" in entry:  # judged before, but its snapshot is gone: keep both
                    parts = {"realigned_on_resume": parts}
                rf.put(seed, key, system=system, stage=n, options=extra, **parts)
                done_n = n
            if n in todo:
                seen_cases = seen_sample(pool[:n], self.args.max_seen)
                log(f"{spec.name} seed {seed}: {key} judging {len(test)} test + "
                    f"{len(seen_cases)} of {n} seen")  # fmt: skip
                m = self.evaluate(judge, test, spec)
                seen = self.evaluate(judge, seen_cases, spec) if n else None
                rf.put(seed, key, test=m, seen=seen)
                log(f"  {key}: acc {m['accuracy']} bal {m['balanced_accuracy']} "
                    f"seen {seen and seen['accuracy']} collapsed {m['collapsed']}")  # fmt: skip
        if judge is not None:
            judge.close()

    def run_mlflow(self, rf, seed: int, spec: DatasetSpec, pool, test, stages, workdir: Path):
        a = self.args
        todo = [n for n in stages if not rf.has(seed, entry_key("mlflow", n))
                and (a.mlflow_stages is None or n in a.mlflow_stages)]  # fmt: skip
        if not todo:
            return
        python, runner = Path(a.mlflow_python), Path(a.mlflow_runner)
        if not python.exists() or not runner.exists():
            log(f"MLflow skipped: {python} or {runner} missing")
            return
        folder = workdir / f"seed{seed}" / "mlflow"
        if folder.exists():
            shutil.rmtree(folder)  # a fresh tracking store: traces are logged again
        folder.mkdir(parents=True)
        train_p, test_p, out = folder / "train.jsonl", folder / "test.jsonl", folder / "out.json"
        for path, items in ((train_p, pool), (test_p, test)):
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n"
                                    for r in mlflow_rows(items)))  # fmt: skip
        cmd = [
            str(python), str(runner), "--train", str(train_p), "--test", str(test_p),
            "--scale-kind", spec.scale.kind,
            "--instructions", mlflow_instructions(spec.instructions),
            "--name", spec.name, "--out", str(out), "--proxy", a.proxy,
            "--retrieval-k", str(a.k), "--workers", str(a.max_concurrency),
            "--tracking-dir", str(folder / "tracking"),
            "--stages", ",".join(map(str, stages)), "--predict-stages", ",".join(map(str, todo)),
        ]  # fmt: skip
        if spec.scale.kind in ("categorical", "pairwise"):
            cmd += ["--choices", json.dumps(list(spec.scale.choices))]
        if a.mlflow_context_tokens:
            cmd += ["--chat-context-tokens", str(a.mlflow_context_tokens)]
        log(f"{spec.name} seed {seed}: MLflow stages {todo} (log {folder / 'mlflow.log'})")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with (folder / "mlflow.log").open("w") as logf:
            proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, check=False)
        if not out.exists():
            log(f"MLflow failed (exit {proc.returncode}); see {folder / 'mlflow.log'}")
            return
        res = json.loads(out.read_text())
        for n_str, st in (res.get("stages") or {}).items():
            n = int(n_str)
            if n not in todo or "predictions" not in st:
                continue
            parts: dict[str, Any] = {"system": "mlflow", "stage": n}
            if a.mlflow_context_tokens:
                parts["options"] = {"chat_context_tokens": a.mlflow_context_tokens}
            if "align" in st:
                al = st["align"]
                mem = st.get("memory") or {}
                parts["align"] = {
                    "seconds": al.get("seconds"), "llm_calls": al.get("chat_calls"),
                    "input_tokens": al.get("prompt_tokens"),
                    "output_tokens": al.get("completion_tokens"),
                    "embedding_calls": al.get("embedding_calls"),
                    "embedded_texts": al.get("embedding_inputs"),
                    "note": "this stage's incremental align (MLflow re-aligns all earlier "
                            "stages again when a run resumes)",
                }  # fmt: skip
                to_case = res.get("trace_to_case") or {}
                parts["guidelines"] = [
                    {
                        "text": g.get("guideline_text"),
                        "sources": [to_case.get(t, t) for t in g.get("source_trace_ids") or []],
                    }
                    for g in mem.get("guidelines") or []
                ]
                parts["episodic_size"] = mem.get("episodic_size")
            parts["test"] = metrics(self.mlflow_report(st, test, spec))
            rf.put(seed, entry_key("mlflow", n), **parts)
            log(f"  mlflow@{n}: acc {parts['test']['accuracy']} "
                f"guidelines {len(parts.get('guidelines') or [])}")  # fmt: skip
        if proc.returncode != 0:
            log(f"MLflow exited {proc.returncode}; see {folder / 'mlflow.log'}")

    @staticmethod
    def mlflow_report(st: dict[str, Any], test: list[Feedback], spec: DatasetSpec):
        by_id = {r["id"]: r for r in st.get("predictions", [])}
        results: list[Any] = []
        for fb in test:
            r = by_id.get(fb.id)
            if r is None or r.get("value") is None:
                results.append(RuntimeError((r or {}).get("error") or "no result"))
            else:
                results.append({"score": r["value"], "comment": r.get("rationale")})
        ph = st.get("predict", {})
        usage = Usage(
            llm_calls=int(ph.get("chat_calls", 0)), input_tokens=int(ph.get("prompt_tokens", 0)),
            output_tokens=int(ph.get("completion_tokens", 0)),
            embedding_calls=int(ph.get("embedding_calls", 0)),
            embedded_texts=int(ph.get("embedding_inputs", 0)),
        )  # fmt: skip
        return agreement_report(test, results, spec.scale, name=spec.name, ordinal=spec.ordinal,
                                usage=usage, seconds=float(ph.get("seconds", 0.0)))  # fmt: skip

    # -- a data set ----------------------------------------------------------------------------

    def load(self, name: str) -> tuple[DatasetSpec, list[Feedback] | None, Any, dict[str, str]]:
        a = self.args
        if name in FILES:
            path = Path(a.data_dir) / FILES[name]
            data = load_jsonl(path, max_case_chars=a.max_case_chars,
                              max_field_chars=a.max_field_chars)  # fmt: skip
            return dataset_spec(name), data, None, {path.name: file_sha256(path)}
        if name in DERIVED:
            spec, data, path = load_derived(name, Path(a.data_dir), max_case_chars=a.max_case_chars,
                                            max_field_chars=a.max_field_chars)  # fmt: skip
            return spec, data, None, {path.name: file_sha256(path)}
        folder = Path(a.scenario_dir) / name
        if not folder.is_dir():
            raise SystemExit(f"unknown data set {name!r}: not in {sorted(FILES)} nor {folder}")
        spec, train, test = load_scenario(folder)
        sums = {f"{name}/{f.name}": file_sha256(f) for f in sorted(folder.glob("*.jsonl"))}
        return spec, None, (train, test), sums

    def plan(self, name: str) -> dict[str, Any]:
        """Judge calls a full run of this data set makes (no model call; ignores resuming).

        Alignment calls are not counted: reflection is one call per batch of
        --reflect-batch-size rationales, validation at most validate_max_calls (16) per align.
        """
        a = self.args
        spec, data, fixed, _ = self.load(name)
        balanced = spec.scale.kind in ("bool", "categorical", "pairwise")
        orders = 2 if spec.scale.kind == "pairwise" else 1  # two calls a pair, by default
        systems = [x for x in a.systems.split(",") if x]
        calls: Counter[str] = Counter()
        for seed in [int(x) for x in a.seeds.split(",") if x.strip()]:
            if fixed is not None:
                pool, test = list(fixed[0]), list(fixed[1])
            else:
                assert data is not None
                pool, test = split(data, a.n_train, a.n_test, seed, balanced)
            st = sorted({min(int(x), len(pool)) for x in a.stages.split(",") if x.strip()})
            aligned = [n for n in st if n > 0]
            t = len(test)
            if "unaligned" in systems:
                calls["unaligned"] += (1 + a.repeat_identical) * t * orders
            if "few_shot" in systems:
                calls["few_shot"] += len(aligned) * t
            seen = sum(len(seen_sample(pool[:n], a.max_seen)) for n in aligned)
            if "ours" in systems:
                calls["ours"] += (len(aligned) * t + seen) * orders
            rationales = any(fb.rationale for fb in pool)
            for abl in [x for x in a.ablations.split(",") if x]:
                if abl in PAIRWISE_ABLATIONS and orders == 2:
                    per_pair = 1 if abl == "pairwise_orders" else 2
                    calls[f"ours_no_{abl}"] += ((len(aligned) + 1) * t + seen) * per_pair
                elif abl in ANSWER_ABLATIONS:
                    calls[f"ours_no_{abl}"] += ((len(aligned) + 1) * t + seen) * orders
                elif abl in BOOL_ABLATIONS and spec.scale.kind != "bool":
                    continue
                elif abl not in PAIRWISE_ABLATIONS and rationales:
                    keep = {int(x) for x in a.ablation_stages.split(",") if x.strip()}
                    judged = [n for n in aligned if not keep or n in keep or
                              (n == aligned[-1] and -1 in keep)]  # fmt: skip
                    seen_j = sum(len(seen_sample(pool[:n], a.max_seen)) for n in judged)
                    calls[f"ours_no_{abl}"] += (len(judged) * t + seen_j) * orders
            if a.mlflow:
                ml_st = [n for n in st if a.mlflow_stages is None or n in a.mlflow_stages]
                calls["mlflow"] += len(ml_st) * t
        total = sum(calls.values())
        hours = {f"{s}s": round(total * s / 3600, 1) for s in a.plan_seconds}
        return {"dataset": name, "judge_calls": dict(calls), "total_judge_calls": total,
                "hours_at": hours}  # fmt: skip

    def run_dataset(self, name: str) -> Path:
        a = self.args
        spec, data, fixed, sums = self.load(name)
        stages = sorted({int(s) for s in a.stages.split(",") if s.strip()})
        balanced = spec.scale.kind in ("bool", "categorical", "pairwise")
        protocol = {
            "n_train": a.n_train, "n_test": a.n_test, "max_case_chars": a.max_case_chars,
            "max_field_chars": a.max_field_chars, "k": a.k, "balanced_test": balanced,
            "fixed_split": fixed is not None,
        }  # fmt: skip
        models = {
            "chat": "fake" if a.fake else f"{a.chat_model} @ {a.chat_url}",
            "embeddings": "fake" if a.fake else f"{a.embedding_model} @ {a.emb_url}",
        }
        header = {
            "dataset": name,
            "protocol": protocol,
            "models": models,
            "run_info": {
                **run_info(models=models, data=sums),
                "package": str(Path(langchain_memalign.__file__).parent),
                "argv": sys.argv,
            },
            "scale": spec.scale.model_dump(mode="json"),
            "ordinal": spec.ordinal,
            "instructions": spec.instructions,
            "note": spec.note,
            "pool_size": len(data) if data is not None else len(fixed[0]) + len(fixed[1]),
        }
        tag = f"_{a.tag}" if a.tag else ""
        header["judge_options"] = a.judge_options
        out = Path(a.out_dir) / f"quality_{name}{tag}.json"
        rf = ResultFile(out, header)
        workdir = Path(a.out_dir) / "work" / f"{name}{tag}"
        systems = [s for s in a.systems.split(",") if s]
        for seed in [int(s) for s in a.seeds.split(",") if s.strip()]:
            if fixed is not None:
                pool = list(fixed[0])
                random.Random(seed).shuffle(pool)
                test = list(fixed[1])
            else:
                assert data is not None
                pool, test = split(data, a.n_train, a.n_test, seed, balanced)
            split_info = {
                "train_ids": [fb.id for fb in pool], "test_ids": [fb.id for fb in test],
                "train_labels": dict(Counter(json.dumps(fb.value) for fb in pool)),
                "test_labels": dict(Counter(json.dumps(fb.value) for fb in test)),
                "train_with_rationale": sum(1 for fb in pool if fb.rationale),
            }  # fmt: skip
            sd = rf.seed(seed)
            if sd.get("split") and sd["split"]["test_ids"] != split_info["test_ids"]:
                raise SystemExit(f"{out}: seed {seed} was split differently; other data?")
            sd["split"] = split_info
            rf.save()
            st = sorted({min(n, len(pool)) for n in stages})  # 50, or all there is
            log(f"{name} seed {seed}: pool {len(pool)} {split_info['train_labels']}, "
                f"test {len(test)} {split_info['test_labels']}, stages {st}")  # fmt: skip
            if "unaligned" in systems:
                self.run_unaligned(rf, seed, spec, test)
            if "few_shot" in systems:
                self.run_few_shot(rf, seed, spec, pool, test, st)
            variants: list[tuple[str, dict[str, Any]]] = []
            if "ours" in systems:
                variants.append(("ours", {}))
            skipped: dict[str, str] = {}
            for abl in [x for x in a.ablations.split(",") if x]:
                if abl in PAIRWISE_ABLATIONS and spec.scale.kind != "pairwise":
                    skipped[abl] = "not a pairwise scale: the option has no effect"
                elif abl in BOOL_ABLATIONS and spec.scale.kind != "bool":
                    skipped[abl] = "not a bool scale: the default it ablates is unchanged"
                elif (
                    abl not in PAIRWISE_ABLATIONS | ANSWER_ABLATIONS
                    and not split_info["train_with_rationale"]
                ):
                    # No rationale, no reflection: the judge equals `ours` (same prompt too,
                    # the checklist applies only when there are guidelines).
                    skipped[abl] = "no rationales in the pool: no guidelines, same judge as ours"
                else:
                    variants.append((f"ours_no_{abl}", ABLATIONS[abl]))
            sd["ablations_skipped"] = skipped
            for system, extra in variants:
                self.run_aligned(rf, seed, spec, pool, test, st, system, extra, workdir)
            if a.mlflow:
                self.run_mlflow(rf, seed, spec, pool, test, st, workdir)
        log(f"{name}: done, {out}")
        return out


def _option(text: str, ap: argparse.ArgumentParser) -> tuple[str, Any]:
    name, eq, value = text.partition("=")
    if not eq or not name:
        ap.error(f"--judge-option {text!r}: expected NAME=VALUE")
    try:
        return name, json.loads(value)
    except json.JSONDecodeError:
        return name, value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--scenario-dir", default=str(ROOT.parent / "shared" / "scenarios"))
    ap.add_argument("--datasets", default="halubench,pandalm,prometheus,feedbackqa,support-apology")
    ap.add_argument("--systems", default="unaligned,few_shot,ours")
    ap.add_argument("--ablations", default=",".join(a for a in ABLATIONS if a != "reasoned_any"))
    ap.add_argument(
        "--ablation-stages",
        default="",
        help="judge the ablations only at these stages (-1: the last one), to save time; "
        "default: every stage",
    )
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--stages", default="0,10,50")
    ap.add_argument("--n-train", type=int, default=50)
    ap.add_argument("--n-test", type=int, default=60)
    ap.add_argument(
        "--repeat-identical",
        type=int,
        default=0,
        help="judge the unaligned judge this many more times on the same test set",
    )
    ap.add_argument(
        "--max-seen",
        type=int,
        default=None,
        help="judge at most this many seen cases a stage, evenly spread over the aligned order "
        "(default: all of them)",
    )
    ap.add_argument("--max-case-chars", type=int, default=1000)
    ap.add_argument("--max-field-chars", type=int, default=700)
    # The package's defaults are k=5, episode_max_chars=900 and embed_max_chars=1500; every
    # figure since the first session was measured with these, so they stay for comparability.
    ap.add_argument("--k", type=int, default=3, help="past cases a judgment (package: 5)")
    ap.add_argument(
        "--episode-max-chars", type=int, default=500, help="a past case shown (package: 900)"
    )
    ap.add_argument(
        "--embed-max-chars", type=int, default=500, help="a case embedded (package: 1500)"
    )
    ap.add_argument("--reflect-batch-size", type=int, default=8)
    ap.add_argument(
        "--few-shot-max-chars",
        type=int,
        default=6000,
        help="examples in the few-shot prompt (the server has 4,096 tokens a slot)",
    )
    ap.add_argument(
        "--judge-option", action="append", default=[], metavar="NAME=VALUE",
        help="an option for every MemAlignJudge of the run (unaligned, ours and its "
        "ablations) by its dotted place, e.g. prompt.pairwise_mode=separate (a JSON value, "
        "or else text); repeatable; "
        "use with --tag",
    )  # fmt: skip
    ap.add_argument(
        "--tag", default="",
        help="suffix of the result file and work folder (quality_<dataset>_<tag>.json)",
    )  # fmt: skip
    ap.add_argument("--max-concurrency", type=int, default=2)
    add_model_args(ap)
    ap.add_argument("--fake", action="store_true", help="offline fake models (smoke test)")
    ap.add_argument(
        "--plan",
        action="store_true",
        help="print the judge calls a full run makes per data set, and hours at --plan-seconds",
    )
    ap.add_argument(
        "--plan-seconds",
        type=lambda x: [float(v) for v in x.split(",")],
        default=[5.0, 10.0, 45.0],
        help="wall seconds per judge call to convert calls into hours (2 slots in use)",
    )
    ap.add_argument("--mlflow", action="store_true", help="also run MLflow 3.18's MemAlign")
    ap.add_argument(
        "--mlflow-stages", type=lambda t: [int(x) for x in t.split(",") if x], default=None,
        help="judge MLflow only at these stages (default: every stage; e.g. 10 skips MLflow's "
        "own unaligned judge at stage 0, measured apart from ours)",
    )  # fmt: skip
    ap.add_argument(
        "--mlflow-venv",
        default=".venv-mlflow",
        help="the MLflow venv (relative to the repo root, or absolute)",
    )
    ap.add_argument(
        "--mlflow-context-tokens", type=int, default=None,
        help="tell MLflow (through litellm) the chat server's context window, which its "
        "distillation packs batches by; unset it assumes 128,000 tokens, as a user's MLflow "
        "does for a model litellm does not know",
    )  # fmt: skip
    ap.add_argument("--mlflow-python", default=None, help="default: <mlflow-venv>/bin/python")
    ap.add_argument("--mlflow-runner", default=str(MLFLOW_DIR / "run_mlflow_memalign.py"))
    ap.add_argument("--proxy-script", default=str(MLFLOW_DIR / "proxy.py"))
    ap.add_argument("--proxy", default=None, help="a running counting proxy; default: our own")
    ap.add_argument("--proxy-port", type=int, default=8016)
    ap.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results" / "quality"))
    args = ap.parse_args(argv)
    args.judge_options = dict(_option(o, ap) for o in args.judge_option)
    if args.mlflow_python is None:
        args.mlflow_python = str((ROOT / args.mlflow_venv / "bin" / "python").absolute())
    unknown = set(x for x in args.ablations.split(",") if x) - set(ABLATIONS)
    if unknown:
        ap.error(f"unknown ablations {sorted(unknown)}; known: {sorted(ABLATIONS)}")

    if args.fake:
        from harness.fakes import HashEmbeddings, SchemaFakeChat

        fake = SchemaFakeChat()
        models: tuple[Any, Any, Any] = (fake, fake, HashEmbeddings())
        if args.mlflow:
            log("--fake: MLflow needs the real servers; skipped")
            args.mlflow = False
    else:
        models = build_models(args)
    proxy = None
    if args.mlflow and args.proxy is None and not args.plan:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", args.proxy_port)) == 0:
                ap.error(f"port {args.proxy_port} is taken; pass --proxy-port or --proxy")
        tmp = Path(tempfile.mkdtemp(prefix="quality_proxy_"))
        proxy = subprocess.Popen(
            [sys.executable, args.proxy_script, "--port", str(args.proxy_port),
             "--chat", args.chat_url.removesuffix("/v1"),
             "--embeddings", args.emb_url.removesuffix("/v1")],
            stdout=subprocess.DEVNULL, stderr=(tmp / "proxy.log").open("w"),
        )  # fmt: skip
        args.proxy = f"http://127.0.0.1:{args.proxy_port}"
        time.sleep(2)
    bench = Bench(args, models)
    if args.plan:
        for name in [d for d in args.datasets.split(",") if d]:
            print(json.dumps(bench.plan(name)))
        return 0
    try:
        for name in [d for d in args.datasets.split(",") if d]:
            bench.run_dataset(name)
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait(timeout=10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
