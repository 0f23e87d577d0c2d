"""Record and replay the model servers' answers: does a commit send the same requests?

The local chat server batches its two slots, so the same alignment differs between runs
and two commits cannot be compared by their scores. Recorded once, the answers make a run
deterministic: a commit replayed against a recording sends exactly the recorded requests
(0 misses) or it changed a prompt, a parameter or a path on that trajectory. Standard
library only.

    python benchmarks/harness/replay_proxy.py --mode record --store rec.jsonl &
    python benchmarks/rules.py --domains medication --repeats 1 \\
        --chat-url http://127.0.0.1:8020/v1 --emb-url http://127.0.0.1:8020/v1 --out a.json
    # stop it, then at the other commit:
    python benchmarks/harness/replay_proxy.py --mode replay --store rec.jsonl \\
        --misses misses.jsonl &
    python benchmarks/rules.py ... --out b.json; curl -s 127.0.0.1:8020/stats

A request is keyed by its path and its JSON body with sorted keys. Record mode forwards
`/v1/embeddings` to `--embeddings` and everything else to `--chat`, stores each answer
with status 200, and answers a request already stored from the store (so identical
requests within a run get identical answers). Replay mode answers only from the store; a
request it does not hold is a miss: HTTP 500, written to `--misses` with its body.
`GET /stats` gives the hits, misses and recorded answers.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit


def request_key(path: str, body: bytes) -> tuple[str, str]:
    """The store's key for a request and its canonical body (JSON with sorted keys)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True)
    except ValueError:
        canonical = body.decode("utf-8", "replace")
    return hashlib.sha256(f"{path}\n{canonical}".encode()).hexdigest(), canonical


class Recorder:
    """The store (a JSONL file, appended to) and the counters."""

    def __init__(self, mode: str, store: str, misses: str | None, chat: str, emb: str) -> None:
        self.mode, self.store_path, self.misses_path = mode, store, misses
        self.upstream = {"chat": urlsplit(chat), "embeddings": urlsplit(emb)}
        self.lock = threading.Lock()
        self.answers: dict[str, dict[str, Any]] = {}
        self.stats = {"hits": 0, "misses": 0, "recorded": 0}
        try:
            with open(store, encoding="utf-8") as f:
                for line in f:
                    row = json.loads(line)
                    self.answers[row["key"]] = row
        except FileNotFoundError:
            pass

    def answer(self, path: str, body: bytes) -> tuple[int, bytes]:
        key, canonical = request_key(path, body)
        with self.lock:
            found = self.answers.get(key)
            if found is not None:
                self.stats["hits"] += 1
                return int(found["status"]), found["body"].encode()
            if self.mode == "replay":
                self.stats["misses"] += 1
                if self.misses_path:
                    with open(self.misses_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"path": path, "body": canonical}) + "\n")
                return 500, b'{"error": {"message": "replay: request not recorded"}}'
        status, data = self._forward(path, body)
        if status == 200:
            row = {"key": key, "status": status, "body": data.decode("utf-8"), "path": path}
            with self.lock:
                if key not in self.answers:  # the first answer of a request is the one kept
                    self.answers[key] = row
                    self.stats["recorded"] += 1
                    with open(self.store_path, "a", encoding="utf-8") as f:
                        f.write(json.dumps(row) + "\n")
                data = self.answers[key]["body"].encode()
        return status, data

    def _forward(self, path: str, body: bytes) -> tuple[int, bytes]:
        up = self.upstream["embeddings" if path.rstrip("/").endswith("embeddings") else "chat"]
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=900)
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()


def serve(recorder: Recorder, port: int) -> ThreadingHTTPServer:
    """A loopback server answering through `recorder` (call `serve_forever` on it)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, data: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            with recorder.lock:
                self._send(200, json.dumps(recorder.stats).encode())

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self._send(*recorder.answer(self.path, body))

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["record", "replay"], required=True)
    ap.add_argument("--store", required=True, help="the recording (JSONL)")
    ap.add_argument("--misses", default=None, help="replay: write the requests not recorded")
    ap.add_argument("--port", type=int, default=8020)
    ap.add_argument("--chat", default="http://127.0.0.1:8013")
    ap.add_argument("--embeddings", default="http://127.0.0.1:8012")
    a = ap.parse_args()
    serve(Recorder(a.mode, a.store, a.misses, a.chat, a.embeddings), a.port).serve_forever()


if __name__ == "__main__":
    main()
