"""Counting reverse proxy: one OpenAI base URL for the local chat and embedding servers.

MLflow's judges, its MemAlign optimizer (through dspy) and litellm take a single OpenAI
base URL for chat and embeddings. This proxy listens on loopback only and forwards

    /v1/embeddings  -> http://127.0.0.1:8012   (MiniLM, llama.cpp server)
    everything else -> http://127.0.0.1:8013   (Qwen2.5-Coder-1.5B, llama.cpp server)

and counts what passes through. Standard library only.

    python proxy.py --port 8014 [--stats-file stats.json] [--dump-dir DIR --dump-max 200]

    GET  /stats        -> JSON counters (see `Stats.snapshot`)
    POST /stats/reset  -> zero the counters, returns the snapshot taken before the reset

Embedding inputs are truncated to fit the embedding server: it runs MiniLM with a
256-token context per slot (CLS and SEP included) and answers HTTP 400 for longer
inputs, where sentence-transformers would silently truncate to 256 word pieces. Each
input string is measured with the server's own `/tokenize` and cut (by characters,
proportionally, then by 5 % steps) until it fits `--emb-max-tokens` (default 254,
0 disables). These `/tokenize` calls are counted apart (`tokenize_calls`) and are not
embedding calls.

Bounds: loopback only (refuses to bind elsewhere), request bodies up to --max-body bytes
(default 8 MiB), upstream responses up to 64 MiB, at most --max-concurrent requests
forwarded at once (default 8; further ones wait), upstream timeout --timeout seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_RESPONSE = 64 * 1024 * 1024
HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "host",
    "accept-encoding",
}


class Stats:
    """Thread-safe counters of forwarded traffic."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> dict[str, Any]:
        with getattr(self, "_lock", threading.Lock()):
            old = self.snapshot(locked=True) if hasattr(self, "started") else {}
            self.started = time.time()
            self.chat_calls = 0
            self.chat_errors = 0
            self.chat_seconds = 0.0
            self.prompt_tokens = 0
            self.completion_tokens = 0
            self.cached_prompt_tokens = 0
            self.embedding_calls = 0
            self.embedding_errors = 0
            self.embedding_inputs = 0
            self.embedding_seconds = 0.0
            self.embedding_prompt_tokens = 0
            self.embedding_truncated_inputs = 0
            self.tokenize_calls = 0
            self.other_calls = 0
            self.by_path: dict[str, int] = {}
            return old

    def snapshot(self, locked: bool = False) -> dict[str, Any]:
        def build() -> dict[str, Any]:
            return {
                "since_unix": self.started,
                "chat_calls": self.chat_calls,
                "chat_errors": self.chat_errors,
                "chat_seconds": round(self.chat_seconds, 3),
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cached_prompt_tokens": self.cached_prompt_tokens,
                "embedding_calls": self.embedding_calls,
                "embedding_errors": self.embedding_errors,
                "embedding_inputs": self.embedding_inputs,
                "embedding_seconds": round(self.embedding_seconds, 3),
                "embedding_prompt_tokens": self.embedding_prompt_tokens,
                "embedding_truncated_inputs": self.embedding_truncated_inputs,
                "tokenize_calls": self.tokenize_calls,
                "other_calls": self.other_calls,
                "by_path": dict(self.by_path),
            }

        if locked:
            return build()
        with self._lock:
            return build()


class Proxy:
    def __init__(self, chat: tuple[str, int], emb: tuple[str, int], args: argparse.Namespace):
        self.chat = chat
        self.emb = emb
        self.timeout = args.timeout
        self.max_body = args.max_body
        self.emb_max_tokens = args.emb_max_tokens
        self.chat_max_tokens = args.chat_max_tokens
        self.stats_file = args.stats_file
        self.dump_dir = args.dump_dir
        self.dump_max = args.dump_max
        self._dumped = 0
        self.stats = Stats()
        self.slots = threading.BoundedSemaphore(args.max_concurrent)
        self._file_lock = threading.Lock()

    # -- upstream helpers -------------------------------------------------------------
    def request(
        self, target: tuple[str, int], method: str, path: str, body: bytes | None, headers: dict
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(target[0], target[1], timeout=self.timeout)
        try:
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read(MAX_RESPONSE + 1)
            if len(data) > MAX_RESPONSE:
                raise ValueError("upstream response too large")
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    def count_tokens(self, text: str) -> int:
        body = json.dumps({"content": text, "add_special": False}).encode()
        with self.stats._lock:
            self.stats.tokenize_calls += 1
        status, _, data = self.request(
            self.emb, "POST", "/tokenize", body, {"Content-Type": "application/json"}
        )
        if status != 200:
            raise ValueError(f"/tokenize answered {status}")
        return len(json.loads(data)["tokens"])

    def fit(self, text: str) -> tuple[str, bool]:
        limit = self.emb_max_tokens
        # MiniLM word pieces are at least one character each, so short texts always fit.
        if limit <= 0 or len(text) <= limit:
            return text, False
        n = self.count_tokens(text)
        if n <= limit:
            return text, False
        cut = text[: max(1, int(len(text) * limit / n))]
        while len(cut) > 1 and self.count_tokens(cut) > limit:
            cut = cut[: max(1, int(len(cut) * 0.95))]
        return cut, True

    def cap_reply(self, body: bytes) -> bytes:
        """A chat request with its reply capped at --chat-max-tokens.

        A small model can loop inside a JSON string until the server's own cap: bounding
        the reply keeps a run's length predictable, and a cut reply is malformed output,
        which the baseline handles as it would from any provider.
        """
        payload = json.loads(body)
        asked = payload.get("max_completion_tokens") or payload.get("max_tokens")
        cap = self.chat_max_tokens if not asked else min(int(asked), self.chat_max_tokens)
        payload.pop("max_completion_tokens", None)
        payload["max_tokens"] = cap
        return json.dumps(payload).encode()

    def dump(self, path: str, request: bytes, status: int, response: bytes) -> None:
        """Keep the first --dump-max request/response pairs as JSON files (for reading)."""
        if not self.dump_dir:
            return
        with self._file_lock:
            if self._dumped >= self.dump_max:
                return
            self._dumped += 1
            n = self._dumped

        def as_json(b: bytes) -> Any:
            try:
                return json.loads(b)
            except Exception:
                return b[:10000].decode("utf-8", "replace")

        req = as_json(request)
        resp = as_json(response)
        if isinstance(resp, dict):  # embeddings are long and unreadable: keep the shape only
            for d in resp.get("data") or []:
                if isinstance(d, dict) and isinstance(d.get("embedding"), list):
                    d["embedding"] = f"<{len(d['embedding'])} floats>"
        os.makedirs(self.dump_dir, exist_ok=True)
        name = os.path.join(self.dump_dir, f"{n:04d}_{path.strip('/').replace('/', '_')}.json")
        with open(name, "w") as fh:
            json.dump(
                {"path": path, "request": req, "status": status, "response": resp}, fh, indent=1
            )

    def write_stats_file(self) -> None:
        if not self.stats_file:
            return
        snap = self.stats.snapshot()
        with self._file_lock:
            tmp = self.stats_file + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(snap, fh, indent=1)
            os.replace(tmp, self.stats_file)


def make_handler(proxy: Proxy):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "mlflow-baseline-proxy/1"

        def log_message(self, fmt: str, *a: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] | None = None):
            self.send_response(status)
            sent_ct = False
            for k, v in headers or []:
                if k.lower() in HOP_BY_HOP:
                    continue
                sent_ct |= k.lower() == "content-type"
                self.send_header(k, v)
            if not sent_ct:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj).encode())

        def _read_body(self) -> bytes | None:
            n = int(self.headers.get("Content-Length") or 0)
            if n > proxy.max_body:
                self._json(413, {"error": f"body over {proxy.max_body} bytes"})
                return None
            return self.rfile.read(n) if n else b""

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/stats":
                self._json(200, proxy.stats.snapshot())
                return
            self._forward("GET", b"")

        def do_POST(self) -> None:
            body = self._read_body()
            if body is None:
                return
            if self.path.rstrip("/") == "/stats/reset":
                old = proxy.stats.reset()
                proxy.write_stats_file()
                self._json(200, old)
                return
            self._forward("POST", body)

        def _forward(self, method: str, body: bytes) -> None:
            path = self.path
            bare = path.split("?", 1)[0].rstrip("/")
            is_emb = bare.endswith("/embeddings")
            is_chat = bare.endswith("/chat/completions") or bare.endswith("/completions")
            target = proxy.emb if is_emb else proxy.chat
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            n_inputs = 0
            truncated = 0
            with proxy.slots:
                t0 = time.perf_counter()
                try:
                    if is_emb and body:
                        payload = json.loads(body)
                        inp = payload.get("input")
                        items = [inp] if isinstance(inp, str) else list(inp or [])
                        n_inputs = len(items)
                        fixed = []
                        for item in items:
                            if isinstance(item, str):
                                item, cut = proxy.fit(item)
                                truncated += cut
                            fixed.append(item)
                        payload["input"] = fixed if not isinstance(inp, str) else fixed[0]
                        body = json.dumps(payload).encode()
                    if is_chat and body and proxy.chat_max_tokens > 0:
                        body = proxy.cap_reply(body)
                    headers["Content-Length"] = str(len(body))
                    status, rheaders, data = proxy.request(
                        target, method, path, body if method != "GET" else None, headers
                    )
                except Exception as e:  # upstream down, timeout, bad JSON
                    status, rheaders = 502, []
                    data = json.dumps({"error": {"message": f"proxy: {e!r}"}}).encode()
                dt = time.perf_counter() - t0

            usage: dict[str, Any] = {}
            if status == 200:
                try:
                    usage = json.loads(data).get("usage") or {}
                except Exception:
                    usage = {}
            st = proxy.stats
            with st._lock:
                st.by_path[bare] = st.by_path.get(bare, 0) + 1
                if is_emb:
                    st.embedding_calls += 1
                    st.embedding_errors += status != 200
                    st.embedding_inputs += n_inputs
                    st.embedding_truncated_inputs += truncated
                    st.embedding_seconds += dt
                    st.embedding_prompt_tokens += int(usage.get("prompt_tokens") or 0)
                elif is_chat:
                    st.chat_calls += 1
                    st.chat_errors += status != 200
                    st.chat_seconds += dt
                    st.prompt_tokens += int(usage.get("prompt_tokens") or 0)
                    st.completion_tokens += int(usage.get("completion_tokens") or 0)
                    details = usage.get("prompt_tokens_details") or {}
                    st.cached_prompt_tokens += int(details.get("cached_tokens") or 0)
                else:
                    st.other_calls += 1
            proxy.write_stats_file()
            proxy.dump(bare, body, status, data)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._send(status, data, rheaders)

        do_PUT = do_DELETE = lambda self: self._json(405, {"error": "method not allowed"})

    return Handler


def parse_hostport(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    host, _, port = rest.rpartition(":")
    if host not in LOOPBACK:
        raise SystemExit(f"upstream {url} is not on loopback")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--port", type=int, default=8014)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--chat", default="http://127.0.0.1:8013")
    ap.add_argument("--embeddings", default="http://127.0.0.1:8012")
    ap.add_argument("--emb-max-tokens", type=int, default=254)
    ap.add_argument(
        "--chat-max-tokens", type=int, default=0, help="cap every chat reply (0: the server's)"
    )
    ap.add_argument("--stats-file", default=None)
    ap.add_argument("--dump-dir", default=None, help="write the first --dump-max exchanges here")
    ap.add_argument("--dump-max", type=int, default=200)
    ap.add_argument("--max-body", type=int, default=8 * 1024 * 1024)
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args(argv)
    if args.host not in LOOPBACK:
        raise SystemExit("refusing to listen outside loopback")
    proxy = Proxy(parse_hostport(args.chat), parse_hostport(args.embeddings), args)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(proxy))
    server.daemon_threads = True
    proxy.write_stats_file()
    print(
        f"proxy on http://{args.host}:{args.port}/v1 -> chat {args.chat}, "
        f"embeddings {args.embeddings}",
        file=sys.stderr,
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
