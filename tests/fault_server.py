"""A small OpenAI-style chat server of the tests' own that misbehaves on purpose.

It answers /v1/chat/completions and /v1/models. At set rates it injects 500s
(whose body echoes the request's Authorization header, the worst case for a
leaked key), 429s, answers slower than the client's timeout, and dropped
connections. It counts every fault it injects, so a test can check that the
trace shows each one. Requests with max_tokens == 1 (the runner's
reachability probe) are never faulted. A prompt containing ALWAYS_FAIL always
gets a 500, so a test can make a rollout exhaust its retries deterministically.

Answers: a reflection prompt (it mentions "hint") gets a fenced hint; any
other prompt gets one topic word, chosen at random.

`SilentServer` is the other fault: it accepts connections and never answers.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LABELS = ("sports", "food", "weather", "music")


def _is_reflection(text: str) -> bool:
    # The topics task's prompt has "Sentence:"; its reflection prompt does not.
    text = text.lower()
    return "hint" in text and "sentence:" not in text


class FaultServer:
    def __init__(
        self,
        *,
        error_rate: float = 0.0,
        rate_limit_rate: float = 0.0,
        slow_rate: float = 0.0,
        drop_rate: float = 0.0,
        slow_seconds: float = 1.5,
        delay: float = 0.0,
        fail_reflections: bool = False,
        seed: int = 0,
    ):
        self.fail_reflections = fail_reflections  # every reflection prompt gets a 500
        self.delay = delay  # seconds added to every answer, to make a run last
        self.rates = [
            ("500", error_rate),
            ("429", rate_limit_rate),
            ("slow", slow_rate),
            ("drop", drop_rate),
        ]
        self.slow_seconds = slow_seconds
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.faults: Counter[str] = Counter()
        self.served = 0
        self._served_cond = threading.Condition(self.lock)
        self.seen_auth: list[str] = []
        handler = self._handler()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def wait_served(self, count: int, timeout: float = 120.0) -> bool:
        """Block until `count` requests were answered (a test's way to act mid-run)."""
        with self._served_cond:
            return self._served_cond.wait_for(lambda: self.served >= count, timeout)

    def _pick_fault(self, body: dict[str, Any]) -> str | None:
        if body.get("max_tokens") == 1:
            return None
        text = json.dumps(body.get("messages", []))
        with self.lock:
            if "ALWAYS_FAIL" in text or (self.fail_reflections and _is_reflection(text)):
                self.faults["500"] += 1
                return "500"
            roll = self.rng.random()
            edge = 0.0
            for name, rate in self.rates:
                edge += rate
                if roll < edge:
                    self.faults[name] += 1
                    return name
            return None

    def _answer(self, body: dict[str, Any]) -> str:
        text = json.dumps(body.get("messages", [])).lower()
        with self.lock:
            label = self.rng.choice(LABELS)
            if _is_reflection(text):
                hint = f"Words like goal mean sports; {label} words mean {label}."
                return f"Here it is:\n```\n{hint}\n```"
            return label

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                try:
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out first: that was the point

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "fault", "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                auth = self.headers.get("Authorization", "")
                with server.lock:
                    server.seen_auth.append(auth)
                fault = server._pick_fault(body)
                if fault == "500":
                    # Echo the credentials: the runner must never let them through.
                    self._send(500, {"error": {"message": f"boom; you sent {auth}"}})
                    return
                if fault == "429":
                    self._send(429, {"error": {"message": "rate limited", "type": "rate_limit"}})
                    return
                if fault == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault == "slow":
                    time.sleep(server.slow_seconds)
                if server.delay:
                    time.sleep(server.delay)
                with server.lock:
                    server.served += 1
                    server._served_cond.notify_all()
                content = server._answer(body)
                self._send(
                    200,
                    {
                        "id": "chatcmpl-fault",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fault"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 20,
                            "completion_tokens": 3,
                            "total_tokens": 23,
                        },
                    },
                )

        return Handler


class SilentServer:
    """A TCP listener on 127.0.0.1 that accepts every connection and never sends a byte:
    a hung endpoint, or an address that is not the server it is taken for."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.held: list[socket.socket] = []  # open, so the client sees no close either
        self.thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed by __exit__
                return
            self.held.append(conn)

    def __enter__(self) -> SilentServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()
