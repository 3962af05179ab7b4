"""A tiny OpenAI-compatible server for the replay check (``benchmarks/replay_tools.py``): it
counts each prompt's tokens with the byte tokenizer the replay tools were given, appends the
count to a file, and answers with one token. Runs in the replay tools' scratch environment
(``tokenizers``), on 127.0.0.1 only.

    python server.py PORT COUNTS.jsonl TOKENIZER.json
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tokenizers import Tokenizer

PORT, COUNTS, TOKENIZER = int(sys.argv[1]), sys.argv[2], sys.argv[3]
TOKENS = Tokenizer.from_file(TOKENIZER)
OUT = open(COUNTS, "a")  # noqa: SIM115 - the server's lifetime


def prompt_tokens(request: dict) -> int:
    if "messages" in request:
        parts = [
            m["content"] if isinstance(m["content"], str)
            else "".join(p.get("text", "") for p in m["content"])
            for m in request["messages"]
        ]  # fmt: skip
        return sum(len(TOKENS.encode(p).ids) for p in parts)
    prompt = request.get("prompt", "")
    return len(TOKENS.encode(prompt).ids) if isinstance(prompt, str) else len(prompt)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._json({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self) -> None:  # noqa: N802
        size = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(size) or b"{}")
        count = prompt_tokens(request)
        OUT.write(json.dumps({"path": self.path, "prompt_tokens": count}) + "\n")
        OUT.flush()
        usage = {"prompt_tokens": count, "completion_tokens": 1, "total_tokens": count + 1}
        choice = {"index": 0, "text": "a", "message": {"role": "assistant", "content": "a"}}
        head = {"id": "x", "object": "text_completion", "created": int(time.time()),
                "model": "tiny"}  # fmt: skip
        if not request.get("stream"):
            self._json({**head, "choices": [{**choice, "finish_reason": "length"}], "usage": usage})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        first = {**head, "choices": [{"index": 0, "text": "a", "delta": {"content": "a"}}]}
        end = {"index": 0, "text": "", "delta": {}, "finish_reason": "length"}
        last = {**head, "choices": [end], "usage": usage}
        self.wfile.write(f"data: {json.dumps(first)}\n\ndata: {json.dumps(last)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
