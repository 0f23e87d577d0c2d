"""A tiny OpenAI-compatible HTTP server for offline tests of the json_schema route.

It answers `/v1/chat/completions` with scripted replies (like llama.cpp, it
honours `response_format` but ignores forced tool calls) and `/v1/embeddings`
with deterministic vectors, and records every request body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


class OpenAICompatibleServer:
    def __init__(self, reply: Callable[[dict[str, Any]], str]) -> None:
        self.reply = reply
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "body": body})
                if self.path.endswith("/embeddings"):
                    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                    data = [
                        {
                            "object": "embedding",
                            "index": i,
                            "embedding": np.random.default_rng(len(t)).random(8).tolist(),
                        }
                        for i, t in enumerate(texts)
                    ]
                    out: dict[str, Any] = {
                        "object": "list",
                        "data": data,
                        "model": body["model"],
                        "usage": {"prompt_tokens": 1, "total_tokens": 1},
                    }
                else:
                    out = {
                        "id": "chatcmpl-1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": outer.reply(body)},
                            }
                        ],
                        "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
                    }
                data_bytes = json.dumps(out).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data_bytes)))
                self.end_headers()
                self.wfile.write(data_bytes)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> OpenAICompatibleServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
