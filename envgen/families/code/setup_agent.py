"""The environment-setup agent (DeepSeek-V3.2's method): when the language's recipe cannot make a task's
tests run, an LLM agent with a shell in the task's Docker sandbox sets the environment up, and the
steps it marks as set-up steps become the repository environment's recipe.

When (``pipeline._one``): the repository environment image fails to build (``EnvironmentFailed``), or
validation finds that the target tests did not run at all (``tests_did_not_run``). The agent works as
root in a container with the package registry reachable (bridge network; the base images carry the CA
bundle): from the task image when the environment built, else from an environment of the recipe's steps
that did succeed (the venv at least). The task's snapshot is checked out at /work/repo with the test
patch applied.

Tools (role ``agents/env-setup.md``):

- ``bash(command)``: exploration. Runs (bash, in /work/repo, a timeout, output clipped), is logged with its
  exit code, and never enters the recipe;
- ``step(command)``: a set-up step. Runs with ``/bin/sh`` in /work/repo as the task image's build will run
  it, and is recorded only when it exits 0 (a failed step is not a step);
- ``run_tests()``: the target files run as validation runs them (the kit's ``matrix``: a fresh checkout,
  the test patch staged as for a submission, network off) at base and with the gold patch, once each;
  the answer lists every test's outcome, which target files ran, and the output's tail;
- ``done(summary)``: envgen replays the recorded steps alone in a fresh container, exactly as the task
  layer will (``repo_image.task_instructions``: a clean checkout without the test patch, removed after),
  and runs the tests there. Only when every target file reports tests that ran (passed or failed: the goal
  is a working environment, not a fix) does the session end; otherwise the agent hears why and goes on.

Why ``step`` apart from ``bash``: exploration (reading CI files, a trial install, ``pip download``) must not
leak into the recipe. Why the replay at ``done``: a change made with ``bash`` instead of ``step``, or a step
that needs the test patch's files, is caught while the agent can still fix it.

The recipe is the original one (truncated to the steps that built, when the environment failed) with the
agent's steps appended to its ``task_steps``. ``RecipeBook`` stores it in the state store, keyed by
repository + setup commit + the original recipe's key, so a rerun replays it without a model call; either
way the pipeline rebuilds the images from the recipe and validates deterministically: the agent never
runs at validation time.

Budgets: model turns and tokens (the ``Agent``), tool calls and wall time (the tools end the session),
a timeout per command. A session that ends without a working replay is a rejection with its reason.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import tarfile
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from ...build.pipeline import LLMPipeline
from ...errors import EnvironmentFailed, InputError
from ...llm.agent import FunctionTools, ToolOutput, error_output
from ...llm.client import LLMConfig, LLMPool
from ...sandbox.docker import LABEL, OWNER_LABELS
from ...sandbox.images import SANDBOX_UID, VERIFIERS_DIR, stderr_log
from ...store import Store
from .lang import Recipe, Step
from .packs import slug
from .repo_image import REPO_IN_BUILD, build_environment, make_snapshot, task_instructions

ROLE = "env-setup"
BOOK_RUN = "code-setup-recipes"
"""The state store's run that holds recorded recipes (shared by every code build using the store)."""
SETUP_DIR = "/opt/envgen/setup"
"""Where the session keeps the snapshot and patches inside its containers (never in a pack image)."""
CHECK_WORK = "/tmp/envgen-setup-tests"
RAN = ("passed", "failed", "xfail")
"""Outcomes of a test that executed (an error at setup or collection, or a skip, is not a run)."""
_BOOT = ("import json, sys; sys.path.insert(0, {kit!r}); from envgen_verifiers.tests import matrix; "
         "print(json.dumps(matrix(json.load(open({spec!r})))))")


@dataclass
class SetupBudgets:
    """Limits of one set-up session; None takes the role file's budget (``agents/env-setup.md``)."""

    max_turns: int | None = None
    max_tool_calls: int = 60
    max_tokens: int | None = None
    max_seconds: float = 1800.0
    command_timeout_s: float | None = None
    test_timeout_s: float = 300.0
    output_chars: int = 6000
    """Tool output shown to the model: head and tail of longer output."""


@dataclass
class Rescue:
    """What a session gives the pipeline: a recipe to rebuild with, or the reason there is none."""

    recipe: Recipe | None
    info: dict[str, Any]
    reason: str = ""


# ---------------------------------------------------------------- when the agent takes over


def tests_did_not_run(v) -> bool:
    """Whether a failed validation never ran a test with the gold patch (an environment problem, not a
    task problem): every gold run reported nothing that executed, or validation says so itself."""
    if getattr(v, "accepted", False):
        return False
    if str(getattr(v, "reason", "")).startswith("tests did not run"):
        return True
    gold = [r for r in v.runs if r.get("mode") == "gold"]
    if any(r.get("error") or r.get("timed_out") for r in v.runs):
        return False  # a patch that does not apply, or tests that hang: the task's problem, not the set-up's
    return bool(gold) and all(not any((r.get("counts") or {}).get(o) for o in RAN) for r in gold)


def ran_per_file(outcomes: dict[str, str], files: list[str]) -> dict[str, int]:
    """How many tests of each target file executed (pytest ids ``path::...``, unittest ``module.Class.test``)."""
    out = {}
    for f in files:
        mod = f[:-3].replace("/", ".") if f.endswith(".py") else f
        out[f] = sum(1 for t, o in outcomes.items() if o in RAN and t.startswith((f + "::", mod + ".")))
    return out


def truncated(recipe: Recipe, failed: EnvironmentFailed) -> Recipe:
    """The recipe without its failed step and what followed: the start of the agent's environment."""
    rcs = [getattr(s, "rc", None) for s in failed.steps]
    bad = next((i for i, rc in enumerate(rcs) if rc not in (0, None)), None)
    keep = bad if bad is not None else sum(1 for rc in rcs if rc == 0)
    return replace(recipe, steps=list(recipe.steps[:keep]), task_steps=[],
                   notes=[*recipe.notes, f"set-up agent: kept {keep} of {len(recipe.steps)} environment step(s)"])


def with_steps(base: Recipe, commands: list[str], original_key: str) -> Recipe:
    steps = [Step(f"setup-{i + 1}", c) for i, c in enumerate(commands)]
    return replace(base, task_steps=[*base.task_steps, *steps],
                   notes=[*base.notes, f"set-up agent: {len(steps)} step(s) recorded (recipe {original_key} failed)"])


def recipe_from_dict(d: dict) -> Recipe:
    keys = Recipe.__dataclass_fields__
    args = {k: v for k, v in d.items() if k in keys}
    args["toolchains"] = tuple(args.get("toolchains") or ())
    args["steps"] = [Step(**s) for s in args.get("steps") or []]
    args["task_steps"] = [Step(**s) for s in args.get("task_steps") or []]
    return Recipe(**args)


# ---------------------------------------------------------------- recorded recipes


class RecipeBook:
    """Recipes the agent recorded, in the state store: repository + setup commit + original recipe key."""

    def __init__(self, store: Store):
        self.store = store
        store.open_run(BOOK_RUN, "code-setup-recipes", {})

    @staticmethod
    def key(repo: str, commit: str, recipe_key: str) -> str:
        return "recipe/" + hashlib.sha256(f"{repo}|{commit}|{recipe_key}".encode()).hexdigest()[:32]

    def get(self, repo: str, commit: str, recipe_key: str) -> tuple[Recipe, dict] | None:
        st = self.store.stage(BOOK_RUN, self.key(repo, commit, recipe_key))
        if st is None or st.status != "done" or not st.result:
            return None
        return recipe_from_dict(st.result["recipe"]), dict(st.result.get("agent") or {})

    def put(self, repo: str, commit: str, recipe_key: str, recipe: Recipe, info: dict) -> None:
        self.store.finish_stage(BOOK_RUN, self.key(repo, commit, recipe_key),
                                {"repo": repo, "setup_commit": commit, "recipe_key": recipe_key,
                                 "recipe": recipe.to_dict(), "agent": info})


# ---------------------------------------------------------------- where the commands run


class Bench(Protocol):
    """The session's sandbox: an exploration shell, the validation-shaped test run, and the replay check."""

    def shell(self, command: str, timeout: float, *, posix_sh: bool) -> tuple[int, str]:
        """Run in the working tree as root; (exit code, output); 124 when it timed out."""

    def tests(self, timeout: float) -> dict:
        """The kit's matrix result (modes base and gold, one run each) in the current environment."""

    def replay(self, commands: list[str], timeout: float) -> tuple[str | None, dict | None]:
        """Replay the steps alone in a fresh environment: (why it failed, None) or (None, matrix result)."""

    def close(self) -> None: ...


def _tar(entries: dict[str, bytes | Path]) -> bytes:
    """A tar of files (bytes) and directories (Path: added recursively), owned by root, world-readable."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        def reset(ti: tarfile.TarInfo) -> tarfile.TarInfo:
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mode = 0o755 if ti.isdir() else 0o644
            return ti
        for name, data in entries.items():
            if isinstance(data, Path):
                tar.add(str(data), arcname=name, filter=reset)
            else:
                ti = reset(tarfile.TarInfo(name))
                ti.size = len(data)
                tar.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class DockerBench:
    """Containers of the start image, as root, on the bridge network while setting up; tests run as the
    sandbox user with the container taken off the network, as validation runs them."""

    ENV: ClassVar[dict[str, str]] = {"HOME": "/root", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_PROGRESS_BAR": "off",
           "DEBIAN_FRONTEND": "noninteractive"}

    def __init__(self, client, image: str, *, snapshot: Path, base: str, test_patch: str, gold_patch: str,
                 recipe: Recipe, files: list[str], memory_mb: int = 4096):
        self.client, self.image, self.snapshot, self.recipe = client, image, snapshot, recipe
        spec = {"git_dir": f"{SETUP_DIR}/repo.git", "work": CHECK_WORK, "base": base, "framework": recipe.framework,
                "options": recipe.options, "files": files, "python": recipe.python, "pythonpath": recipe.pythonpath, "runs": 1,
                "test_patch": f"{SETUP_DIR}/test.patch",
                "modes": [{"name": "base", "submission": None}, {"name": "gold", "submission": f"{SETUP_DIR}/gold.patch"}]}
        self.spec = spec
        self.files = {"test.patch": test_patch.encode("utf-8", "surrogateescape"), "repo.git": snapshot}
        self.gold = gold_patch.encode("utf-8", "surrogateescape")
        """Copied in only while the tests run: the agent never reads the fix (nor could a step carry it)."""
        self.memory_mb = memory_mb
        self.containers: list = []
        self.main = self._start()
        checkout = (f"mkdir -p {REPO_IN_BUILD} && git --git-dir={SETUP_DIR}/repo.git --work-tree={REPO_IN_BUILD} "
                    f"checkout -f HEAD -- . && git --git-dir={SETUP_DIR}/repo.git --work-tree={REPO_IN_BUILD} reset -q "
                    f"&& cd {REPO_IN_BUILD} && git --git-dir={SETUP_DIR}/repo.git --work-tree={REPO_IN_BUILD} apply "
                    f"--whitespace=nowarn {SETUP_DIR}/test.patch")
        rc, out = self._exec(self.main, checkout, 300, cwd="/")
        if rc != 0:
            raise EnvironmentFailed(f"the set-up sandbox could not check the task out: {out[-500:]}", [], out[-1500:])

    def _start(self):
        c = self.client.containers.run(
            self.image, ["sleep", "infinity"], user="root", detach=True, init=True, network_mode="bridge",
            working_dir="/", mem_limit=f"{self.memory_mb}m", pids_limit=4096, environment=self.ENV,
            labels={LABEL: "1", "envgen.setup": "1", **OWNER_LABELS})
        self.containers.append(c)
        c.put_archive("/", _tar({SETUP_DIR.lstrip("/") + "/" + k: v for k, v in self.files.items()}))
        c.put_archive("/", _tar({SETUP_DIR.lstrip("/") + "/spec.json": json.dumps(self.spec).encode()}))
        return c

    @staticmethod
    def _exec(c, command: str, timeout: float, *, cwd: str = REPO_IN_BUILD, user: str = "root",
              shell: str = "/bin/sh", env: dict | None = None) -> tuple[int, str]:
        cmd = ["timeout", "-k", "5", f"{max(1, int(timeout))}", shell, "-c", command]
        res = c.exec_run(cmd, user=user, workdir=cwd, environment={**DockerBench.ENV, **(env or {})})
        return res.exit_code, (res.output or b"").decode("utf-8", errors="replace")

    def shell(self, command: str, timeout: float, *, posix_sh: bool) -> tuple[int, str]:
        return self._exec(self.main, command, timeout, shell="/bin/sh" if posix_sh else "/bin/bash")

    def _tests(self, c, timeout: float) -> dict:
        bridge = self.client.networks.get("bridge")
        bridge.disconnect(c, force=True)
        c.put_archive("/", _tar({SETUP_DIR.lstrip("/") + "/gold.patch": self.gold}))
        try:
            self._exec(c, f"rm -rf {CHECK_WORK}", 60, cwd="/")
            boot = _BOOT.format(kit=VERIFIERS_DIR, spec=f"{SETUP_DIR}/spec.json")
            limit = 2 * (timeout + 60) + 60
            rc, out = self._exec(c, f"python3 -I -B -c {json.dumps(boot)}", limit, cwd="/tmp",
                                 user=f"{SANDBOX_UID}:{SANDBOX_UID}",
                                 env={"TZ": "UTC", "PYTHONHASHSEED": "0", "HOME": "/tmp"})
        finally:
            self._exec(c, f"rm -f {SETUP_DIR}/gold.patch", 60, cwd="/")
            bridge.connect(c)
        for line in reversed(out.strip().splitlines()):
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except json.JSONDecodeError:
                    break
        return {"runs": [], "error": f"the test runner exited with {rc}: {out.strip()[-1500:]}"}

    def tests(self, timeout: float) -> dict:
        self.spec["timeout_s"] = timeout
        self.main.put_archive("/", _tar({SETUP_DIR.lstrip("/") + "/spec.json": json.dumps(self.spec).encode()}))
        return self._tests(self.main, timeout)

    def replay(self, commands: list[str], timeout: float) -> tuple[str | None, dict | None]:
        lines = task_instructions(replace(self.recipe, task_steps=[Step(f"setup-{i + 1}", c)
                                                                   for i, c in enumerate(commands)]))
        c = self._start()
        try:
            for line in lines:
                word, _, rest = line.partition(" ")
                if word == "USER":
                    continue
                if word == "COPY" and rest.split()[0] == "repo.git":
                    c.put_archive("/", _tar({rest.split()[1].lstrip("/"): self.snapshot}))
                elif word == "RUN":
                    rc, out = self._exec(c, rest, timeout, cwd="/")
                    if rc != 0:
                        return f"`{rest}` exited with {rc}; its output ended with:\n{out[-2000:]}", None
                else:  # an instruction this check cannot mirror: the pipeline's image build is the judge
                    return None, None
            return None, self._tests(c, self.spec.get("timeout_s", 300.0))
        finally:
            self.containers.remove(c)
            _remove(c)

    def close(self) -> None:
        for c in self.containers:
            _remove(c)
        self.containers.clear()


def _remove(c) -> None:
    with contextlib.suppress(Exception):  # already gone; the envgen.sandbox label lets a sweep find leftovers
        c.remove(force=True)


# ---------------------------------------------------------------- the session's tools


def clip(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    head = n // 3
    return text[:head] + f"\n...[{len(text) - n} characters cut]...\n" + text[-(n - head):]


def describe_tests(result: dict, files: list[str], n: int) -> tuple[str, bool]:
    """The run_tests answer for the model, and whether every target file ran tests with the gold patch."""
    if result.get("error") or not result.get("runs"):
        return f"The tests could not be run: {result.get('error') or 'no result'}", False
    runs = {r["mode"]: r for r in result["runs"]}
    lines = [f"Target test files: {', '.join(files)}"]
    for mode, label in (("base", "at base with the test patch"), ("gold", "with the reference fix")):
        r = runs.get(mode) or {}
        counts: dict[str, int] = {}
        for o in (r.get("outcomes") or {}).values():
            counts[o] = counts.get(o, 0) + 1
        what = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no test reported"
        extra = " (timed out)" if r.get("timed_out") else f" (error: {r['error']})" if r.get("error") else ""
        lines.append(f"{label}: {what}; exit code {r.get('rc')}{extra}")
    base, gold = (runs.get("base") or {}).get("outcomes") or {}, (runs.get("gold") or {}).get("outcomes") or {}
    ids = sorted(set(base) | set(gold))
    if ids:
        lines.append("Per test (base -> with the fix):")
        lines += [f"  {t}: {base.get(t, 'missing')} -> {gold.get(t, 'missing')}" for t in ids[:80]]
        if len(ids) > 80:
            lines.append(f"  ... {len(ids) - 80} more")
    per = ran_per_file(gold, files)
    missing = [f for f, k in per.items() if not k]
    ok = not missing
    lines.append("Target tests ran: yes" if ok else
                 f"Target tests ran: NO for {', '.join(missing)} (no test of the file executed: a collection or "
                 "import error, or every test errored at setup)")
    tail = (runs.get("gold") or {}).get("tail") or ""
    lines.append("Output tail (with the fix):\n" + clip(tail, max(500, n - sum(len(x) + 1 for x in lines))))
    return "\n".join(lines), ok


class SetupSession:
    """The agent's tools over a ``Bench``, with the budgets; ``recipe`` is set once ``done`` is accepted."""

    def __init__(self, bench: Bench, base: Recipe, original_key: str, files: list[str], budgets: SetupBudgets,
                 command_timeout_s: float):
        self.bench, self.base, self.original_key, self.files, self.budgets = bench, base, original_key, files, budgets
        self.timeout = command_timeout_s
        self.steps: list[str] = []
        self.log: list[dict[str, Any]] = []
        self.calls = 0
        self.t0 = time.monotonic()
        self.stopped: str | None = None
        self.recipe: Recipe | None = None
        self.summary = ""
        self.last_ran = False

    def tools(self) -> list[Callable[..., Any]]:
        return [self.bash, self.step, self.run_tests, self.done]

    def _guard(self, tool: str) -> ToolOutput | None:
        self.calls += 1
        if self.calls > self.budgets.max_tool_calls:
            self.stopped = f"its tool-call budget ({self.budgets.max_tool_calls} calls)"
        elif time.monotonic() - self.t0 > self.budgets.max_seconds:
            self.stopped = f"its wall-time budget ({self.budgets.max_seconds:g} s)"
        if self.stopped:
            self.log.append({"tool": tool, "rc": None, "refused": self.stopped})
            return ToolOutput(f"The session is over: it used up {self.stopped}.", ok=False, final=True)
        return None

    def _command(self, tool: str, command: Any) -> tuple[int, str] | ToolOutput:
        if (stop := self._guard(tool)) is not None:
            return stop
        if not isinstance(command, str) or not command.strip():
            self.log.append({"tool": tool, "command": command, "rc": None, "error": "empty command"})
            return error_output("bad_arguments", f"{tool}: `command` must be a non-empty shell command string")
        rc, out = self.bench.shell(command, self.timeout, posix_sh=tool == "step")
        entry = {"tool": tool, "command": command[:2000], "rc": rc}
        if tool == "step":
            entry["recorded"] = rc == 0
            if rc == 0:
                self.steps.append(command)
        self.log.append(entry)
        return rc, out

    def _answer(self, rc: int, out: str, note: str = "") -> str:
        timed = f" (timed out after {self.timeout:g} s)" if rc == 124 else ""
        return f"exit code {rc}{timed}{note}\n" + clip(out, self.budgets.output_chars)

    def bash(self, command: str) -> ToolOutput:
        """Run a shell command (bash) in /work/repo as root, for exploration; it is NOT recorded in the recipe.

        Args:
            command: the command line
        """
        res = self._command("bash", command)
        if isinstance(res, ToolOutput):
            return res
        return ToolOutput(self._answer(*res), ok=res[0] == 0)

    def step(self, command: str) -> ToolOutput:
        """Run a set-up step (/bin/sh, in /work/repo, as root) and record it in the environment's recipe when it
        exits 0. Use it for every command that changes the environment (installs, builds, configuration).

        Args:
            command: the command line, as it will be replayed in the task image's build
        """
        res = self._command("step", command)
        if isinstance(res, ToolOutput):
            return res
        rc, out = res
        note = f"; recorded as set-up step {len(self.steps)}" if rc == 0 else "; NOT recorded (it failed)"
        return ToolOutput(self._answer(rc, out, note), ok=rc == 0)

    def run_tests(self) -> ToolOutput:
        """Run the target test files as validation will (fresh checkout, test patch applied, no network), at base
        and with the reference fix; reports each test's outcome and whether the target tests ran."""
        if (stop := self._guard("run_tests")) is not None:
            return stop
        text, ok = describe_tests(self.bench.tests(self.budgets.test_timeout_s), self.files, self.budgets.output_chars)
        self.last_ran = ok
        self.log.append({"tool": "run_tests", "rc": 0 if ok else 1, "ran": ok})
        return ToolOutput(text, ok=True)

    def done(self, summary: str) -> ToolOutput:
        """Finish: envgen replays your recorded steps alone in a fresh container and runs the tests there; the
        session ends only if the target tests run.

        Args:
            summary: what was wrong and what your steps do
        """
        if (stop := self._guard("done")) is not None:
            return stop
        why, result = self.bench.replay(list(self.steps), self.timeout)
        if why is not None:
            self.log.append({"tool": "done", "rc": 1, "replay": "a step failed"})
            return error_output("replay_failed", "your recorded steps were replayed in a fresh container (clean "
                                f"checkout without the test patch, as the task image's build runs them) and {why}")
        if result is not None:
            text, ok = describe_tests(result, self.files, self.budgets.output_chars)
            if not ok:
                self.log.append({"tool": "done", "rc": 1, "replay": "tests did not run"})
                return error_output("replay_failed", "after replaying your recorded steps alone in a fresh container "
                                    "the target tests do not run (did you change the environment with bash instead "
                                    f"of step?):\n{text}")
        self.log.append({"tool": "done", "rc": 0, "replay": "checked" if result is not None else "not checkable"})
        self.summary = str(summary)[:2000]
        self.recipe = with_steps(self.base, self.steps, self.original_key)
        return ToolOutput(f"Accepted: {len(self.steps)} recorded step(s) make the target tests run.", final=True)


# ---------------------------------------------------------------- the agent


def brief(cand, recipe: Recipe, files: list[str], why: str, tail: str, failed: EnvironmentFailed | None) -> str:
    """The first user message: the repository, what the recipe did and how it failed."""
    steps = "\n".join(f"  {s.name}: {s.run}" for s in [*recipe.steps, *recipe.task_steps]) or "  (none)"
    if failed is not None:
        rcs = {getattr(s, "name", ""): getattr(s, "rc", None) for s in failed.steps}
        steps = "\n".join(f"  {s.name} (exit {rcs.get(s.name)}): {s.run}" for s in recipe.steps) or "  (none)"
    where = ("The environment image failed to build; your container has the steps before the failing one."
             if failed is not None else "The environment built, but the target tests do not run.")
    return (f"Repository: {cand.repo} at {cand.base_commit[:12]} (checked out at {REPO_IN_BUILD}, test patch applied)\n"
            f"Test runner: {recipe.framework}; interpreter: {recipe.python or 'python3'}; "
            f"import roots: {', '.join(recipe.pythonpath) or '.'}\n"
            f"Target test files: {', '.join(files)}\n\n"
            f"envgen's recipe ({recipe.language}, {recipe.image_base}):\n{steps}\n\n{where}\nWhy: {why}\n"
            + (f"Last output:\n{clip(tail, 3000)}\n" if tail.strip() else "")
            + "\nMake the target tests run (pass or fail), recording every environment change with `step`, then "
              "call `done`.")


class SetupAgent:
    """Recorded-recipe replay (always) and the set-up agent (when a model is configured)."""

    def __init__(self, store: Store, *, run_id: str, llm: LLMConfig | list[LLMConfig] | LLMPool | None = None,
                 work: Path | None = None, budgets: SetupBudgets | None = None, agents_dir: Path | None = None,
                 log: Callable[[str], None] = stderr_log):
        self.book = RecipeBook(store)
        self.budgets = budgets or SetupBudgets()
        self.log = log
        self.pipe: LLMPipeline | None = None
        if llm is not None:
            if work is None:
                raise InputError("the set-up agent needs a work directory for its transcripts")
            self.pipe = LLMPipeline(llm=llm, store_url=store.url, run_id=run_id, roles=(ROLE,), agents_dir=agents_dir,
                                    work=work, progress=None, salt="code-setup")
            self.pipe.store = store

    @property
    def enabled(self) -> bool:
        return self.pipe is not None

    def replay(self, repo: str, commit: str, recipe: Recipe) -> tuple[Recipe, dict] | None:
        """The recipe recorded for this repository version, if any, and its provenance for the report."""
        found = self.book.get(repo, commit, recipe.key)
        if found is None:
            return None
        rec, info = found
        self.log(f"code: {repo}@{commit[:12]}: replaying the set-up agent's recorded recipe ({len(rec.task_steps)} "
                 "task step(s)); no model call")
        return rec, {"source": "replay", "original_recipe": recipe.key,
                     "recorded": {k: info.get(k) for k in ("turns", "tool_calls", "tokens", "model", "steps")}}

    def usage(self) -> dict[str, Any]:
        if self.pipe is None:
            return {}
        return {"session": self.pipe.usage.to_dict(), "spent": dict(self.pipe.store.llm_spend(self.pipe.run_id)),
                "models": sorted(self.pipe.models)}

    def rescue(self, cand, recipe: Recipe, setup_commit: str, files: list[str], *, why: str, tail: str = "",
               failed: EnvironmentFailed | None = None, task_image: str | None = None, client=None,
               bench_factory: Callable[[Recipe, list[str]], Bench] | None = None) -> Rescue:
        """Run a set-up session for ``cand``; on success the recipe is recorded in the book and returned."""
        assert self.pipe is not None, "rescue needs a model (SetupAgent(llm=...))"
        base = truncated(recipe, failed) if failed is not None else recipe
        info: dict[str, Any] = {"source": "agent", "original_recipe": recipe.key, "trigger": why[:500]}
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="envgen-setup-") as tmp:
            try:
                bench = (bench_factory or self._docker_bench(cand, client, task_image, tmp))(base, files)
            except EnvironmentFailed as e:
                return Rescue(None, info, f"set-up agent: its sandbox could not be prepared: {e}")
            budgets = self.budgets
            spec = self.pipe.specs[ROLE]
            session = SetupSession(bench, base, recipe.key, files, budgets,
                                   budgets.command_timeout_s or spec.budgets.tool_timeout_s)
            stage = f"setup/{slug(cand.instance_id)}"
            agent = self.pipe.agent(ROLE, stage, 0, FunctionTools(session.tools()), max_turns=budgets.max_turns)
            if budgets.max_tokens is not None:
                agent.max_tokens = budgets.max_tokens
            res = None
            try:
                res = agent.send(brief(cand, recipe, files, why, tail, failed))
                nudges = 0
                while res.outcome == "answered" and session.recipe is None and nudges < 2 and not session.stopped:
                    nudges += 1
                    res = agent.send("The target tests must run before you finish. Keep working with the tools "
                                     "(bash, step, run_tests) and call done(summary) when they run.")
            finally:
                bench.close()
                self.pipe.finish_agent(agent, stage, ROLE)
        info.update({"model": agent.llm.config.model, "turns": agent.turns, "tool_calls": agent.tool_calls,
                     "malformed": agent.malformed, "tokens": agent.tokens_seen, "outcome": agent.last_outcome,
                     "steps": list(session.steps), "commands": session.log[-200:], "summary": session.summary,
                     "transcript": str(agent.transcript.path), "seconds": round(time.perf_counter() - t0, 3)})
        if session.recipe is None:
            if session.stopped:
                stop = session.stopped
            elif res is not None and res.outcome == "turn_budget":
                stop = f"its turn budget ({agent.max_turns} model turns)"
            elif res is not None and res.outcome == "token_budget":
                stop = f"its token budget ({agent.max_tokens} tokens)"
            else:
                stop = None
            reason = (f"set-up agent: stopped at {stop} before the target tests ran" if stop else
                      "set-up agent: gave up without making the target tests run" +
                      (f": {res.answer.strip()[:300]}" if res is not None and res.answer else ""))
            info["reason"] = reason
            return Rescue(None, info, reason)
        self.book.put(cand.repo, setup_commit, recipe.key, session.recipe,
                      {k: info[k] for k in ("model", "turns", "tool_calls", "tokens", "steps", "summary")})
        self.log(f"code: {cand.instance_id}: the set-up agent recorded {len(session.steps)} step(s) in "
                 f"{agent.turns} turn(s)")
        return Rescue(session.recipe, info)

    def _docker_bench(self, cand, client, task_image: str | None, tmp: str) -> Callable[[Recipe, list[str]], Bench]:
        def make(base: Recipe, files: list[str]) -> Bench:
            image = task_image or build_environment(base, client=client, log=self.log).tag
            snap = Path(tmp) / "repo.git"
            sha = make_snapshot(cand.repo_path, cand.base_commit, snap)
            return DockerBench(client, image, snapshot=snap, base=sha, test_patch=cand.test_patch,
                               gold_patch=cand.gold_patch, recipe=base, files=files)
        return make


def info_for_report(info: dict) -> dict:
    """The per-task ``setup`` entry of build.json (commands trimmed)."""
    out = dict(info)
    out["commands"] = [{**c, "command": str(c.get("command", ""))[:300]} for c in info.get("commands", [])][-50:]
    return out


__all__ = ["Bench", "DockerBench", "RecipeBook", "Rescue", "SetupAgent", "SetupBudgets", "SetupSession",
           "describe_tests", "ran_per_file", "recipe_from_dict", "tests_did_not_run", "truncated", "with_steps"]
