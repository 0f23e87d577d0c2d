"""Side by side on the shared data sets: unaligned, few-shot, MemAlign, ablations, MLflow.

One run, one model server, one embedding server. For every data set:

1. load it with `harness/shared_data.py`'s `load_jsonl` (cases whose inputs + outputs
   exceed --max-case-chars are skipped, so prompts fit a small local model), and split a
   stratified training pool (--n-train) and test set (--n-test) with --seed;
2. judge the test set with
   - `unaligned`: a `MemAlignJudge` with an empty memory;
   - `few_shot`: a static few-shot judge: every training case with its label and
     rationale in the prompt, in a fixed order (openevals-style examples, rendered in the
     same format as MemAlign's episodes, so only the memory strategy differs);
   - `memalign`: our judge aligned on the training pool (guidelines + k retrieved episodes);
   - `semantic_only`: the same memory, k=0 (guidelines only);
   - `episodic_only`: the same memory, guidelines withheld from the prompt (episodes only);
3. with --mlflow, run MLflow 3.18's `MemAlignOptimizer` on the same split through
   `benchmarks/mlflow_baseline/run_mlflow_memalign.py` in `.venv-mlflow`, pointed at the
   same servers via the counting proxy (`benchmarks/mlflow_baseline/proxy.py`), and score its
   predictions with the same metrics (`mlflow_unaligned`, `mlflow_memalign`).

Each variant's agreement report (accuracy, kappa, weighted kappa, CCC, MAE, confusion,
inter-annotator agreement) and cost (wall seconds, LLM calls, tokens counted with a
LangChain callback) goes to --out (JSON), a Markdown table to --out with .md, and a bar
chart to --plot.

    .venv/bin/python benchmarks/side_by_side.py --n-train 8 --n-test 8 --mlflow \
        --out benchmarks/results/side_by_side.json --plot docs/img/side_by_side.png
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.datasets import FILES, DatasetSpec, dataset_spec, load_jsonl
from harness.options import judge_kwargs
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import SecretStr

import langchain_memalign
from langchain_memalign import Feedback, MemAlignJudge, Scale
from langchain_memalign.evaluation.agreement import (
    AgreementReport,
    agreement_report,
    evaluate_agreement,
)
from langchain_memalign.evaluation.learning_curve import split_train_test
from langchain_memalign.evaluation.usage import UsageCallbackHandler, with_callback
from langchain_memalign.memory.episodic import Episode
from langchain_memalign.prompting.prompts import judge_messages
from langchain_memalign.prompting.structured import StructuredCaller

ROOT = Path(__file__).resolve().parents[1]
MLFLOW_DIR = ROOT / "benchmarks" / "mlflow_baseline"
VARIANTS = ("unaligned", "few_shot", "memalign", "semantic_only", "episodic_only")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- models ------------------------------------------------------------------------------------


def add_model_args(ap: argparse.ArgumentParser, judge_max_tokens: int = 400) -> None:
    """The local servers and the token caps `build_models` reads."""
    ap.add_argument("--judge-max-tokens", type=int, default=judge_max_tokens)
    ap.add_argument("--reflect-max-tokens", type=int, default=768)
    ap.add_argument("--chat-url", default="http://127.0.0.1:8013/v1")
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--chat-model", default="local")
    ap.add_argument("--embedding-model", default="minilm")


def start_proxy(args: argparse.Namespace, script: Path, workdir: Path) -> subprocess.Popen[bytes]:
    """MLflow's counting proxy in front of the chat and embedding servers; sets `args.proxy`."""
    proxy = subprocess.Popen(
        [sys.executable, str(script), "--port", str(args.proxy_port),
         "--chat", args.chat_url.removesuffix("/v1"),
         "--embeddings", args.emb_url.removesuffix("/v1"),
         # the same reply budget as our reflection calls (the larger of our two caps)
         "--chat-max-tokens", str(getattr(args, "reflect_max_tokens", 0))],
        stdout=subprocess.DEVNULL, stderr=(workdir / "proxy.log").open("w"),
    )  # fmt: skip
    args.proxy = f"http://127.0.0.1:{args.proxy_port}"
    time.sleep(2)  # let it bind before the first request
    return proxy


def build_models(args: argparse.Namespace) -> tuple[BaseChatModel, BaseChatModel, OpenAIEmbeddings]:
    key = SecretStr("local")
    common: dict[str, Any] = {
        "model": args.chat_model, "base_url": args.chat_url, "api_key": key,
        "temperature": 0.0, "timeout": 600, "max_retries": 1,
    }  # fmt: skip
    judge_llm = ChatOpenAI(**common, max_tokens=args.judge_max_tokens)
    reflect_llm = ChatOpenAI(**common, max_tokens=args.reflect_max_tokens)
    return judge_llm, reflect_llm, build_embeddings(args.emb_url, args.embedding_model)


def build_embeddings(url: str, model: str) -> OpenAIEmbeddings:
    """The local embedding server as a user would call it."""
    return OpenAIEmbeddings(
        model=model,
        openai_api_base=url,
        openai_api_key=SecretStr("local"),
        # True would try to download a tokenizer (no internet here)
        check_embedding_ctx_length=False,
    )


# -- the static few-shot baseline --------------------------------------------------------------


class FewShotJudge(Runnable[dict[str, Any], dict[str, Any]]):
    """Every training case in the prompt, fixed order: no retrieval, no guidelines."""

    def __init__(
        self,
        name: str,
        instructions: str,
        scale: Scale,
        model: BaseChatModel,
        examples: list[Feedback],
        episode_max_chars: int,
        retries: int = 2,
        style: str = "turns",
        score_first: bool | None = None,
    ) -> None:
        self.name = name
        self.style = style
        # The package's verdict_order="auto": a numeric scale asks for the score first, so
        # few-shot and ours are asked in the same order (the seventh session's finding).
        self.score_first = scale.kind == "numeric" if score_first is None else score_first
        self.instructions = instructions
        self.scale = scale
        self.episode_max_chars = episode_max_chars
        self.examples = [
            Episode(
                feedback_id=fb.id, inputs=fb.inputs, outputs=fb.outputs,
                reference_outputs=fb.reference_outputs, value=fb.value, rationale=fb.rationale,
            )
            for fb in examples
        ]  # fmt: skip
        self.caller = StructuredCaller(
            model, scale.verdict_schema(score_first=self.score_first), what=f"few-shot {name}",
            retries=retries,
        )  # fmt: skip

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        case = {k: input.get(k) for k in ("inputs", "outputs", "reference_outputs")}
        messages = judge_messages(
            self.instructions, self.scale, case, [], self.examples, self.episode_max_chars,
            self.style, score_first=self.score_first,  # type: ignore[arg-type]
        )  # fmt: skip
        verdict, _ = self.caller.invoke(messages, config)
        return {
            "key": self.name,
            "score": self.scale.validate_value(verdict.score),
            "comment": verdict.rationale,
        }


def without_guidelines(judge: MemAlignJudge) -> MemAlignJudge:
    """Ablation (benchmark only): the judge never sees its guidelines."""
    judge.memory.select_guidelines = lambda query_vector: []  # type: ignore[method-assign]
    return judge


# -- MLflow ------------------------------------------------------------------------------------


def mlflow_instructions(instructions: str) -> str:
    """Our template in MLflow's `{{ inputs }}` / `{{ outputs }}` syntax (reference in inputs)."""
    text = instructions.replace("{inputs}", "{{ inputs }}").replace("{outputs}", "{{ outputs }}")
    return text.replace("\n\nReference answer (a 5): {reference_outputs}", "")


def mlflow_rows(items: list[Feedback]) -> list[dict[str, Any]]:
    rows = []
    for fb in items:
        inputs = fb.inputs
        if fb.reference_outputs is not None:  # MLflow's judge sees inputs and outputs only
            inputs = {**inputs, "reference_answer": fb.reference_outputs}
        rows.append({
            "id": fb.id, "inputs": inputs, "outputs": fb.outputs,
            "label": fb.value, "feedback": fb.rationale,
        })  # fmt: skip
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def run_mlflow(
    args: argparse.Namespace,
    name: str,
    spec: DatasetSpec,
    train: list[Feedback],
    test: list[Feedback],
    workdir: Path,
) -> dict[str, Any] | None:
    runner = Path(args.mlflow_runner)
    python = Path(args.mlflow_python)
    if not python.exists() or not runner.exists():
        log(f"MLflow skipped: {python} or {runner} missing")
        return None
    train_p, test_p = workdir / f"{name}_train.jsonl", workdir / f"{name}_test.jsonl"
    write_jsonl(train_p, mlflow_rows(train))
    write_jsonl(test_p, mlflow_rows(test))
    out = Path(args.out).parent / f"mlflow_{name}.json"
    kind = spec.scale.kind
    cmd = [
        str(python), str(runner),
        "--train", str(train_p), "--test", str(test_p),
        "--scale-kind", kind,
        "--instructions", mlflow_instructions(spec.instructions),
        "--name", name, "--out", str(out),
        "--proxy", args.proxy, "--retrieval-k", str(args.k),
        "--workers", str(args.max_concurrency),
        "--tracking-dir", str(workdir / f"mlflow_{name}"),
    ]  # fmt: skip
    if kind in ("categorical", "pairwise"):
        cmd += ["--choices", json.dumps(list(spec.scale.choices))]
    log(f"MLflow: {' '.join(cmd[:2])} ... ({name})")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with (Path(args.out).parent / f"mlflow_{name}.log").open("w") as logf:
        proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, check=False)
    if proc.returncode != 0 or not out.exists():
        log(f"MLflow failed on {name} (exit {proc.returncode}); see mlflow_{name}.log")
        return None
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def mlflow_report(
    phase_rows: list[dict[str, Any]],
    test: list[Feedback],
    scale: Scale,
    phase: dict[str, Any],
    name: str,
    ordinal: bool,
) -> AgreementReport:
    by_id = {r["id"]: r for r in phase_rows}
    results: list[Any] = []
    for fb in test:
        r = by_id.get(fb.id)
        if r is None or r.get("value") is None:
            results.append(RuntimeError((r or {}).get("error") or "no result"))
        else:
            results.append({"score": r["value"], "comment": r.get("rationale")})
    from langchain_memalign.reports import Usage

    usage = Usage(
        llm_calls=int(phase.get("chat_calls", 0)),
        input_tokens=int(phase.get("prompt_tokens", 0)),
        output_tokens=int(phase.get("completion_tokens", 0)),
        embedding_calls=int(phase.get("embedding_calls", 0)),
        embedded_texts=int(phase.get("embedding_inputs", 0)),
    )
    return agreement_report(
        test, results, scale, name=name, ordinal=ordinal, usage=usage,
        seconds=float(phase.get("seconds", 0.0)),
    )  # fmt: skip


# -- one data set ------------------------------------------------------------------------------


def run_dataset(
    args: argparse.Namespace, name: str, models: tuple[Any, Any, Any], workdir: Path
) -> dict[str, Any]:
    judge_llm, reflect_llm, emb = models
    spec = dataset_spec(name)
    data = load_jsonl(
        Path(args.data_dir) / FILES[name],
        max_case_chars=args.max_case_chars,
        max_field_chars=args.max_field_chars,
    )
    train, test = split_train_test(data, args.n_train, args.n_test, seed=args.seed)
    log(f"{name}: {len(data)} cases under {args.max_case_chars} chars; "
        f"train {len(train)}, test {len(test)}; scale {spec.scale.kind}")  # fmt: skip
    out: dict[str, Any] = {
        "dataset": name,
        "scale": spec.scale.model_dump(),
        "instructions": spec.instructions,
        "note": spec.note,
        "pool_size": len(data),
        "train_ids": [fb.id for fb in train],
        "test_ids": [fb.id for fb in test],
        "reports": {},
        "align": {},
    }
    options = {
        "k": args.k, "retrieval.episode_max_chars": args.episode_max_chars,
        "retrieval.embed_max_chars": args.embed_max_chars,
        "reflection.batch_size": args.reflect_batch_size,
    }  # fmt: skip
    folder = workdir / name
    judge = MemAlignJudge(
        name=name, instructions=spec.instructions, model=judge_llm, embeddings=emb,
        scale=spec.scale, reflection_model=reflect_llm, path=folder / "full",
        **judge_kwargs(options),
    )  # fmt: skip
    evaluate = {"ordinal": spec.ordinal, "max_concurrency": args.max_concurrency}

    def record(variant: str, report: AgreementReport) -> None:
        out["reports"][variant] = json.loads(report.model_dump_json())
        s = report.summary()
        log(f"{name}/{variant}: acc {s['accuracy']} strict {s['strict_accuracy']} "
            f"kappa {s['kappa']} wkappa {s['weighted_kappa']} ccc {s['ccc']} "
            f"calls {s['llm_calls']} tokens {s['total_tokens']} {s['seconds']}s")  # fmt: skip

    if "unaligned" in args.variants:
        record("unaligned", evaluate_agreement(judge, test, **evaluate))

    if "few_shot" in args.variants:
        few = FewShotJudge(
            name, spec.instructions, spec.scale, judge_llm, train, args.episode_max_chars
        )
        record("few_shot", evaluate_agreement(few, test, scale=spec.scale, **evaluate))

    counter = UsageCallbackHandler()
    started = time.perf_counter()
    rep = judge.align(train, with_callback(None, counter), raise_on_failure=False)
    seconds = time.perf_counter() - started
    usage = counter.usage()
    out["align"] = {
        "seconds": round(seconds, 3),
        "llm_calls": usage.llm_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "embedding_calls": rep.usage.embedding_calls,
        "embedded_texts": rep.usage.embedded_texts,
        "failed": rep.failed,
        "errors": rep.errors,
        "guidelines": [
            {"text": g.text, "source_ids": list(g.source_ids)} for g in judge.guidelines
        ],
    }
    log(f"{name}: aligned {len(train)} in {seconds:.1f}s, {usage.llm_calls} LLM calls, "
        f"{len(judge.guidelines)} guidelines, failed {rep.failed}")  # fmt: skip
    judge.save(folder / "snapshot")

    if "memalign" in args.variants:
        record("memalign", evaluate_agreement(judge, test, **evaluate))
    if not judge.guidelines:  # no rationale, no guideline: the ablations equal other variants
        out["skipped"] = {
            "semantic_only": "no guidelines learned: same prompt as unaligned",
            "episodic_only": "no guidelines learned: same prompt as memalign",
        }
    if "semantic_only" in args.variants and judge.guidelines:
        sem = MemAlignJudge.load(folder / "snapshot", judge_llm, emb, k=0)
        record("semantic_only", evaluate_agreement(sem, test, **evaluate))
    if "episodic_only" in args.variants and judge.guidelines:
        epi = without_guidelines(MemAlignJudge.load(folder / "snapshot", judge_llm, emb))
        record("episodic_only", evaluate_agreement(epi, test, **evaluate))
    judge.close()

    if args.mlflow:
        res = run_mlflow(args, name, spec, train, test, workdir)
        if res is not None:
            phases = res.get("phases", {})
            for variant, key, phase in (
                ("mlflow_unaligned", "baseline", "baseline_predict"),
                ("mlflow_memalign", "aligned", "aligned_predict"),
            ):
                record(variant, mlflow_report(
                    res.get(key, []), test, spec.scale, phases.get(phase, {}), name, spec.ordinal
                ))  # fmt: skip
            a = phases.get("align", {})
            out["mlflow_align"] = {
                "seconds": a.get("seconds"),
                "llm_calls": a.get("chat_calls"),
                "input_tokens": a.get("prompt_tokens"),
                "output_tokens": a.get("completion_tokens"),
                "embedding_calls": a.get("embedding_calls"),
                "embedded_texts": a.get("embedding_inputs"),
                "guidelines": (res.get("aligned_memory") or {}).get("guidelines"),
            }
    return out


# -- output ------------------------------------------------------------------------------------


def fmt(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| data set | judge | n | accuracy | κ | weighted κ | CCC | MAE | failed | "
        "judge s/case | judge tokens/case |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ds in results:
        for variant, r in ds["reports"].items():
            n = r["n"] or 1
            lines.append(
                f"| {ds['dataset']} | {variant} | {r['n']} | {fmt(r['strict_accuracy'])} | "
                f"{fmt(r['kappa'])} | {fmt(r['weighted_kappa'])} | {fmt(r['ccc'])} | "
                f"{fmt(r['mae'])} | {r['n'] - r['n_scored']} | {r['seconds'] / n:.1f} | "
                f"{(r['usage']['input_tokens'] + r['usage']['output_tokens']) / n:.0f} |"
            )
    lines += [
        "",
        "| data set | aligner | seconds | LLM calls | tokens | embedding calls | guidelines |",
        "|---|---|---|---|---|---|---|",
    ]
    for ds in results:
        for who, a in (("ours", ds.get("align")), ("MLflow", ds.get("mlflow_align"))):
            if not a:
                continue
            tokens = (a.get("input_tokens") or 0) + (a.get("output_tokens") or 0)
            lines.append(
                f"| {ds['dataset']} | {who} | {fmt(a.get('seconds'), 1)} | {a.get('llm_calls')} | "
                f"{tokens} | {a.get('embedding_calls')} | {len(a.get('guidelines') or [])} |"
            )
    lines += [
        "",
        "| data set | judge | annotated cases | humans' α | humans' pairwise agreement | "
        "judge–annotator agreement | α with the judge as one more annotator |",
        "|---|---|---|---|---|---|---|",
    ]
    for ds in results:
        for variant, r in ds["reports"].items():
            ia = r.get("inter_annotator")
            if not ia:
                continue
            lines.append(
                f"| {ds['dataset']} | {variant} | {ia['n_cases']} | "
                f"{fmt(ia['krippendorff_alpha'])} ({ia['level']}) | "
                f"{fmt(ia['pairwise_agreement'])} | {fmt(ia['judge_annotator_agreement'])} | "
                f"{fmt(ia['alpha_with_judge'])} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = [v for v in (*VARIANTS, "mlflow_unaligned", "mlflow_memalign")
                if any(v in ds["reports"] for ds in results)]  # fmt: skip
    fig, axes = plt.subplots(1, len(results), figsize=(4.2 * len(results), 4), squeeze=False)
    for ax, ds in zip(axes[0], results, strict=True):
        reps = [ds["reports"].get(v) for v in variants]
        accs = [(r or {}).get("strict_accuracy") or 0.0 for r in reps]
        bars = ax.bar(range(len(variants)), accs, color=[f"C{i}" for i in range(len(variants))])
        texts = [f"{a:.2f}" if r else "not run" for a, r in zip(accs, reps, strict=True)]
        ax.bar_label(bars, labels=texts, fontsize=7)
        ax.set_xticks(range(len(variants)), variants, rotation=55, ha="right", fontsize=8)
        n = (ds["reports"].get("unaligned") or {}).get("n")
        ax.set_title(f"{ds['dataset']} (test n={n}, train {len(ds['train_ids'])})", fontsize=9)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("accuracy (failures count as wrong)")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--datasets", default="feedbackqa,prometheus,halubench,pandalm")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--n-train", type=int, default=8)
    ap.add_argument("--n-test", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-case-chars", type=int, default=1000)
    ap.add_argument("--max-field-chars", type=int, default=700)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--episode-max-chars", type=int, default=500)
    ap.add_argument(
        "--embed-max-chars", type=int, default=500,
        help="characters embedded per case: MiniLM's server takes 256 tokens (prometheus rubrics "
        "run at ~2.5 characters a token)",
    )  # fmt: skip
    ap.add_argument("--reflect-batch-size", type=int, default=8)
    ap.add_argument("--max-concurrency", type=int, default=2)
    add_model_args(ap, judge_max_tokens=256)
    ap.add_argument("--mlflow", action="store_true", help="also run MLflow's MemAlignOptimizer")
    ap.add_argument("--mlflow-python", default=str(ROOT / ".venv-mlflow" / "bin" / "python"))
    ap.add_argument(
        "--proxy", default=None,
        help="a running counting proxy for MLflow; default: start our own on --proxy-port",
    )  # fmt: skip
    ap.add_argument("--proxy-port", type=int, default=8015)
    ap.add_argument("--mlflow-runner", default=str(MLFLOW_DIR / "run_mlflow_memalign.py"))
    ap.add_argument("--proxy-script", default=str(MLFLOW_DIR / "proxy.py"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "side_by_side.json"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "img" / "side_by_side.png"))
    args = ap.parse_args(argv)
    args.variants = [v for v in args.variants.split(",") if v]

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    models = build_models(args)
    workdir = Path(tempfile.mkdtemp(prefix="side_by_side_"))
    proxy = None
    if args.mlflow and args.proxy is None:
        # Our own proxy: its counters see only this run's MLflow traffic.
        proxy = start_proxy(args, Path(args.proxy_script), workdir)
    results: list[dict[str, Any]] = []
    started = time.perf_counter()
    for name in [d for d in args.datasets.split(",") if d]:
        results.append(run_dataset(args, name, models, workdir))
        payload = {
            "argv": sys.argv,
            "package": str(Path(langchain_memalign.__file__).parent),
            "config": dict(vars(args)),
            "seconds": round(time.perf_counter() - started, 1),
            "results": results,
        }
        Path(args.out).write_text(json.dumps(payload, indent=2, default=str), encoding="utf-8")
        Path(args.out).with_suffix(".md").write_text(markdown(results), encoding="utf-8")
        plot(results, args.plot)
        log(f"wrote {args.out} ({len(results)} data sets)")
    if proxy is not None:
        proxy.terminate()
        proxy.wait(timeout=10)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
