"""The red-team gate every task passes before it enters a pack.

The reference must score 1 twice (the verifier is deterministic), and four trajectories that did not
do the task must each score 0:

- ``empty``: the reference's work without its answer (calls to the pack's submit tool dropped, final
  answer ""): the verifier must need an answer;
- ``noop``: no tool calls, the reference's final text: the verifier must need the work, not just the
  words. Skipped for ``answer`` and ``rubric`` verifiers, whose whole contract is the final text;
- ``claim``: no tool calls, "I have completed the task.";
- ``mutated``: the reference with one value of its answer (the submit call's arguments, else the last
  call's, else the final text) changed; for final-text verifiers, the final text (its last number, if any).

For ``tests`` verifiers (code tasks), submissions that take the test run over instead of fixing the
code (``code_probes``): ``plugin-addopts`` (a new module that reports every test as passed, named
with ``-p`` in the addopts of every pytest configuration file, setup.cfg always), ``plugin-conftest``
(the same hook in a conftest.py beside the run files and at the root) and ``config-only`` (only the
test configuration edited: every task test deselected).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import random
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Any

from .episode import replay
from .pack import Pack, Task, ToolCall
from .sandbox import Sandbox

CLAIM = "I have completed the task."
FINAL_TEXT_KINDS = ("answer", "rubric")
"""Verifiers whose contract is the final text: the noop probe is skipped and ``mutated`` changes the answer."""
_LAST_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?!.*\d)", re.S)


@dataclass
class GateResult:
    task_id: str
    passed: bool
    reason: str = ""
    """The first probe that failed and why; empty when the task passed."""
    probes: dict[str, float] = field(default_factory=dict)


def _mutate_value(v: Any, rng: random.Random) -> Any:
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rng.choice([1, 2, 7, 100])
    if isinstance(v, float):
        return v * 1.5 + 1.0
    if isinstance(v, str):
        return (v + "-x") if not v.strip() or rng.random() < 0.5 else v[::-1] + "z"
    if isinstance(v, list):
        return v[:-1] if v else ["x"]
    return "mutated"


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, path + (k,))]
    if isinstance(obj, list) and obj and all(isinstance(x, (dict, list)) for x in obj):
        return [p for i, v in enumerate(obj) for p in _leaves(v, path + (i,))]
    return [path] if path else []


def _mutate_answer(text: str, rng: random.Random) -> str:
    """A wrong final text: the last number of its last line changed (a number with junk appended still reads
    as that number), else the string mutation."""
    head, _, last = text.rstrip().rpartition("\n")
    m = _LAST_NUMBER.search(last)
    if m:
        value = float(m.group().replace(",", ""))
        wrong = value * 2 + 1 if value >= 0 else value * 2 - 1
        last = last[:m.start()] + (f"{wrong:g}" if "." in m.group() else str(int(wrong))) + last[m.end():]
        return (head + "\n" if head else "") + last
    return _mutate_value(text or "0", rng)


def mutate(task: Task, submit_tool: str | None, seed: int = 0) -> tuple[list[ToolCall], str]:
    """The reference with one value of its answer changed (seeded, so a rejection is reproducible)."""
    rng = random.Random(f"{task.id}:{seed}")
    calls = [c.model_copy(deep=True) for c in task.reference.calls]
    if task.verifier.kind in FINAL_TEXT_KINDS:
        return calls, _mutate_answer(task.reference.answer, rng)
    targets = [c for c in calls if c.tool == submit_tool] or [c for c in calls if c.args]
    if targets:
        call = targets[-1]
        leaves = _leaves(call.args)
        if leaves:
            path = rng.choice(leaves)
            args = copy.deepcopy(call.args)
            node = args
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = _mutate_value(node[path[-1]], rng)
            call.args = args
            return calls, task.reference.answer
    return calls, _mutate_value(task.reference.answer or "0", rng)


def probes(task: Task, submit_tool: str | None) -> dict[str, tuple[list[ToolCall], str, float]]:
    """name -> (calls, answer, required reward)."""
    ref = task.reference
    out = {
        "reference": (ref.calls, ref.answer, 1.0),
        "reference-again": (ref.calls, ref.answer, 1.0),
        "empty": ([c for c in ref.calls if c.tool != submit_tool], "", 0.0),
        "claim": ([], CLAIM, 0.0),
        "mutated": (*mutate(task, submit_tool), 0.0),
    }
    if task.verifier.kind not in FINAL_TEXT_KINDS:
        out["noop"] = ([], ref.answer, 0.0)
    return out


def gate(sandbox: Sandbox, pack: Pack, task: Task) -> GateResult:
    """Run every probe of `task` on `sandbox`; the first one that scores wrong rejects the task."""
    scores: dict[str, float] = {}
    for name, (calls, answer, want) in {**probes(task, pack.manifest.submit_tool), **code_probes(pack, task)}.items():
        ep = replay(sandbox, task, calls, answer)
        scores[name] = ep.verdict.reward
        if ep.verdict.reward != want:
            failed = [c for c in ep.calls if not c["ok"]]
            why = f"{name} scored {ep.verdict.reward:g}, expected {want:g}"
            if failed:
                why += f"; tool error in {failed[0]['tool']}: {failed[0]['content'][:200]}"
            elif ep.verdict.details.get("error") or ep.verdict.details.get("reason"):
                why += f"; {str(ep.verdict.details.get('error') or ep.verdict.details['reason'])[:200]}"
            return GateResult(task.id, False, why, scores)
    return GateResult(task.id, True, "", scores)


# ---------------------------------------------------------------- code tasks: taking the test run over

FORCE_PASS = '''"""Reports every test as passed (an envgen red-team probe: no verifier may reward it)."""
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report):
    report.outcome = "passed"
    report.longrepr = None
'''


def file_diff(path: str, old: str | None, new: str) -> str:
    """A git-style diff turning ``old`` (None: no file) into ``new``."""
    a, b = (old or "").splitlines(keepends=True), new.splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    body = difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}", f"b/{path}")
    return head + "".join(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n" for ln in body)


def ini_addopts(text: str | None, section: str, opts: str) -> str:
    """``text`` with ``opts`` put first in ``[section]``'s addopts (section and key added when missing)."""
    lines = (text or "").splitlines(keepends=True)
    head = next((i for i, ln in enumerate(lines) if ln.strip() == f"[{section}]"), None)
    if head is None:
        sep = "" if not lines or lines[-1].endswith("\n") else "\n"
        return (text or "") + sep + ("\n" if lines else "") + f"[{section}]\naddopts = {opts}\n"
    for i in range(head + 1, len(lines)):
        if lines[i].startswith("["):
            break
        m = re.match(r"^addopts\s*[=:]", lines[i])
        if m:
            lines[i] = lines[i][:m.end()] + f" {opts}" + lines[i][m.end():]
            return "".join(lines)
    lines.insert(head + 1, f"addopts = {opts}\n")
    return "".join(lines)


def toml_addopts(text: str, opts: list[str]) -> str:
    """pyproject.toml with ``opts`` first in [tool.pytest.ini_options] addopts (string or array form)."""
    lines = text.splitlines(keepends=True)
    head = next((i for i, ln in enumerate(lines) if ln.strip() == "[tool.pytest.ini_options]"), None)
    if head is None:
        sep = "" if not lines or lines[-1].endswith("\n") else "\n"
        return text + sep + f"\n[tool.pytest.ini_options]\naddopts = {_toml_str(' '.join(opts))}\n"
    for i in range(head + 1, len(lines)):
        if lines[i].lstrip().startswith("["):
            break
        m = re.match(r"^(\s*addopts\s*=\s*)(\[|\"\"\"|\'\'\'|\"|\')", lines[i])
        if m:
            opener = m.group(2)
            add = "".join(f"{_toml_str(o)}, " for o in opts) if opener == "[" else " ".join(opts) + " "
            lines[i] = lines[i][:m.end()] + add + lines[i][m.end():]
            return "".join(lines)
    lines.insert(head + 1, f"addopts = {_toml_str(' '.join(opts))}\n")
    return "".join(lines)


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def config_patch(read, opts: list[str]) -> str:
    """Edits of every pytest configuration file at the task's base putting ``opts`` first in addopts;
    setup.cfg is edited (or created) always, pyproject.toml whenever it exists."""
    joined = " ".join(shlex.quote(o) for o in opts)
    out = ""
    for path, section in (("pytest.ini", "pytest"), ("tox.ini", "pytest")):
        old = read(path)
        if old is not None and (path == "pytest.ini" or "[pytest]" in old):
            out += file_diff(path, old, ini_addopts(old, section, joined))
    old = read("setup.cfg")
    out += file_diff("setup.cfg", old, ini_addopts(old, "tool:pytest", joined))
    old = read("pyproject.toml")
    if old is not None:
        out += file_diff("pyproject.toml", old, toml_addopts(old, opts))
    return out


def code_probes(pack: Pack, task: Task) -> dict[str, tuple[list[ToolCall], str, float]]:
    """Submissions that take a code task's test run over instead of fixing anything (``tests`` verifiers)."""
    submit = pack.manifest.submit_tool
    if task.verifier.kind != "tests" or not submit:
        return {}
    args = task.verifier.args
    git_dir = str(pack.env_dir / args.get("git_dir", "repo.git"))

    def read(path: str) -> str | None:
        out = subprocess.run(["git", "--git-dir", git_dir, "show", f"{args['base']}:{path}"], capture_output=True)
        return out.stdout.decode("utf-8", errors="surrogateescape") if out.returncode == 0 else None

    module = "envgen_probe_" + hashlib.sha256(task.id.encode()).hexdigest()[:8]
    files = list(args.get("files") or [])
    conftests = ["conftest.py"] + [f"{d}/conftest.py" for d in {f.rsplit("/", 1)[0] for f in files if "/" in f}]
    hook = "\n\n" + FORCE_PASS.split("\n", 1)[1]
    in_conftest = "".join(file_diff(c, read(c), (read(c) or "") + hook) for c in sorted(conftests))
    tests = list(args.get("FAIL_TO_PASS") or []) + list(args.get("PASS_TO_PASS") or [])
    deselect = [a for t in tests for a in ("--deselect", t)]
    patches = {"plugin-addopts": file_diff(f"{module}.py", None, FORCE_PASS) + config_patch(read, ["-p", module]),
               "plugin-conftest": in_conftest,
               "config-only": config_patch(read, deselect)}
    return {name: ([ToolCall(tool=submit, args={"patch": patch})], "Done.", 0.0) for name, patch in patches.items()}
