"""A stand-in for the local LM: an OpenAI-style chat server answering after a sleep.

    python standin.py PORT SECONDS

Each reply comes after SECONDS x a uniform draw in [0.5, 1.5]: to a reflection (a
request naming `new_instruction`, DSPy's instruction proposer) a JSON object with a new
instruction, to anything else DSPy's chat format with a topic drawn from the task's
four. stress.py --standin runs its compiles against two of these (task and reflection)
to interrupt many more of them than the local LM's time allows; the HTTP client, litellm,
DSPy and gepa are the real ones.
"""

from __future__ import annotations

import json
import random
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOPICS = ("sports", "food", "weather", "music")


def reply(asked: bytes) -> str:
    if b"new_instruction" in asked:
        return json.dumps({"new_instruction": f"Name the topic ({random.random():.6f})."})
    return f"[[ ## topic ## ]]\n{random.choice(TOPICS)}\n\n[[ ## completed ## ]]"


def handler(seconds: float) -> type[BaseHTTPRequestHandler]:
    class Chat(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            asked = self.rfile.read(int(self.headers.get("content-length", 0)))
            time.sleep(seconds * random.uniform(0.5, 1.5))
            message = {"role": "assistant", "content": reply(asked)}
            body = json.dumps(
                {
                    "id": "standin",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "smollm2",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
                }
            ).encode()
            try:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the compile was stopped while its call was answered

    return Chat


if __name__ == "__main__":
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    ThreadingHTTPServer(("127.0.0.1", port), handler(seconds)).serve_forever()
