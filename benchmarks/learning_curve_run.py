"""The learning curve of a MemAlign judge on one shared data set, against the local servers.

    .venv/bin/python benchmarks/learning_curve_run.py --dataset feedbackqa \
        --n-train 10 --n-test 8 --shards 0,2,5,10 --seeds 0,1 \
        --out benchmarks/results/learning_curve_feedbackqa.json \
        --plot docs/img/learning_curve_feedbackqa.png

Protocol: `langchain_memalign.evaluation.learning_curve.learning_curve` (stratified split per seed,
growing shards aligned incrementally, agreement on the seen feedback and on the test set
after each stage, alignment seconds / LLM calls / tokens counted with a callback).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from side_by_side import FILES, ROOT, build_models

from langchain_memalign import MemAlignJudge
from shared_data import dataset_spec, load_jsonl
from langchain_memalign.evaluation.learning_curve import StageResult, learning_curve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--dataset", default="feedbackqa")
    ap.add_argument("--n-train", type=int, default=10)
    ap.add_argument("--n-test", type=int, default=10)
    ap.add_argument("--shards", default="0,2,5,10")
    ap.add_argument("--seeds", default="0,1")
    ap.add_argument("--max-case-chars", type=int, default=1000)
    ap.add_argument("--max-field-chars", type=int, default=700)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--episode-max-chars", type=int, default=500)
    ap.add_argument("--embed-max-chars", type=int, default=500)
    ap.add_argument("--judge-max-tokens", type=int, default=256)
    ap.add_argument("--reflect-max-tokens", type=int, default=768)
    ap.add_argument("--max-concurrency", type=int, default=2)
    ap.add_argument("--no-seen", action="store_true", help="skip agreement on seen feedback")
    ap.add_argument(
        "--reuse-expert-verdicts", action="store_true",
        help="let the judge answer seen cases with the expert's verdict (seen accuracy is then "
        "1.0 by construction, so by default the model judges them too)",
    )  # fmt: skip
    ap.add_argument("--chat-url", default="http://127.0.0.1:8013/v1")
    ap.add_argument("--emb-url", default="http://127.0.0.1:8012/v1")
    ap.add_argument("--chat-model", default="local")
    ap.add_argument("--embedding-model", default="minilm")
    ap.add_argument("--out", required=True)
    ap.add_argument("--plot", required=True)
    args = ap.parse_args(argv)

    judge_llm, reflect_llm, emb = build_models(args)
    spec = dataset_spec(args.dataset)
    data = load_jsonl(
        Path(args.data_dir) / FILES[args.dataset],
        max_case_chars=args.max_case_chars,
        max_field_chars=args.max_field_chars,
    )

    def make_judge() -> MemAlignJudge:
        return MemAlignJudge(
            name=args.dataset, instructions=spec.instructions, model=judge_llm,
            embeddings=emb, scale=spec.scale, reflection_model=reflect_llm, k=args.k,
            episode_max_chars=args.episode_max_chars, embed_max_chars=args.embed_max_chars,
            reuse_expert_verdicts=args.reuse_expert_verdicts,
        )  # fmt: skip

    def progress(stage: StageResult) -> None:
        print(
            f"[{time.strftime('%H:%M:%S')}] seed {stage.seed} n={stage.n_feedback}: "
            f"test acc {stage.test.get('accuracy')} seen acc {(stage.seen or {}).get('accuracy')} "
            f"align {stage.align_seconds:.1f}s {stage.align_usage.llm_calls} calls",
            file=sys.stderr,
            flush=True,
        )

    curve = learning_curve(
        make_judge,
        data,
        n_train=args.n_train,
        n_test=args.n_test,
        shards=[int(s) for s in args.shards.split(",")],
        seeds=[int(s) for s in args.seeds.split(",")],
        ordinal=spec.ordinal,
        evaluate_seen=not args.no_seen,
        max_concurrency=args.max_concurrency,
        on_stage=progress,
    )
    curve.config = {"argv": sys.argv, **{k: v for k, v in vars(args).items() if k != "out"}}
    curve.save(args.out)
    curve.plot(args.plot, metric="accuracy")
    if spec.ordinal:
        # Exact accuracy hides how far off an ordinal rating is; weighted kappa shows it.
        kappa_png = Path(args.plot).with_name(Path(args.plot).stem + "_weighted_kappa.png")
        curve.plot(kappa_png, metric="weighted_kappa")
    for split in ("test", "seen"):
        print(split, {n: round(v, 3) for n, v in curve.mean("accuracy", split).items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
