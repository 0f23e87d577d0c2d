"""HTTP requests per LangSmith sync on a project with 5,000 reviews (offline).

Seeds the local LangSmith test server (`tests/langsmith_server.py`, driven by the real
`langsmith.Client`) with a project of N runs, one human review each, spread over the
past days; syncs a judge once (a full listing), then measures the syncs a long-running
process makes after it:

- `nothing new`: an incremental sync when nothing changed;
- `1 new + 1 edited`: one review added and one edited since the last sync;
- `full`: a reconciling sync (`sync(full=True)`), which lists everything; it runs every
  `reconcile_every` syncs and is what every sync cost before issue 12;

and counts the HTTP requests each one sends (all endpoints, `/info` included). The judge
runs on the test suite's scripted model and hash embeddings: no LLM, no network.

    .venv/bin/python benchmarks/langsmith_sync_requests.py --reviews 5000
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("LANGSMITH_DISABLE_RUN_COMPRESSION", "true")

from fakes import HashEmbeddings, RoleResponder, ScriptedChatModel  # noqa: E402
from langsmith import Client  # noqa: E402
from langsmith_server import LangSmithTestServer  # noqa: E402

from langchain_memalign import MemAlignJudge  # noqa: E402
from langchain_memalign.langsmith import LangSmithFeedbackSource  # noqa: E402

KEY = "helpfulness"


def _requests(server: LangSmithTestServer, since: int) -> dict[str, Any]:
    with server.lock:
        made = server.requests[since:]
    by_path = Counter(f"{r.method} {r.path}" for r in made)
    return {"requests": len(made), "by_endpoint": dict(sorted(by_path.items()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews", type=int, default=5000)
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args()

    with LangSmithTestServer() as server:
        start = dt.datetime.now(dt.UTC) - dt.timedelta(days=7)
        project = server.add_project("prod", start_time=start.isoformat())
        runs = []
        for i in range(args.reviews):
            at = (start + dt.timedelta(minutes=2 * i)).isoformat()
            run = server.add_run(
                session_id=project["id"],
                start_time=at,
                inputs={"question": f"question {i}"},
                outputs={"answer": f"answer {i}"},
            )
            runs.append(run)
            server.add_feedback(
                run["id"],
                KEY,
                score=i % 2,
                comment=f"reason {i % 7}",
                user=f"reviewer {i % 5}",
                created_at=at,
                modified_at=at,
                feedback_source={"type": "app"},
            )
        client = Client(api_url=server.url, api_key="test", auto_batch_tracing=False)
        judge = MemAlignJudge(
            KEY,
            "Helpful?\n{inputs}\n{outputs}",
            ScriptedChatModel(responder=RoleResponder()),
            HashEmbeddings(),
        )
        source = LangSmithFeedbackSource(client, project="prod", batch_size=500)
        results: dict[str, Any] = {"reviews": args.reviews}

        mark, began = len(server.requests), time.perf_counter()
        first = source.sync(judge)
        results["first sync"] = {
            **_requests(server, mark),
            "aligned": len(first.aligned),
            "seconds": round(time.perf_counter() - began, 1),
        }

        mark = len(server.requests)
        quiet = source.sync(judge)
        results["nothing new"] = {**_requests(server, mark), "aligned": len(quiet.aligned)}

        new_run = server.add_run(session_id=project["id"], inputs={"question": "new"})
        server.add_feedback(
            new_run["id"], KEY, score=0, user="reviewer 9", feedback_source={"type": "app"}
        )
        client.update_feedback(next(iter(server.feedback)), score=1, comment="Edited after review.")
        mark = len(server.requests)
        changed = source.sync(judge)
        results["1 new + 1 edited"] = {
            **_requests(server, mark),
            "aligned": len(changed.aligned),
        }

        mark = len(server.requests)
        full = source.sync(judge, full=True)
        results["full"] = {**_requests(server, mark), "aligned": len(full.aligned)}
        client.close(timeout=5)

    print(json.dumps(results, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
