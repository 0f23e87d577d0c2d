"""The record/replay proxy answers a replayed request as recorded and reports a changed one."""

from __future__ import annotations

import json
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from harness.replay_proxy import Recorder, serve


class _Counting(BaseHTTPRequestHandler):
    """An upstream whose answers differ on every call, as a batching server's may."""

    calls = 0

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).calls += 1
        data = json.dumps({"path": self.path, "call": type(self).calls}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _start(server: ThreadingHTTPServer) -> str:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def upstream() -> Iterator[str]:
    _Counting.calls = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    yield _start(server)
    server.shutdown()


def _post(base: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _proxy(recorder: Recorder) -> tuple[ThreadingHTTPServer, str]:
    server = serve(recorder, 0)
    return server, _start(server)


def test_a_replay_answers_as_recorded_and_a_changed_request_is_a_miss(
    tmp_path: Path, upstream: str
) -> None:
    store, misses = tmp_path / "rec.jsonl", tmp_path / "misses.jsonl"
    server, base = _proxy(Recorder("record", str(store), None, upstream, upstream))
    chat = {"model": "local", "messages": [{"role": "user", "content": "hi"}]}
    _, first = _post(base, "/v1/chat/completions", chat)
    # The same request again, its keys in another order: the recorded answer, not a new one.
    _, again = _post(base, "/v1/chat/completions", dict(reversed(list(chat.items()))))
    _, emb = _post(base, "/v1/embeddings", {"input": ["hi"]})
    server.shutdown()
    assert again == first and _Counting.calls == 2
    assert emb["path"] == "/v1/embeddings"

    server, base = _proxy(Recorder("replay", str(store), str(misses), upstream, upstream))
    assert _post(base, "/v1/chat/completions", chat) == (200, first)
    changed = {**chat, "temperature": 0.5}
    status, _ = _post(base, "/v1/chat/completions", changed)
    with urllib.request.urlopen(base + "/stats") as resp:
        stats = json.loads(resp.read())
    server.shutdown()
    assert status == 500 and _Counting.calls == 2  # a replay never reaches the servers
    assert stats == {"hits": 1, "misses": 1, "recorded": 0}
    missed = [json.loads(line) for line in misses.read_text().splitlines()]
    assert [json.loads(m["body"])["temperature"] for m in missed] == [0.5]
