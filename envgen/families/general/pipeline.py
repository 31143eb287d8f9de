"""The general-agent synthesis pipeline (DeepSeek-V3.2): from a task category to a pack, with LLM agents.

Stages, each resumable from the state store (``envgen.store``)::

    database   env-builder agent, in a sandbox workspace with bash + search: builds env/state/db.sqlite
               and sources.json
    tools      tool-writer agent: writes env/tools.py; envgen scans it (AST), derives the tool schemas in
               a sandbox and test-calls every tool twice (``check_tools``)
    cC/l1      task-proposer agent: a simple task + a solution that may only call tools + a verification
               function (``submit_task``); envgen scans both, runs the solution in a sandbox (its tool
               calls become the reference), runs the verifier on it, then the red-team gate and a
               reviewer agent; every rejection goes back to the agent, which repairs within its budget
    cC/lK      difficulty-raiser agent: the next, harder level (more tool calls than level K-1), adding
               tools when needed; every level that validates is kept as a task with its difficulty
    pack       all validated tasks over the final env, their expected database change sets recorded again
               (each task's verifier compares the whole end database), gated again, saved atomically

A conversational category (the env-builder wrote ``policy.md``) gets the policy as the pack's ``instructions``
and tasks that carry a simulated ``user``, the reference's ``messages`` to it and extra verifier ``parts``
(a ``composite`` with the program verification), validated through the pack's models and replayed with the
scripted user (``conversation_spec``, ``conversation_problems``).

Generated code runs only in sandboxes (``open_sandbox(..., backend)``: local or Docker). A stage marked
done in the store is never redone; a stage that was cut off is run again, and its model calls are
served from the store's LLM cache (same request, same answer), so a killed build neither repeats paid
calls nor loses or duplicates tasks. Tool output is kept free of per-run paths for that reason.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import tarfile
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import ValidationError

from .static_checks import changed_definitions, check_solution, check_tools_source, check_verification
from ...llm.client import LLMConfig, LLMPool
from ...llm.agent import FunctionTools, SandboxTools, ToolOutput, Tools, Toolset
from ...build.offline import check_out, not_applicable, record_and_gate, record_expectation
from ...build.distributed import LEASE_S, check_executor
from ...build.pipeline import LLMPipeline
from ...build.report import BuildReport, reason_key
from ...episodes.episode import replay
from ...episodes.users import make_user
from ...errors import InputError, SandboxError, SynthesisError
from ...build.sdk import db_changes
from ...pack.format import (MAX_INSTRUCTIONS, Limits, Manifest, Pack, Provenance, Reference, Task, ToolCall, ToolSchema,
                            UserSpec, Verifier, save)
from ...paths import bundled
from ...build.gate import gate
from ...sandbox import Sandbox, open_sandbox
from ...retrieval.search import SearchBackend, SearchTool, get_backend
from ...paths import cache_dir
from ...retrieval.pages import LocalBackend  # noqa: F401  (importing it registers the "local" backend)
from ...store import Store

GENERATOR = "envgen.families.general/1"
DB_PATH = "env/state/db.sqlite"
WORK_DB = "state/db.sqlite"
"""The same database as the tools (and the verifier's whole-database check) see it, from the work dir."""
WORKSPACE_TOOLS = ("bash", "read_file", "write_file", "list_files")
ROLES = ("env-builder", "tool-writer", "task-proposer", "difficulty-raiser", "reviewer")
WORKSPACE_LIMITS = Limits(max_turns=1000, step_timeout_s=600, episode_timeout_s=48 * 3600, memory_mb=4096,
                          output_limit=64 << 20, network=False)
"""The builder's sandbox: long bash commands, big snapshots (base64 tar of the workspace) through the protocol."""
PROBE_LIMITS = Limits(max_turns=1000, step_timeout_s=30, episode_timeout_s=48 * 3600, output_limit=1 << 20)
"""The candidate env while tasks are checked: room for the solution harness's reply."""
PACK_LIMITS = Limits()
"""The shipped pack's limits (tool output truncation included: solutions are held to it)."""
PROBES_EXPLAINED = {
    "reference": "your solution's own trajectory did not score 1 under your verification",
    "reference-again": "the verification gave a different score the second time: it must be deterministic",
    "empty": "the verification accepted an EMPTY final answer (with your solution's tool calls): check the answer",
    "claim": "the verification accepted the answer 'I have completed the task.' with no tool calls",
    "noop": "the verification accepted the right answer with NO tool calls: also check that `calls` holds the "
            "successful tool calls the answer depends on",
    "mutated": "the verification accepted your trajectory with one argument of its last tool call changed: check "
               "the calls' arguments (and results), not only that a tool was called",
    "collateral": "the verification accepted your solution plus one extra call that changed the database beyond "
                  "what the task asks: the end database must be exactly the solution's",
}

PART_KINDS = ("said", "no_write", "state", "rubric")
"""Verifier kinds a task may add to its program verification (``parts``: a composite, every part must pass)."""
POLICY_FILE = "policy.md"
"""Where the env-builder of a conversational category writes its policy document (the pack's instructions)."""

Progress = Callable[[int], Any]


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48].strip("-")
    if not slug:
        raise InputError(f"category {text!r} has no letters or digits; name it, e.g. 'travel planning'")
    return slug


def plan(max_levels: int, chains: int = 1) -> list[str]:
    """Stage keys in order: database, tools, cC/lK for every chain and level, then pack."""
    return ["database", "tools", *[f"c{c}/l{k}" for c in range(chains) for k in range(1, max_levels + 1)], "pack"]


def stage_count(max_levels: int, chains: int = 1) -> int:
    """How many times ``synthesize`` calls ``progress(1)`` (the CLI's progress total)."""
    return len(plan(max_levels, chains))


# ----------------------------------------------------------------------------- snapshots


def _tar_files(blob: bytes, limit: int = 256 << 20) -> dict[str, bytes]:
    """Regular files of a snapshot (read in memory, never extracted by path)."""
    out, total = {}, 0
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            total += m.size
            if total > limit:
                raise SandboxError(f"workspace snapshot is larger than {limit >> 20} MiB")
            out[m.name] = tar.extractfile(m).read()
    return out


def _write_tree(files: dict[str, bytes], dest: Path, prefix: str = "") -> None:
    """Write snapshot files under ``prefix`` into ``dest`` (paths checked: nothing leaves ``dest``)."""
    dest = dest.resolve()
    for name, data in files.items():
        if prefix and not name.startswith(prefix):
            continue
        rel = name[len(prefix):]
        target = (dest / rel).resolve()
        if not rel or ".." in Path(rel).parts or not target.is_relative_to(dest):
            raise SandboxError(f"unsafe path {name!r} in a workspace snapshot")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 20] + f"...[{len(text) - n + 20} more]"


def _db_summary(db: dict[str, Any] | None) -> str:
    if not db:
        return "(no database)"
    lines = []
    for name, t in db["tables"].items():
        lines.append(f"- {name} ({t['rows']} rows): {', '.join(t['columns'])}")
        for row in t.get("sample", [])[:2]:
            lines.append(f"    e.g. {_clip(json.dumps(row, ensure_ascii=False), 300)}")
    return "\n".join(lines)


def _tools_summary(schemas: list[dict[str, Any]]) -> str:
    lines = []
    for s in schemas:
        fn = s["function"]
        props = fn["parameters"].get("properties", {})
        req = set(fn["parameters"].get("required", []))
        params = ", ".join(f"{k}{'' if k in req else '?'}: {v.get('type', 'any')}" for k, v in props.items())
        lines.append(f"- {fn['name']}({params}): {fn.get('description', '').splitlines()[0] if fn.get('description') else ''}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- env checks


@dataclass
class EnvState:
    """A validated environment: the workspace snapshot it lives in and what envgen derived from it."""

    workspace: str
    """Artifact key of the workspace snapshot."""
    env_sha: str
    schemas: list[dict[str, Any]]
    examples: list[dict[str, Any]]
    tools_source: str
    db: dict[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EnvState:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass
class CheckResult:
    ok: bool
    text: str
    env_sha: str = ""
    schemas: list[dict[str, Any]] = field(default_factory=list)
    tools_source: str = ""
    db: dict[str, Any] | None = None


class EnvCheck:
    """The candidate env of one stage: checks it (``check_tools``) and serves it as the probe sandbox.

    The probe is the candidate env with envgen's solution harness appended to a copy of its tools.py,
    opened through ``open_sandbox``; it is rebuilt whenever the env's snapshot changes.
    """

    def __init__(self, synth: _Synth, ws: Sandbox, stage: str, base: EnvState | None):
        self.synth, self.ws, self.stage, self.base = synth, ws, stage, base
        self.examples: list[dict[str, Any]] = list(base.examples) if base else []
        self.dir = synth.work / "probe" / stage.replace("/", "_")
        self.probe: Sandbox | None = None
        self.probe_pack: Pack | None = None
        self.probe_sha = ""
        self._last: tuple[str, CheckResult] | None = None

    # -- the agent-facing tool

    def check_tools(self, examples: list) -> ToolOutput:
        """Check env/tools.py: scan the code, derive every tool's schema in a sandbox, run each example twice.

        Args:
            examples: example calls, at least one per tool, each {"tool": NAME, "args": {...}}
        """
        if not isinstance(examples, list) or not all(
                isinstance(e, dict) and isinstance(e.get("tool"), str) and isinstance(e.get("args", {}), dict)
                for e in examples):
            raise ValueError('examples must be a list of {"tool": NAME, "args": {...}} objects')
        given = {e["tool"] for e in examples}
        self.examples = [e for e in self.examples if e["tool"] not in given] + \
                        [{"tool": e["tool"], "args": e.get("args", {})} for e in examples]
        res = self.run()
        return ToolOutput(res.text, ok=res.ok)

    # -- checks

    def env_snapshot(self) -> bytes:
        return self.synth.export(self.ws, "env")

    def run(self) -> CheckResult:
        """Check the workspace's current env/ with the current examples (cached per env + examples)."""
        blob = self.env_snapshot()
        sha = _sha(blob)
        cache_key = sha + _sha(json.dumps(self.examples, sort_keys=True))
        if self._last and self._last[0] == cache_key:
            return self._last[1]
        res = self._run(blob, sha)
        self._last = (cache_key, res)
        self.synth.store.add_result(self.synth.run_id, self.stage, "tools", res.ok, None if res.ok else res.text[:2000])
        return res

    def _run(self, blob: bytes, sha: str) -> CheckResult:
        files = _tar_files(blob)
        src_bytes = files.get("tools.py")
        if src_bytes is None:
            return CheckResult(False, "FAILED:\n- env/tools.py is missing; write the tools there", sha)
        src = src_bytes.decode("utf-8", errors="replace")
        problems = check_tools_source(src)
        info = self.synth.inspect(self.ws)
        if info.get("db_error"):
            problems.append(info["db_error"])
        if self.base is not None:
            for name in changed_definitions(self.base.tools_source, src):
                problems.append(f"{name} was changed or removed; existing tools must stay exactly as they were "
                                "(earlier tasks depend on them): add new functions instead")
            before = (self.base.db or {}).get("tables", {})
            after = ((info.get("db") or {}).get("tables") or {})
            for table, t in before.items():
                if table not in after:
                    problems.append(f"table {table} was removed from the database; restore it")
                elif after[table]["sha256"] != t["sha256"]:
                    problems.append(f"rows of table {table} changed; existing rows must stay as they were (add new "
                                    "tables or rows only)")
        if problems:
            return CheckResult(False, "FAILED:\n" + "\n".join(f"- {p}" for p in problems), sha)
        try:
            sbx = self.open_probe(blob, sha)
        except SandboxError as e:
            return CheckResult(False, f"FAILED:\n- env/tools.py does not load in the sandbox: {self.synth.scrub(str(e))}",
                               sha)
        schemas = [s for s in sbx.tools if s["function"]["name"] != "envgen_solve"]
        names = [s["function"]["name"] for s in schemas]
        for s in schemas:
            try:
                ToolSchema.model_validate(s)
            except ValidationError as e:
                err = e.errors()[0]
                problems.append(f"tool {s['function']['name']}: its schema is invalid ({err['msg']}); use simple "
                                "parameter types (str, int, float, bool, list, dict, Optional, Literal)")
            if not s["function"].get("description"):
                problems.append(f"tool {s['function']['name']} has no description (first docstring line)")
        unknown = sorted({e["tool"] for e in self.examples} - set(names))
        if unknown:
            problems.append(f"examples name unknown tools {unknown}; the tools are {names}")
        missing = [n for n in names if n not in {e["tool"] for e in self.examples}]
        if missing:
            problems.append(f"no example call for {missing}: pass at least one example per tool to check_tools")
        shown = []
        for ex in self.examples:
            if ex["tool"] not in names:
                continue
            outs = []
            for _ in range(2):
                sbx.reset()
                outs.append(sbx.call(ex["tool"], ex["args"]))
            call = f"{ex['tool']}({json.dumps(ex['args'], ensure_ascii=False)})"
            first = outs[0]
            if not first.ok:
                problems.append(f"{call} failed: {self.synth.scrub(first.content)[:500]}")
            elif not first.content.strip():
                problems.append(f"{call} returned nothing; tools must return the information the agent needs")
            elif outs[1].content != first.content or not outs[1].ok:
                problems.append(f"{call} returned different results on two runs; tools must be deterministic")
            elif len(first.content) > PACK_LIMITS.output_limit:
                problems.append(f"{call} returned {len(first.content)} characters; the agent sees at most "
                                f"{PACK_LIMITS.output_limit}: return less (a limit parameter, fewer fields)")
            else:
                shown.append(f"- {call} -> {_clip(first.content, 300)}")
        if problems:
            return CheckResult(False, "FAILED:\n" + "\n".join(f"- {p}" for p in problems), sha)
        text = f"OK: {len(names)} tools ({', '.join(names)}); every example ran twice with the same output:\n" + \
               "\n".join(shown)
        return CheckResult(True, text, sha, schemas, src, info.get("db"))

    # -- the probe sandbox

    def open_probe(self, blob: bytes, sha: str) -> Sandbox:
        if self.probe is not None and self.probe_sha == sha:
            return self.probe
        self.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "env").mkdir(parents=True)
        (self.dir / "hidden" / "verify").mkdir(parents=True)
        _write_tree(_tar_files(blob), self.dir / "env")
        tools_py = self.dir / "env" / "tools.py"
        harness = (bundled("envs") / "workspace" / "harness.py").read_text(encoding="utf-8")
        tools_py.write_text(tools_py.read_text(encoding="utf-8") + "\n" + harness, encoding="utf-8")
        manifest = Manifest(name=f"probe-{self.synth.slug}", family="general", category=self.synth.slug, tools=[],
                            limits=PROBE_LIMITS)
        self.probe_pack = Pack(manifest, [], root=self.dir)
        self.probe = open_sandbox(self.probe_pack, self.synth.backend)
        self.synth._track(self.probe, "probe")
        self.probe_sha = sha
        return self.probe

    def close(self) -> None:
        if self.probe is not None:
            self.probe.close()
            self.probe = None
            self.probe_sha = ""


# ----------------------------------------------------------------------------- a level: propose / raise


class Level:
    """One level of one chain: the ``submit_task`` tool and everything a submission goes through."""

    def __init__(self, synth: _Synth, ws: Sandbox, stage: str, chain: int, level: int, base: EnvState,
                 previous: dict[str, Any] | None, budget: int, review: bool, ordinal: int):
        self.synth, self.ws, self.stage, self.chain, self.level = synth, ws, stage, chain, level
        self.base, self.previous, self.budget, self.review, self.ordinal = base, previous, budget, review, ordinal
        self.env = EnvCheck(synth, ws, stage, base)
        self.task_id = f"{synth.slug}-c{chain}-l{level}"
        self.submissions = 0
        self.accepted: dict[str, Any] | None = None
        self.last_reason = "no submission"
        self.state: EnvState = base

    def submit_task(self, prompt: str, solution: str, verification: str, params: dict | None = None,
                    user: dict | None = None, messages: list | None = None, parts: list | None = None) -> ToolOutput:
        """Hand in the task: envgen runs the solution in a sandbox, verifies it, and red-teams the verification.

        Args:
            prompt: the task as the user asks it (self-contained, one correct answer, the answer's form stated); in a
                conversational task, the customer's opening message
            solution: Python source defining solve(): only tool calls and plain logic; returns the final answer
            verification: Python source defining verify(answer, calls, messages, params, ctx) returning True/False or
                a score
            params: optional JSON object passed to verify as params
            user: conversational tasks: the simulated user {goal, persona, facts: [{name, value, ask, reply}], rules,
                default, stop, closing, max_replies}
            messages: conversational tasks: what the agent says to the user between the solution's tool calls,
                [{after, content}] (after: how many tool calls come before it)
            parts: extra checks that must also pass, [{kind, args, name}] with kind said, no_write, state or rubric
        """
        if self.accepted is not None:
            return ToolOutput(f"Task {self.task_id} is already accepted; you are done.", final=True)
        self.submissions += 1
        n = self.submissions
        if n > self.budget:
            return ToolOutput("Rejected: the submission budget is spent.", ok=False, final=True)
        try:
            return self._submit(prompt, solution, verification, params, n, user, messages, parts)
        except (SandboxError, OSError) as e:
            return self._fail("sandbox", f"the sandbox failed while checking the task: {self.synth.scrub(str(e))}", n)

    def _fail(self, reason: str, text: str, n: int) -> ToolOutput:
        self.last_reason = reason
        self.synth.store.add_result(self.synth.run_id, self.stage, reason, False, text[:2000], {"submission": n})
        left = self.budget - n
        tail = f" ({left} submission{'s' if left != 1 else ''} left; fix it and call submit_task again)" if left else \
            " (no submissions left)"
        return ToolOutput(f"Rejected: {text}{tail}", ok=False, final=left <= 0)

    def _submit(self, prompt: Any, solution: Any, verification: Any, params: Any, n: int, user: Any = None,
                messages: Any = None, parts: Any = None) -> ToolOutput:
        if not isinstance(prompt, str) or len(prompt.strip()) < 10:
            return self._fail("prompt", "prompt must be the task as a user would ask it (a sentence or more)", n)
        if params is not None and not isinstance(params, dict):
            return self._fail("params", "params must be a JSON object (or left out)", n)
        conv = conversation_spec(prompt, user, messages, parts)
        if conv.problems:
            return self._fail(conv.reason, "the conversation or checks are invalid:\n" +
                              "\n".join(f"- {p}" for p in conv.problems), n)
        # the env: unchanged, or changed (tools added) and checked again
        state = self.base
        blob = self.env.env_snapshot()
        if _sha(blob) != self.base.env_sha:
            res = self.env.run()
            if not res.ok:
                return self._fail("tools", "env/tools.py or the database changed and does not pass check_tools:\n" +
                                  res.text, n)
            state = EnvState(self.base.workspace, res.env_sha, res.schemas, list(self.env.examples),
                             res.tools_source, res.db)
        names = [s["function"]["name"] for s in state.schemas]
        problems = check_solution(solution, names) + check_verification(verification)
        if problems:
            return self._fail("code", "the code does not pass envgen's checks:\n" + "\n".join(f"- {p}" for p in problems),
                              n)
        probe = self.env.open_probe(blob, _sha(blob))
        probe.reset()
        raw = probe.call("envgen_solve", {"code": solution, "tools": names, "output_limit": PACK_LIMITS.output_limit},
                         timeout=self.synth.specs["task-proposer"].budgets.tool_timeout_s)
        if not raw.ok:
            return self._fail("solution", f"the solution did not finish: {self.synth.scrub(raw.content)}", n)
        try:
            sol = json.loads(raw.content)
        except ValueError:
            return self._fail("solution", "the solution's run produced a report too large to read back; make fewer "
                                          "or smaller tool calls", n)
        if not sol["ok"]:
            why = sol["error"]
            if sol.get("blocked"):
                why += " (solutions may not touch files, the database or processes directly: call the tools)"
            return self._fail("solution", f"the solution failed in the sandbox: {self.synth.scrub(why)}", n)
        calls = [ToolCall(tool=c["tool"], args=c["args"]) for c in sol["calls"]]
        if not calls:
            return self._fail("solution", "the solution called no tool; a task must need the tools", n)
        need = (self.previous or {}).get("difficulty", 0)
        if self.level > 1 and len(calls) <= need:
            return self._fail("not_harder", f"the solution makes {len(calls)} tool calls; level {self.level} must need "
                                            f"more than level {self.level - 1}'s {need}", n)
        try:
            reference = Reference(calls=calls, answer=sol["answer"], messages=conv.messages)
        except ValidationError as e:
            return self._fail("messages", "messages do not fit the solution's tool calls: " +
                              "; ".join(_pydantic_problems(e)), n)
        program = {"file": f"verify/{self.task_id}.py", "params": params or {}, "changes": db_changes(WORK_DB)}
        verifier = {"kind": "program", "args": program} if not conv.parts else \
            {"kind": "composite", "args": {"mode": "all", "parts": [
                {"name": "verification", "kind": "program", "args": program}, *conv.parts]}}
        task = Task(id=self.task_id, prompt=[{"role": "user", "content": prompt.strip()}], verifier=verifier,
                    reference=reference, difficulty=len(calls), user=conv.user,
                    meta={"source": GENERATOR, "category": self.synth.category, "chain": self.chain,
                          "level": self.level, "submissions": n})
        (self.env.dir / "hidden" / "verify" / f"{self.task_id}.py").write_text(verification, encoding="utf-8")
        task = record_expectation(probe, task)  # the database the solution leaves is the task's expected end state
        ep = replay(probe, task, calls, sol["answer"], task.reference.messages)
        if task.user is not None:
            problems = conversation_problems(task, ep.messages)
            if problems:
                return self._fail("conversation", "playing your messages and final answer to the simulated user "
                                                  "(the scripted user, as the build plays it):\n" +
                                  "\n".join(f"- {p}" for p in problems), n)
        failed = [c for c in ep.calls if not c["ok"]]
        if failed:
            return self._fail("solution", f"replaying the solution's calls failed at {failed[0]['tool']}: "
                                          f"{self.synth.scrub(failed[0]['content'])[:500]}; tools must be deterministic",
                              n)
        whole = _program_details(ep.verdict.details).get("changes") or {}
        if whole.get("ok") is False:
            why = "; ".join(whole.get("differences") or [str(whole.get("error") or whole.get("reason"))])
            return self._fail("tools", "running your solution twice left two different databases "
                                       f"({self.synth.scrub(why)[:500]}): tools must write deterministically (no "
                                       "clock readings, random ids or row order that varies)", n)
        if ep.verdict.reward != 1.0:
            details = self.synth.scrub(json.dumps(ep.verdict.details, ensure_ascii=False, default=str))
            return self._fail("verify", f"your verification scored your own solution {ep.verdict.reward:g}, not 1 "
                                        f"(answer {_clip(sol['answer'], 300)!r}; details {_clip(details, 800)}); fix the "
                                        "solution or the verification", n)
        g = gate(probe, self.env.probe_pack, task)
        if not g.passed:
            probe_name = g.reason.split(" ", 1)[0]
            why = PROBES_EXPLAINED.get(probe_name, g.reason)
            return self._fail(f"redteam:{probe_name}", f"the red-team gate rejected the task: {why} "
                                                       f"[{self.synth.scrub(g.reason)}]", n)
        if self.review:
            approved, reason = self.synth.review(self, task, ep.calls, state, n, ep.messages)
            if not approved:
                return self._fail("review", f"the reviewer rejected the task: {reason}", n)
        self.state = state
        self.accepted = {"task": task.model_dump(mode="json", exclude_none=True), "solution": solution,
                         "verification": verification, "submissions": n}
        if task.user is not None or conv.parts:
            self.accepted.update(user=user, messages=messages, parts=parts)
        return ToolOutput(f"Accepted: task {self.task_id} at difficulty {len(calls)} ({len(calls)} tool calls).",
                          final=True)


@dataclass
class ConversationSpec:
    """A submission's conversational fields and extra checks, validated through the pack's own models."""

    user: UserSpec | None = None
    messages: list[dict[str, Any]] | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    reason: str = "conversation"


def _pydantic_problems(e: ValidationError, prefix: str = "") -> list[str]:
    """One problem per error, named by its field path (``user.facts[0].ask: ...``)."""
    lines = []
    for err in e.errors():
        path, last = prefix, ""
        for part in err["loc"]:
            last = f"[{part}]" if isinstance(part, int) else str(part)
            path += last if isinstance(part, int) else (f".{part}" if path else str(part))
        msg = err["msg"].removeprefix("Value error, ")
        msg = msg.removeprefix(f"{last}: ") if last else msg  # the models' own messages may name the field again
        lines.append(f"{path}: {msg}" if path else msg)
    return lines


def conversation_spec(prompt: str, user: Any, messages: Any, parts: Any) -> ConversationSpec:
    """Check ``user`` (a UserSpec), ``messages`` ([{after, content}]) and ``parts`` (composite parts of the kinds in
    ``PART_KINDS``, through the kit's argument checks) before anything runs; problems are written for the model."""
    out = ConversationSpec()
    if user is not None:
        if not isinstance(user, dict):
            out.problems.append("user must be a JSON object {goal, persona, facts, rules, default, stop, closing}")
        else:
            try:
                out.user = UserSpec.model_validate(user)
            except ValidationError as e:
                out.problems.extend(_pydantic_problems(e, "user"))
        if out.user is not None:
            said = prompt.casefold() if isinstance(prompt, str) else ""
            for f in out.user.facts:
                if f.ask is not None and len(f.value.strip()) >= 3 and f.value.strip().casefold() in said:
                    out.problems.append(f"the prompt gives away the user's fact {f.name!r} ({f.value!r}); the user "
                                        "tells it only when asked, so leave it out of the opening message")
            if not out.user.stop and not any(r.stop for r in out.user.rules) and out.user.max_replies is None:
                out.problems.append("user: nothing ends the conversation; give stop (regexes on the agent's message "
                                    "after which the user says closing and leaves), e.g. [\"cancelled\"]")
    if messages is not None:
        if user is None:
            out.problems.append("messages are what the agent says to the simulated user: give a user too (or leave "
                                "messages out)")
        elif not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            out.problems.append("messages must be a list of {after, content} objects")
        else:
            out.messages = messages
    before = len(out.problems)
    if parts is not None:
        if not isinstance(parts, list) or not parts or not all(isinstance(p, dict) for p in parts):
            out.problems.append("parts must be a non-empty list of {kind, args, name} objects (or left out)")
        else:
            for i, p in enumerate(parts):
                if p.get("kind") not in PART_KINDS:
                    out.problems.append(f"parts[{i}].kind: {p.get('kind')!r} is not one of {', '.join(PART_KINDS)} "
                                        "(your verification is the program part)")
                elif p.get("name") == "verification":
                    out.problems.append(f"parts[{i}].name: 'verification' is your program's part; name it otherwise")
                elif p["kind"] == "rubric" and not (isinstance((p.get("args") or {}).get("criteria"), list)
                                                    and isinstance((p.get("args") or {}).get("answer"), dict)):
                    out.problems.append(f"parts[{i}].args: a rubric part needs criteria [{{id, text, weight}}] and "
                                        "answer {expected, aliases} (the check that runs without a judge)")
            if len(out.problems) == before:
                try:
                    Verifier(kind="composite", args={"mode": "all", "parts": parts})
                    out.parts = parts
                except ValidationError as e:
                    out.problems.extend(p.replace("args.parts", "parts", 1) for p in _pydantic_problems(e))
    if out.problems and before == 0:
        out.reason = "parts"
    return out


def conversation_problems(task: Task, messages: list[dict[str, Any]]) -> list[str]:
    """Does the reference conversation end where it should? A fresh scripted user answers each of the agent's
    messages of the replayed episode in turn: it must not end before the final answer, and must end after it
    (an episode whose user never ends runs into the turn limit and scores 0)."""
    user = make_user(task.user)
    said = [m["content"] for m in messages if m["role"] == "assistant"]
    convo = [{"role": m.role, "content": m.content} for m in task.prompt if m.role == "user"]
    for i, text in enumerate(said, 1):
        convo.append({"role": "assistant", "content": text})
        reply, done = user.reply(convo)
        convo.append({"role": "user", "content": reply})
        if done and i < len(said):
            return [f"the user ended the conversation after your message {i} ({_clip(text, 200)!r}), before the final "
                    "answer; make stop patterns match only the final answer"]
        if not done and i == len(said):
            return [f"the user did not end the conversation after your final answer ({_clip(text, 200)!r}; it replied "
                    f"{_clip(reply, 200)!r}): the final answer must match one of user.stop"]
    return []


def _program_details(details: dict[str, Any]) -> dict[str, Any]:
    """The program verification's details (a part's, when the task's verifier is a composite)."""
    for part in details.get("parts") or []:
        if isinstance(part, dict) and part.get("name") == "verification":
            return part.get("details") or {}
    return details


class ReviewBox:
    def __init__(self):
        self.verdict: tuple[bool, str] | None = None

    def submit_review(self, approve: bool, reason: str) -> ToolOutput:
        """Give your verdict on the task.

        Args:
            approve: true to accept the task, false to reject it
            reason: one sentence: why (for a rejection, what the author must fix)
        """
        if not isinstance(approve, bool):
            raise ValueError("approve must be true or false")
        self.verdict = (approve, str(reason).strip() or ("approved" if approve else "no reason given"))
        return ToolOutput("Review recorded.", final=True)


# ----------------------------------------------------------------------------- the pipeline


class _Synth(LLMPipeline):
    def __init__(self, category: str, out: Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool, store_url: str | None,
                 sandbox: str, max_levels: int, chains: int, seed: int, search: str | SearchBackend, review: bool,
                 workers: int, work_dir: Path | None, agents_dir: Path | None, progress: Progress | None,
                 retry_failed: bool = False):
        if max_levels < 1 or chains < 1:
            raise InputError(f"max_levels and chains must be at least 1 (got {max_levels}, {chains})")
        self.category = " ".join(category.split())
        self.slug = slugify(self.category)
        self.out = Path(out)
        self.seed, self.max_levels, self.chains, self.review_on, self.workers = seed, max_levels, chains, review, workers
        self.backend = sandbox
        work = Path(work_dir) if work_dir is not None else cache_dir() / "synth" / f"{self.slug}-seed{seed}"
        super().__init__(llm=llm, store_url=store_url, run_id=f"general/{self.slug}/seed{seed}", roles=ROLES,
                         agents_dir=agents_dir, work=work, progress=progress, retry_failed=retry_failed)
        self.search = SearchTool(get_backend(search))
        self.plan = plan(max_levels, chains)
        self.timings: dict[str, float] = {}
        self._scrub: dict[str, str] = {str(self.work.resolve()): "<work>"}

    # -- helpers

    def scrub(self, text: str) -> str:
        for old in sorted(self._scrub, key=len, reverse=True):
            text = text.replace(old, self._scrub[old])
        return text

    def _track(self, sbx: Sandbox, label: str) -> None:
        for attr in ("work", "root", "hidden"):
            p = getattr(sbx, attr, None)
            if isinstance(p, str):
                self._scrub[p] = f"<{label}>"

    def toolset(self, role: str, ws: Sandbox | None, host: dict[str, Callable[..., Any]]) -> Toolset:
        """The tools the role's spec lists, from the workspace sandbox and the host functions given."""
        spec = self.specs[role]
        unknown = [t for t in spec.tools if t not in WORKSPACE_TOOLS and t not in host]
        if unknown:
            raise InputError(f"{spec.path}: header: tools: {unknown} are not offered at this stage; available: "
                              f"{', '.join([*WORKSPACE_TOOLS, *host])}")
        parts: list[Toolset] = []
        in_ws = [t for t in spec.tools if t in WORKSPACE_TOOLS]
        if in_ws:
            parts.append(SandboxTools(ws, only=in_ws, timeout=spec.budgets.tool_timeout_s))
        fns = [host[t] for t in spec.tools if t in host]
        if fns:
            parts.append(FunctionTools(fns))
        return Tools(*parts)

    @contextmanager
    def workspace(self, artifact: str | None) -> Iterator[Sandbox]:
        """A fresh workspace sandbox, restored from a stored snapshot when given."""
        root = self.work / "workspace"
        (root / "env").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bundled("envs") / "workspace" / "tools.py", root / "env" / "tools.py")
        manifest = Manifest(name=f"workspace-{self.slug}", family="workspace", tools=[], limits=WORKSPACE_LIMITS)
        sbx = open_sandbox(Pack(manifest, [], root=root), self.backend)
        try:
            self._track(sbx, "workspace")
            sbx.reset()
            if artifact is not None:
                blob = self.store.artifact(self.run_id, artifact)
                if blob is None:
                    raise SynthesisError(f"the store lacks workspace snapshot {artifact!r} of run {self.run_id}")
                res = sbx.call("envgen_import", {"data": base64.b64encode(blob).decode()}, timeout=300)
                if not res.ok:
                    raise SandboxError(f"cannot restore the workspace: {res.content}")
            yield sbx
        finally:
            sbx.close()

    def export(self, ws: Sandbox, path: str = ".") -> bytes:
        res = ws.call("envgen_export", {"path": path}, timeout=300)
        if not res.ok:
            raise SandboxError(f"cannot snapshot the workspace ({path}): {res.content}")
        return base64.b64decode(res.content)

    def inspect(self, ws: Sandbox) -> dict[str, Any]:
        res = ws.call("envgen_inspect", {}, timeout=300)
        if not res.ok:
            raise SandboxError(f"cannot inspect the workspace: {res.content}")
        return json.loads(res.content)

    def state(self, upto: int) -> EnvState:
        """The newest validated env before plan position ``upto``: the tools stage, or a level that added tools."""
        best = None
        for key in self.plan[:upto]:
            st = self.store.stage(self.run_id, key)
            if st and st.status == "done" and st.result and "env" in st.result:
                best = st.result["env"]
        if best is None:
            raise SynthesisError(f"run {self.run_id}: no validated env before stage {self.plan[upto]}")
        return EnvState.from_dict(best)

    @property
    def policy(self) -> str | None:
        """The conversational category's policy document (the pack's instructions), from the database stage."""
        st = self.store.stage(self.run_id, "database")
        policy = ((st.result or {}) if st else {}).get("policy")
        return policy if isinstance(policy, str) and policy.strip() else None

    # -- the run

    def execute(self) -> BuildReport:
        check_out(self.out)
        started = time.perf_counter()
        self.store.open_run(self.run_id, "synth-general", {
            "category": self.category, "seed": self.seed, "max_levels": self.max_levels, "chains": self.chains,
            "sandbox": self.backend, "review": self.review_on, "models": [c.describe() for c in self.pool.configs]})
        for i, key in enumerate(self.plan[:-1]):
            t0 = time.perf_counter()
            how = dict(error=SynthesisError, stopped=f"{self.category!r}: stage {key} stopped",
                       kept="finished stages and paid LLM calls")
            if self.on_cluster:
                # one stage at a time, each a Ray task: a level builds on the env the stages before it left (a
                # raiser may add tools and rows) and a chain's first level avoids the tasks accepted before it,
                # so the stages depend on each other in plan order and cannot run side by side
                st = self.store.stage(self.run_id, key)
                if st is None or st.status != "done":
                    self.run_stages([(key, (i, key))], self._stage, workers=1, thread_name="envgen-general", **how)
                    self.timings[key] = time.perf_counter() - t0
                else:
                    self.progress(1)
                continue
            if self.run_stage(key, self._stage, i, key, **how):
                self.timings[key] = time.perf_counter() - t0
            self.progress(1)
        t0 = time.perf_counter()
        report = self._assemble(started)
        self.timings["pack"] = time.perf_counter() - t0
        report.stages = {k: round(v, 3) for k, v in self.timings.items()}
        report.seconds = time.perf_counter() - started
        self.store.finish_run(self.run_id, "done", report.summary())
        self.progress(1)
        return report

    def _stage(self, ordinal: int, key: str) -> None:
        if key == "database":
            self._database(ordinal, key)
        elif key == "tools":
            self._tools(ordinal, key)
        else:
            chain, level = (int(x) for x in re.match(r"c(\d+)/l(\d+)$", key).groups())
            self._level(ordinal, key, chain, level)

    # -- stage: database

    def _database(self, ordinal: int, key: str) -> None:
        role = "env-builder"
        budget = self.specs[role].budgets.max_attempts
        with self.workspace(None) as ws:
            agent = self.agent(role, key, ordinal, self.toolset(role, ws, {"search": self.search.as_function()}))
            msg = (f"Category: {self.category}\nBuild seed: {self.seed} (let it vary your choices of entities and "
                   f"values)\n\nBuild the category's database at {DB_PATH} and write sources.json (and {POLICY_FILE} "
                   "if the category is conversational), as your instructions say. Reply with a short summary when "
                   "they are in place.")
            try:
                for attempt in range(1, budget + 1):
                    res = agent.send(msg)
                    info = self.inspect(ws)
                    problems = _database_problems(info)
                    self.store.add_result(self.run_id, key, "database", not problems, "; ".join(problems) or None)
                    if not problems or res.outcome in ("turn_budget", "token_budget") or attempt == budget:
                        break
                    msg = "envgen inspected the workspace and found problems:\n" + \
                          "\n".join(f"- {p}" for p in problems) + "\nFix them, then reply with a short summary."
            finally:
                self.finish_agent(agent, key, role)
            if problems:
                raise SynthesisError(f"the env-builder did not produce a usable database ({'; '.join(problems)}); "
                                     f"see {agent.transcript.path}")
            blob = self.export(ws)
        sources = info["sources"]
        self.store.finish_stage(self.run_id, key, {"workspace": f"ws/{key}", "db": info["db"], "sources": sources,
                                                   "policy": info.get("policy"),
                                                   "search_results_seen": list(self.search.seen)},
                                artifacts={f"ws/{key}": blob})

    # -- stage: tools

    def _tools(self, ordinal: int, key: str) -> None:
        role = "tool-writer"
        budget = self.specs[role].budgets.max_attempts
        db = self.store.stage(self.run_id, "database").result
        with self.workspace(db["workspace"]) as ws:
            env = EnvCheck(self, ws, key, None)
            agent = self.agent(role, key, ordinal, self.toolset(role, ws, {"check_tools": env.check_tools}))
            msg = (f"Category: {self.category}\n\nThe database {DB_PATH} has these tables:\n{_db_summary(db['db'])}\n\n"
                   "Write env/tools.py and call check_tools with example calls until it passes, as your instructions "
                   "say. Reply with a one-line summary when it passes.")
            try:
                for attempt in range(1, budget + 1):
                    res = agent.send(msg)
                    check = env.run() if env.examples else CheckResult(False, "FAILED:\n- check_tools was never "
                                                                              "called with example calls")
                    if check.ok or res.outcome in ("turn_budget", "token_budget") or attempt == budget:
                        break
                    msg = ("envgen checked env/tools.py as it is now, with your latest examples:\n" + check.text +
                           "\nFix it, call check_tools until it passes, then reply with a one-line summary.")
                blob = self.export(ws) if check.ok else b""
            finally:
                env.close()
                self.finish_agent(agent, key, role)
        if not check.ok:
            raise SynthesisError(f"the tool-writer did not produce working tools:\n{check.text}")
        state = EnvState(f"ws/{key}", check.env_sha, check.schemas, env.examples, check.tools_source, check.db)
        self.store.finish_stage(self.run_id, key, {"workspace": state.workspace, "env": state.to_dict()},
                                artifacts={state.workspace: blob})

    # -- stage: one level of one chain

    def _level(self, ordinal: int, key: str, chain: int, level: int) -> None:
        previous = None
        if level > 1:
            prev = self.store.stage(self.run_id, f"c{chain}/l{level - 1}")
            if prev is None or prev.status != "done" or (prev.result or {}).get("status") != "validated":
                self.store.finish_stage(self.run_id, key, {"status": "skipped",
                                                           "reason": f"level {level - 1} did not validate"})
                return
            cand = next(c for c in self.store.candidates(self.run_id, "validated") if c.key == f"c{chain}/l{level - 1}")
            previous = {**cand.data, "difficulty": cand.difficulty}
        base = self.state(ordinal)
        role = "task-proposer" if level == 1 else "difficulty-raiser"
        spec = self.specs[role]
        with self.workspace(base.workspace) as ws:
            lv = Level(self, ws, key, chain, level, base, previous, spec.budgets.max_attempts, self.review_on, ordinal)
            host = {"submit_task": lv.submit_task, "check_tools": lv.env.check_tools}
            agent = self.agent(role, key, ordinal, self.toolset(role, ws, host))
            msg = self._level_prompt(base, chain, level, previous)
            try:
                res = self.until_accepted(agent, msg, lv, "submit_task", "prompt, solution and verification")
                blob = self.export(ws) if lv.accepted is not None and lv.state.env_sha != base.env_sha else None
            finally:
                lv.env.close()
                self.finish_agent(agent, key, role)
        if lv.accepted is None:
            reason = lv.last_reason if lv.submissions else f"no submission ({res.outcome})"
            self.store.finish_stage(self.run_id, key, {"status": "rejected", "reason": reason,
                                                       "submissions": lv.submissions},
                                    candidates=[{"key": key, "kind": "task", "status": "rejected", "reason": reason,
                                                 "data": {"chain": chain, "level": level,
                                                          "submissions": lv.submissions}}])
            return
        task = lv.accepted["task"]
        result: dict[str, Any] = {"status": "validated", "task_id": task["id"], "difficulty": task["difficulty"],
                                  "submissions": lv.submissions}
        artifacts = {}
        if blob is not None:  # the raiser added tools: this level's env becomes the newest env
            state = lv.state
            state.workspace = f"ws/{key}"
            result["env"] = state.to_dict()
            artifacts[state.workspace] = blob
        self.store.finish_stage(self.run_id, key, result, artifacts=artifacts,
                                candidates=[{"key": key, "kind": "task", "status": "validated",
                                             "difficulty": task["difficulty"],
                                             "data": {**lv.accepted, "chain": chain, "level": level}}])

    def _level_prompt(self, base: EnvState, chain: int, level: int, previous: dict[str, Any] | None) -> str:
        head = (f"Category: {self.category}\n\nDatabase ({DB_PATH}, open it as state/db.sqlite from tools):\n"
                f"{_db_summary(base.db)}\n\nTools the agent has:\n{_tools_summary(base.schemas)}\n")
        if self.policy is not None:
            head += (f"\nThis category is conversational. The agent follows this policy (its instructions):\n"
                     f"<policy>\n{_clip(self.policy, 8000)}\n</policy>\nEvery task is a conversation with a simulated "
                     "customer: give user (what the customer knows and tells only when asked, and when it leaves) and "
                     "messages (what the agent says to it), and parts that check what the agent told the customer "
                     "(said) or that nothing changed where the policy says to refuse (no_write).\n")
        if level == 1:
            others = [c.data["task"]["prompt"][0]["content"] for c in self.store.candidates(self.run_id, "validated")
                      if c.data.get("level") == 1]
            avoid = ("\nTasks already accepted in this environment (propose a different one):\n" +
                     "\n".join(f"- {_clip(p, 300)}" for p in others) + "\n") if others else ""
            return head + avoid + "\nPropose a simple task (level 1) and hand it in with submit_task."
        p = previous
        return (head + f"\nThe accepted level {level - 1} task (its solution makes {p['difficulty']} tool calls):\n"
                f"Prompt: {p['task']['prompt'][0]['content']}\n\nSolution:\n```python\n{p['solution']}\n```\n\n"
                f"Verification:\n```python\n{p['verification']}\n```\n"
                f"Params: {json.dumps(_program_args(p['task']).get('params', {}), ensure_ascii=False)}\n"
                + "".join(f"{k.capitalize()}: {json.dumps(p[k], ensure_ascii=False)}\n" for k in ("user", "messages", "parts")
                          if p.get(k) is not None) + "\n"
                f"Write level {level}: a harder task whose solution needs more than {p['difficulty']} tool calls, and "
                "hand it in with submit_task.")

    # -- the reviewer

    def review(self, lv: Level, task: Task, calls: list[dict[str, Any]], state: EnvState, n: int,
               messages: list[dict[str, Any]] | None = None) -> tuple[bool, str]:
        role = "reviewer"
        box = ReviewBox()
        agent = self.agent(role, lv.stage, lv.ordinal, self.toolset(role, None, {"submit_review": box.submit_review}),
                           suffix=f"-{n}")
        steps = "\n".join(f"{i}. {c['tool']}({json.dumps(c['args'], ensure_ascii=False)}) -> "
                          f"{_clip(self.scrub(c['content']), 500)}" for i, c in enumerate(calls, 1))
        msg = (f"Task prompt:\n{task.prompt[0].content}\n\nTools the agent has:\n{_tools_summary(state.schemas)}\n\n"
               f"Reference trajectory ({len(calls)} tool calls):\n{steps}\n\nReference final answer: "
               f"{task.reference.answer}\n\n")
        if task.user is not None:
            talk = "\n".join(f"{m['role']} (turn {m['turn']}): {_clip(m['content'], 300)}" for m in messages or [])
            msg += (f"The agent talks with a simulated customer (hidden from the agent): "
                    f"{json.dumps(task.user.model_dump(exclude_none=True), ensure_ascii=False)}\n"
                    f"The reference conversation:\n{talk}\n\n")
            if self.policy is not None:
                msg += f"The policy the agent follows:\n{_clip(self.policy, 8000)}\n\n"
        msg += "Review the task and call submit_review."
        try:
            for _ in range(self.specs[role].budgets.max_attempts):
                res = agent.send(msg)
                if box.verdict is not None or res.outcome != "answered":
                    break
                msg = "Call submit_review with approve (true/false) and a one-sentence reason."
        finally:
            self.finish_agent(agent, lv.stage, role)
        if box.verdict is None:
            return False, "the reviewer gave no verdict"
        return box.verdict

    # -- the pack

    def _assemble(self, started: float) -> BuildReport:
        levels, rejected, validated = [], [], []
        for key in self.plan[2:-1]:
            st = self.store.stage(self.run_id, key)
            r = (st.result or {}) if st else {}
            levels.append({"stage": key, "status": r.get("status", "pending"), "difficulty": r.get("difficulty"),
                           "submissions": r.get("submissions", 0), "reason": r.get("reason")})
        cands = {c.key: c for c in self.store.candidates(self.run_id)}
        for lv in levels:
            c = cands.get(lv["stage"])
            if c is None:
                continue
            if c.status == "validated":
                validated.append(c)
            else:
                rejected.append({"task": f"{self.slug}-{lv['stage'].replace('/', '-')}", "reason": c.reason or ""})
        state = self.state(len(self.plan) - 1)
        blob = self.store.artifact(self.run_id, state.workspace)
        files = _tar_files(blob)
        build = self.work / "final"
        shutil.rmtree(build, ignore_errors=True)
        _write_tree(files, build / "env", prefix="env/")
        (build / "hidden" / "verify").mkdir(parents=True)
        tasks = []
        for c in validated:
            task = Task.model_validate(c.data["task"])
            (build / "hidden" / "verify" / f"{task.id}.py").write_text(c.data["verification"], encoding="utf-8")
            tasks.append(task)
        schemas = self._schemas(build)
        db_stage = self.store.stage(self.run_id, "database").result or {}
        sources = _source_names(db_stage.get("sources"))
        manifest = Manifest(
            name=f"general-{self.slug}", family="general", category=self.slug,
            description=f"Tool-use tasks for the category {self.category!r}: a SQLite database and tools built by an "
                        "LLM agent, tasks at rising difficulty with program verifiers" +
                        (", conversations with a simulated customer under a written policy." if self.policy else "."),
            tools=schemas, limits=PACK_LIMITS, instructions=self.policy,
            provenance=Provenance(generator=GENERATOR, models=sorted(self.models | _models(self.store, self.run_id)),
                                  sources=sources, seed=self.seed))
        staged = save(Pack(manifest, tasks), self.work / "staged", env_from=build / "env", hidden_from=build / "hidden")
        # every expectation is recorded again on the final env (later levels may have added rows and tables)
        fresh = [_without_expectation(t) for t in staged.tasks]
        gated = record_and_gate(staged, fresh, workers=self.workers, sandbox=self.backend) if tasks else []
        results = [r for _, r in gated]
        kept = [t for t, r in gated if r.passed]
        for r in results:
            if not r.passed:
                rejected.append({"task": r.task_id, "reason": f"final gate: {r.reason}"})
        (build / "hidden-kept" / "verify").mkdir(parents=True)
        for t in kept:
            shutil.copyfile(build / "hidden" / "verify" / f"{t.id}.py", build / "hidden-kept" / "verify" / f"{t.id}.py")
        by_reason = Counter(reason_key(r["reason"]) if r["reason"].startswith("final gate") else r["reason"]
                            for r in rejected)
        level_keys = {lv["stage"] for lv in levels}
        failures = Counter(r.kind for r in self.store.results(self.run_id) if not r.passed and r.stage in level_keys)
        spent = self.store.llm_spend(self.run_id)
        hist = Counter(t.difficulty for t in kept)
        final = staged.with_tasks(kept)
        final.manifest.stats["build"] = {"proposed": sum(1 for lv in levels if lv["status"] in ("validated", "rejected")),
                                         "validated": len(validated), "kept": len(kept),
                                         "rejected_by_reason": dict(by_reason), "llm": spent, "sandbox": self.backend}
        save(final, self.out, env_from=staged.env_dir, hidden_from=build / "hidden-kept")
        return BuildReport(
            family="general", out=self.out.resolve(), packs=["."], name=manifest.name, category=self.slug,
            seed=self.seed, proposed=final.manifest.stats["build"]["proposed"], kept=len(kept),
            rejected_by_reason=dict(by_reason.most_common()), rejections=rejected,
            difficulty={str(k): hist[k] for k in sorted(hist)}, workers=self.workers, sandbox=self.backend,
            not_applicable=not_applicable(results),
            details={"validated": len(validated), "submissions": sum(lv["submissions"] or 0 for lv in levels),
                     "failures_by_reason": dict(failures.most_common()), "levels": levels,
                     "llm": {"session": self.usage.to_dict(), "spent": dict(spent)}, "run_id": self.run_id,
                     "store": _safe_url(self.store.url), "transcripts": str(self.transcripts)})

    def _schemas(self, build: Path) -> list[dict[str, Any]]:
        """The final env's tool schemas, derived by the runtime inside a sandbox (the code never runs on the host)."""
        pack = Pack(Manifest(name=f"general-{self.slug}", family="general", tools=[], limits=PACK_LIMITS), [],
                    root=build)
        with open_sandbox(pack, self.backend) as sbx:
            return list(sbx.tools)


def _program_args(task: dict[str, Any]) -> dict[str, Any]:
    """The program verification's args of a stored task (its part's, when the verifier is a composite)."""
    v = task["verifier"]
    if v["kind"] == "composite":
        return next((p.get("args") or {} for p in v["args"]["parts"] if p.get("name") == "verification"), {})
    return v.get("args") or {}


def _without_expectation(task: Task) -> Task:
    out = task.model_copy(deep=True)
    v = out.verifier
    for args in [p.get("args") or {} for p in v.args.get("parts") or []] if v.kind == "composite" else [v.args]:
        if isinstance(args.get("changes"), dict):
            args["changes"].pop("expected", None)
    return out


def _database_problems(info: dict[str, Any]) -> list[str]:
    problems = []
    if info.get("db_error"):
        problems.append(info["db_error"])
    elif not info["db"]["tables"]:
        problems.append(f"{DB_PATH} has no tables")
    elif sum(t["rows"] for t in info["db"]["tables"].values()) < 5:
        problems.append(f"{DB_PATH} holds fewer than 5 rows in all; tasks need data to search and compare")
    if info.get("sources_error"):
        problems.append(info["sources_error"])
    elif not isinstance(info.get("sources"), list) or not info["sources"]:
        problems.append("sources.json must be a non-empty JSON list (one entry per source, or a 'synthetic' entry)")
    policy = info.get("policy")
    if info.get("policy_error"):
        problems.append(info["policy_error"])
    elif policy is not None and not policy.strip():
        problems.append(f"{POLICY_FILE} is empty; write the policy the agent must follow, or remove the file if the "
                        "category is not conversational")
    elif policy is not None and len(policy) > MAX_INSTRUCTIONS:
        problems.append(f"{POLICY_FILE} holds {len(policy)} characters; the agent's instructions take at most "
                        f"{MAX_INSTRUCTIONS}: shorten it")
    return problems


def _source_names(sources: Any) -> list[str]:
    out = []
    for s in sources or []:
        if isinstance(s, str):
            out.append(s)
        elif isinstance(s, dict):
            name = s.get("url") or s.get("source") or s.get("title")
            if name:
                out.append(str(name))
    return sorted(dict.fromkeys(out))


def _models(store: Store, run_id: str) -> set[str]:
    return {r.model for r in store.agent_runs(run_id)}


def _safe_url(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@]*@", r"//\1:***@", url)


def synthesize(category: str, out: str | Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool,
               store_url: str | None = None, sandbox: str = "local", max_levels: int = 3, chains: int = 1,
               seed: int = 0, search: str | SearchBackend = "none", review: bool = True, workers: int = 2,
               work_dir: str | Path | None = None, agents_dir: str | Path | None = None,
               progress: Progress | None = None, executor: str = "local", ray_address: str | None = None,
               lease_s: float = LEASE_S, retry_failed: bool = False) -> BuildReport:
    """Build a pack for ``category`` with LLM agents (DeepSeek-V3.2's general-agent synthesis), resumably.

    ``chains`` independent tasks are proposed, each raised up to ``max_levels`` levels of difficulty.
    State (stages, candidates, paid LLM calls) lives in ``store_url`` (default: ``ENVGEN_STORE``, else a SQLite
    file in ~/.cache/envgen), keyed by category and seed: running the same command again resumes. Transcripts
    and scratch files go under ``work_dir`` (default ~/.cache/envgen/synth/CATEGORY-seedSEED).
    ``progress(1)`` is called once per stage (``stage_count(max_levels, chains)`` calls).
    ``executor="ray"`` runs every stage as a Ray task on the cluster at ``ray_address``, one after another (each
    builds on the stages before it), its state in ``store_url``, which every node must reach; the pack is the
    one a local build writes. ``retry_failed``: stages that failed before ask the model afresh instead of
    replaying their cached calls.
    """
    kwargs = dict(category=category, out=Path(out), llm=llm, store_url=store_url, sandbox=sandbox,
                  max_levels=max_levels, chains=chains, seed=seed, search=search, review=review, workers=workers,
                  work_dir=Path(work_dir) if work_dir is not None else None,
                  agents_dir=Path(agents_dir) if agents_dir is not None else None, progress=progress,
                  retry_failed=retry_failed)
    synth = _Synth(**kwargs)
    if check_executor(executor) == "ray":
        if not isinstance(search, str):
            raise InputError("a general build on Ray takes search='none', 'web' or 'local' (each task builds its "
                             f"own backend), not {type(search).__name__}")
        synth.on_ray(_Synth, {**kwargs, "store_url": synth.store.url, "work_dir": synth.work}, address=ray_address,
                     lease_s=lease_s)
    return synth.run()
