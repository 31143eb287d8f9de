"""Shared fixtures: a tiny hand-written pack whose tools exercise every runtime path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from envgen import pack as packmod
from envgen.sandbox.local import describe_tools

TOOLS = '''
"""Tools of the tiny test pack."""
import json, os, sqlite3, time


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return a + b


def put(key: str, value: str) -> str:
    """Store a value in the pack's database.

    Args:
        key: the key
        value: the value
    """
    con = sqlite3.connect("state/kv.db")
    con.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (key, value))
    con.commit()
    return "stored"


def get(key: str) -> str:
    """Read a value.

    Args:
        key: the key
    """
    row = sqlite3.connect("state/kv.db").execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
    if row is None:
        raise KeyError(f"no key {key}")
    return row[0]


def noop() -> str:
    """Do nothing."""
    return "ok"


def boom() -> str:
    """Raise an error."""
    raise ValueError("boom happened")


def shout(n: int) -> str:
    """Print n characters and return nothing.

    Args:
        n: how many characters
    """
    print("x" * n)


def spin(seconds: float = 1000.0) -> str:
    """Loop in Python for a while.

    Args:
        seconds: how long
    """
    end = time.time() + seconds
    while time.time() < end:
        pass
    return "done"


def block(seconds: float = 1000.0) -> str:
    """Sleep in C code with SIGALRM ignored, so only the host's deadline can stop it.

    Args:
        seconds: how long
    """
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
    time.sleep(seconds)
    return "woke"


def hog(mb: int = 100000) -> str:
    """Allocate memory.

    Args:
        mb: megabytes
    """
    data = bytearray(mb << 20)
    return str(len(data))


def die() -> str:
    """Kill the runtime process."""
    os._exit(3)


def peek_hidden() -> str:
    """Try to read hidden files."""
    hits = []
    for root in ("/hidden", "../hidden", "hidden"):
        if os.path.exists(root):
            hits.append(root)
    return json.dumps(hits)


def submit(answer: str) -> str:
    """Hand in the answer.

    Args:
        answer: the answer
    """
    return "submitted"
'''

VERIFY = '''
def verify(answer, calls, params, ctx):
    subs = [c for c in calls if c["tool"] == "submit" and c.get("ok")]
    if not subs:
        return 0.0, {"reason": "no submission"}
    got = subs[-1]["args"].get("answer")
    row = ctx.db("state/kv.db").execute("SELECT v FROM kv WHERE k = ?", (params["key"],)).fetchone()
    ok = got == params["expected"] and row is not None and row[0] == params["expected"]
    return float(ok), {"got": got}
'''


def make_tiny_pack(dest: Path, *, tasks: int = 3, limits: dict | None = None) -> packmod.Pack:
    """A pack with a key-value db, the tools above, and `tasks` program-verified tasks."""
    import sqlite3

    src = dest.parent / f"{dest.name}-src"
    (src / "env" / "state").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(TOOLS))
    (src / "hidden" / "verify.py").write_text(textwrap.dedent(VERIFY))
    con = sqlite3.connect(src / "env" / "state" / "kv.db")
    con.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)")
    con.commit()
    con.close()
    schemas = describe_tools(src / "env")  # derived by the runtime itself, as a family build does
    manifest = packmod.Manifest(name="tiny", family="test", description="tiny test pack", tools=schemas,
                                submit_tool="submit", limits=packmod.Limits(**{"step_timeout_s": 3, **(limits or {})}))
    task_list = []
    for i in range(tasks):
        key, val = f"k{i}", f"value-{i}"
        task_list.append(packmod.Task(
            id=f"tiny-{i}", prompt=[{"role": "user", "content": f"Store {val} under {key}, then submit it."}],
            verifier={"kind": "program", "args": {"params": {"key": key, "expected": val}}},
            reference={"calls": [{"tool": "put", "args": {"key": key, "value": val}},
                                 {"tool": "submit", "args": {"answer": val}}], "answer": f"Stored {val}."},
            difficulty=2))
    return packmod.save(packmod.Pack(manifest, task_list), dest, env_from=src / "env", hidden_from=src / "hidden")


@pytest.fixture
def tiny_pack(tmp_path) -> packmod.Pack:
    return make_tiny_pack(tmp_path / "tiny")
