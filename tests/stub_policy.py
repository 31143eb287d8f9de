"""An OpenAI-compatible endpoint whose model solves each task with a known probability.

Success is decided per rollout from the request's seed (the policy sends ``episode_seed * 1009 +
turn``), so tests and benchmarks can compute what a full k-rollout run decides. A solving rollout
replays the task's reference calls; a failing one answers "I could not do it." at once. ``latency``
adds a fixed delay per request, standing in for model time.
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def solves(episode_seed: int, p: float) -> bool:
    return random.Random((episode_seed * 1009) % (2**31)).random() < p


def stub_server(pack, probs: list[float], latency: float = 0.0) -> ThreadingHTTPServer:
    """Start the endpoint on 127.0.0.1 (task i of the pack solves with probability probs[i % len])."""
    by_prompt = {t.prompt[0].content: (t, probs[i % len(probs)]) for i, t in enumerate(pack.tasks)}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            msgs = body["messages"]
            task, p = by_prompt[next(m["content"] for m in msgs if m["role"] == "user")]
            turn = sum(m["role"] == "assistant" for m in msgs)
            base = (body["seed"] - turn) % (2**31)
            solve = random.Random(base).random() < p
            msg = {"role": "assistant", "content": "I could not do it."}
            if solve and turn < len(task.reference.calls):
                c = task.reference.calls[turn]
                msg = {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{turn}", "type": "function",
                     "function": {"name": c.tool, "arguments": json.dumps(c.args)}}]}
            elif solve:
                msg = {"role": "assistant", "content": task.reference.answer}
            if latency:
                time.sleep(latency)
            out = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}],
                              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv
