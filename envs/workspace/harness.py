
# ---------------------------------------------------------------------------------------------------
# envgen solution harness: appended by envgen to a *probe* copy of a candidate env's tools.py, never
# shipped in a pack. ``envgen_solve`` runs a task's solution inside the sandbox with only the tools and
# a few safe builtins in scope, records every tool call (they become the task's reference), and, through
# an audit hook, refuses file, database, process and network access outside tool frames while the
# solution runs: a solution reaches the environment only through its tools.
# ---------------------------------------------------------------------------------------------------
import builtins as _envgen_builtins
import inspect as _envgen_inspect
import json as _envgen_json
import sys as _envgen_sys
import traceback as _envgen_traceback

_ENVGEN_BLOCKED_EXACT = frozenset({"open", "sqlite3.connect", "subprocess.Popen", "os.system", "os.posix_spawn",
                                   "os.fork", "os.forkpty", "os.listdir", "os.scandir", "os.remove", "os.rename",
                                   "os.unlink", "os.rmdir", "os.mkdir", "os.chdir", "import", "compile", "exec",
                                   "urllib.Request", "ctypes.dlopen"})
_ENVGEN_BLOCKED_PREFIX = ("os.exec", "os.spawn", "socket.", "shutil.", "ctypes.", "http.", "ftplib.", "smtplib.")
_ENVGEN_SAFE_BUILTINS = ("abs", "all", "any", "bool", "dict", "divmod", "enumerate", "filter", "float", "frozenset",
                         "int", "isinstance", "len", "list", "map", "max", "min", "pow", "print", "range", "reversed",
                         "round", "set", "sorted", "str", "sum", "tuple", "zip", "Exception", "ValueError", "KeyError",
                         "IndexError", "TypeError", "ZeroDivisionError", "True", "False", "None")

if not hasattr(_envgen_sys, "_envgen_guard"):
    # One hook per process (tools.py is re-imported at every reset; the guard state lives on sys).
    _envgen_sys._envgen_guard = {"active": False, "depth": 0, "blocked": None}

    def _envgen_audit(event, args, _g=_envgen_sys._envgen_guard):
        if _g["active"] and _g["depth"] == 0 and (event in _ENVGEN_BLOCKED_EXACT
                                                  or event.startswith(_ENVGEN_BLOCKED_PREFIX)):
            _g["blocked"] = event
            raise PermissionError(f"{event} is not allowed: a solution reaches the environment only through "
                                  "its tools")

    _envgen_sys.addaudithook(_envgen_audit)


class ToolError(Exception):
    """A tool call of the solution failed (the solution may catch it)."""


def _envgen_text(result):
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    return _envgen_json.dumps(result, ensure_ascii=False, default=str)


def envgen_solve(code: str, tools: list, output_limit: int = 16384) -> dict:
    """Run a solution's solve() with the given tools in scope (envgen machinery, not an agent tool).

    Args:
        code: the solution source defining solve()
        tools: the names of the tools the solution may call
        output_limit: the longest tool output an agent would see
    """
    guard = _envgen_sys._envgen_guard
    calls = []
    here = globals()

    def make(name):
        fn = here[name]
        sig = _envgen_inspect.signature(fn)

        def call(*a, **kw):
            try:
                bound = sig.bind(*a, **kw)
                args = _envgen_json.loads(_envgen_json.dumps(dict(bound.arguments)))
            except (TypeError, ValueError) as e:
                raise ToolError(f"{name}: bad arguments: {e}") from None
            guard["depth"] += 1
            try:
                try:
                    result = fn(**args)
                except Exception as e:
                    calls.append({"tool": name, "args": args, "ok": False})
                    raise ToolError(f"{name}({args}) failed: {type(e).__name__}: {e}") from None
                text = _envgen_text(result)
                calls.append({"tool": name, "args": args, "ok": True})
                if len(text) > output_limit:
                    raise ToolError(f"{name}({args}) returned {len(text)} characters, more than the {output_limit} an "
                                    "agent sees; use narrower arguments or a tool that returns less")
                return text if result is None or isinstance(result, str) else _envgen_json.loads(text)
            finally:
                guard["depth"] -= 1

        call.__name__ = name
        return call

    unknown = [t for t in tools if not callable(here.get(t)) or t.startswith("_")]
    if unknown:
        return {"ok": False, "error": f"unknown tools {unknown}", "calls": []}
    scope = {"__builtins__": {n: getattr(_envgen_builtins, n) for n in _ENVGEN_SAFE_BUILTINS
                              if hasattr(_envgen_builtins, n)}, "ToolError": ToolError}
    scope.update({t: make(t) for t in tools})
    try:
        exec(compile(code, "<solution>", "exec"), scope)
    except Exception as e:
        return {"ok": False, "error": f"the solution does not load: {type(e).__name__}: {e}", "calls": []}
    solve = scope.get("solve")
    if not callable(solve):
        return {"ok": False, "error": "the solution defines no solve() function", "calls": []}
    guard["blocked"] = None
    guard["active"] = True
    try:
        answer = solve()
    except Exception as e:
        guard["active"] = False
        frames = [f for f in _envgen_traceback.extract_tb(e.__traceback__) if f.filename == "<solution>"]
        where = f" (solution line {frames[-1].lineno})" if frames else ""
        return {"ok": False, "error": f"{type(e).__name__}: {e}{where}", "calls": calls, "blocked": guard["blocked"]}
    finally:
        guard["active"] = False
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return {"ok": False, "error": "solve() returned nothing; return the final answer the agent should give",
                "calls": calls}
    return {"ok": True, "answer": _envgen_text(answer), "calls": calls}


if "__all__" in globals():
    __all__ = [*__all__, "envgen_solve"]  # noqa: F821
