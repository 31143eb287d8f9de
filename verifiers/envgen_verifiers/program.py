"""Program verifiers: a task-specific Python function over the final answer and the recorded tool calls.

The function lives in a file of the pack's hidden/ (default ``verify.py``), so the agent never sees it.
It is called with whichever of these keyword arguments it declares:

    answer: str           the agent's final message
    calls: list[dict]     the episode's tool calls: {"tool", "args", "ok", "content"}
    params: dict          the task's verifier.args["params"]
    ctx: Context          work_dir, hidden_dir, and db(path) for a read-only SQLite connection

and returns a bool, a number in [0, 1], or (reward, details).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sqlite3
import sys


class Context:
    def __init__(self, work_dir: str, hidden_dir: str | None):
        self.work_dir, self.hidden_dir = work_dir, hidden_dir

    def db(self, path: str) -> sqlite3.Connection:
        """A read-only connection to a database under the work dir (the state the agent left)."""
        return sqlite3.connect(f"file:{os.path.join(self.work_dir, path)}?mode=ro", uri=True)


def _load(path: str):
    name = f"_envgen_verify_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def check(args: dict, *, answer: str, calls: list, work_dir: str, hidden_dir: str | None, **_) -> dict:
    """args: file="verify.py" (in hidden/), function="verify", params={}."""
    if not hidden_dir:
        raise ValueError("program verifier needs the pack's hidden/ directory")
    path = os.path.normpath(os.path.join(hidden_dir, args.get("file", "verify.py")))
    if not path.startswith(os.path.normpath(hidden_dir) + os.sep):
        raise ValueError(f"verifier file {args.get('file')!r} leaves hidden/")
    fn = getattr(_load(path), args.get("function", "verify"))
    offered = {"answer": answer, "calls": calls, "params": args.get("params", {}), "ctx": Context(work_dir, hidden_dir)}
    wanted = inspect.signature(fn).parameters
    out = fn(**{k: v for k, v in offered.items() if k in wanted})
    if isinstance(out, tuple):
        reward, details = out
    elif isinstance(out, dict):
        reward, details = out["reward"], out.get("details", {})
    else:
        reward, details = out, {}
    return {"reward": float(reward), "details": dict(details)}
