"""The interpreter family's LLM pipeline: a problem-writer agent turns a domain into checked problems.

For each problem ``i`` of a domain given in words (``envgen build interpreter --category "number theory"
--llm-model M``), a problem-writer agent (``agents/problem-writer.md``) explores with a scratch ``python``
session and submits a problem, a reference solution (Python cells) and the answer with its check: an
``answer`` spec (exact, numeric with a tolerance, math equivalence) or, for problems with many correct
answers, a checker program. envgen validates every submission before it takes it, and every rejection
goes back to the agent, which repairs within its budget:

1. the solution runs, cell by cell, in a fresh session of the family's own interpreter in the build's
   sandbox (local or Docker): no cell may fail, and the value its last cell shows must equal the stated
   answer under the task's own check;
2. the stated answer scores 1 through the task's verifier, and the red-team gate (``envgen.build.gate``)
   must find every probe at 0 (empty, claim, mutated, hedged and enumerated answers, ...).

A checker task's verifier is the checker wrapped by ``CHECKER_HARNESS``: one ``Answer:`` line, grounded in
the output of one of the episode's python calls (so a recalled or guessed answer, and the reference with
its computation broken, score 0), then the checker's verdict.

Kept problems go through the same final gate and atomic save as every family
(``envgen.build.offline.build_generated``) and, with ``pass_policy``, through the pass check
(``envgen.passcheck``): only problems the policy solves at least once in ``pass_k`` rollouts stay.

Resumable like the other pipelines: one store stage per problem (its candidate, paid LLM calls and
results live in the store); running the same command again skips finished problems and replays paid
calls of an interrupted one.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from ...build.distributed import LEASE_S, check_executor
from ...build.gate import gate
from ...build.offline import Progress, build_generated, check_out
from ...build.pipeline import LLMPipeline
from ...build.report import BuildReport, count_reasons
from ...build.sdk import Generated
from ...episodes.episode import replay
from ...errors import InputError, SandboxError, SynthesisError
from ...llm.agent import FunctionTools, SandboxTools, ToolOutput, Tools
from ...llm.client import LLMConfig, LLMPool
from ...pack.format import Limits, Manifest, Pack, Task, ToolCall
from ...passcheck.check import check
from ...paths import bundled, cache_dir
from ...sandbox import Sandbox, open_sandbox
from ...sandbox.local import describe_tools

GENERATOR = "envgen.families.interpreter/1"
ROLE = "problem-writer"
DEFAULT_PROBLEMS = 20
LEVELS = 4
MAX_CELLS = 12
PACK_LIMITS = Limits(max_turns=16, step_timeout_s=20.0, episode_timeout_s=300.0, memory_mb=2048)
"""The shipped pack's limits; solutions are run under the same ones (a cell must finish in the step timeout)."""
INSTRUCTION = ("Use the python tool to compute; it keeps variables between calls. End your reply with one line: "
               "Answer: <value>")
INSTRUCTIONS = ("You solve problems with a persistent Python session (the python tool: numpy, sympy, pandas and "
                "scipy are there). Compute rather than guess, check your result, and give exactly one final "
                "answer.")
MODES = ("exact", "numeric", "math")
FAILED_MARKS = ("Traceback (most recent call last)", "[interrupted:", "[timeout:", "session died",
                "could not start")
"""A python call whose output holds one of these did not compute what it was asked."""
CHECKER_FUNCTION = "envgen_check"
CHECKER_HARNESS = '''

# ---- envgen: the checker above, applied to the one final answer the agent gives
def envgen_check(answer, calls):
    """One "Answer:" line, grounded in the output of a python call of the episode, then verify() on it."""
    import re as _re

    found = _re.findall(r"(?im)^[ \\t>#*_-]*(?:final answer|answer)[ \\t*_]*[:\\uff1a][ \\t*_]*(.*?)[ \\t*_]*$",
                        str(answer))
    values = list(dict.fromkeys(f.strip() for f in found))
    if len(values) != 1 or not values[0]:
        return 0.0, {"reason": "expected exactly one 'Answer:' line", "found": values[:5]}
    got = values[0]

    def tokens(text):
        text = str(text).casefold()
        nums = _re.findall(r"-?\\d+(?:\\.\\d+)?", text)
        return nums if _re.search(r"\\d", got) else _re.findall(r"[^\\W\\d_]+", text)

    want = tokens(got)
    outputs = [str(c.get("content") or "") for c in calls if c.get("tool") == "python" and c.get("ok")]
    failed = %(failed)r
    seen = [tokens(o) for o in outputs if not any(m in o for m in failed)]
    grounded = bool(want) and any(want == s[i:i + len(want)] for s in seen for i in range(len(s) - len(want) + 1))
    if not grounded:
        return 0.0, {"reason": "the answer does not come out of any python call of the episode", "answer": got}
    try:
        out = verify(got)
    except Exception as e:  # a malformed answer makes a strict checker raise
        return 0.0, {"reason": f"the checker rejected the answer ({type(e).__name__}: {e})", "answer": got}
    if isinstance(out, tuple):
        out = out[0]
    return (1.0 if out is True else max(0.0, min(1.0, float(out or 0)))), {"answer": got}
''' % {"failed": FAILED_MARKS}


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:48].strip("-")
    if not slug:
        raise InputError(f"domain {text!r} has no letters or digits; name it, e.g. 'number theory'")
    return slug


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 20] + f"...[{len(text) - n + 20} more]"


def _norm_problem(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.casefold()))


def shown_value(output: str) -> str:
    """What a cell's output says last: its last non-empty line, a shown string's quotes taken off."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and ln.strip() != "(no output)"]
    last = lines[-1] if lines else ""
    if len(last) >= 2 and last[0] == last[-1] and last[0] in "'\"":
        last = last[1:-1]
    return last


def answer_args(answer: str, check: dict[str, Any]) -> dict[str, Any]:
    """The ``answer`` verifier's args for the stated answer and the writer's check (ValueError: what is wrong)."""
    if not isinstance(check, dict):
        raise ValueError('check must be a JSON object like {"mode": "numeric", "rel_tol": 0, "abs_tol": 0}')
    unknown = sorted(set(check) - {"mode", "rel_tol", "abs_tol", "aliases"})
    if unknown:
        raise ValueError(f"check has unknown fields {unknown}; use mode, rel_tol, abs_tol, aliases")
    mode = check.get("mode", "exact")
    if mode not in MODES:
        raise ValueError(f"check.mode must be one of {', '.join(MODES)}, got {mode!r}")
    args: dict[str, Any] = {"mode": mode, "extract": "answer-line"}
    if mode == "numeric":
        text = answer.strip().replace(",", "")
        try:
            value: Any = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"answer {answer!r} is not a number, but check.mode is numeric") from None
        args["expected"] = value
        for k in ("rel_tol", "abs_tol"):
            tol = check.get(k, 0.0)
            if not isinstance(tol, (int, float)) or isinstance(tol, bool) or tol < 0:
                raise ValueError(f"check.{k} must be a number >= 0")
            args[k] = float(tol)
    else:
        args["expected"] = answer.strip()
    aliases = check.get("aliases") or []
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise ValueError("check.aliases must be a list of strings")
    if aliases:
        if mode != "exact":
            raise ValueError("check.aliases are for exact mode (numeric and math modes accept equivalent forms)")
        args["aliases"] = [a.strip() for a in aliases if a.strip()]
    return args


# ----------------------------------------------------------------------------- one problem: submit_problem


class Problem:
    """One problem's ``submit_problem`` tool and everything a submission goes through."""

    def __init__(self, synth: _Writer, sbx: Sandbox, stage: str, index: int, level: int, budget: int):
        self.synth, self.sbx, self.stage, self.index, self.level, self.budget = synth, sbx, stage, index, level, budget
        self.task_id = f"{synth.name}-s{synth.seed}-{index:04d}"
        self.submissions = 0
        self.accepted: dict[str, Any] | None = None
        self.last_reason = "no submission"

    def submit_problem(self, problem: str, solution: list, answer: str, check: dict | None = None,
                       checker: str | None = None) -> ToolOutput:
        """Hand in the problem: envgen runs the solution in the interpreter sandbox and red-teams the check.

        Args:
            problem: the problem as a user asks it (self-contained, one correct answer or a checkable one, the
                answer's form stated)
            solution: the reference solution: Python cells run in order in a fresh session; the last cell shows the
                answer on its last line
            answer: the answer as the final 'Answer:' line states it
            check: how answers are graded: {"mode": "exact"|"numeric"|"math", "rel_tol", "abs_tol", "aliases"}
            checker: instead of check, for problems with many correct answers: Python source defining
                verify(answer) -> True/False over the text of the agent's Answer line
        """
        if self.accepted is not None:
            return ToolOutput(f"Problem {self.task_id} is already accepted; you are done.", final=True)
        self.submissions += 1
        n = self.submissions
        if n > self.budget:
            return ToolOutput("Rejected: the submission budget is spent.", ok=False, final=True)
        try:
            return self._submit(problem, solution, answer, check, checker, n)
        except (SandboxError, OSError) as e:
            return self._fail("sandbox", f"the sandbox failed while checking the problem: {self.synth.scrub(str(e))}",
                              n)

    def _fail(self, reason: str, text: str, n: int) -> ToolOutput:
        self.last_reason = reason
        self.synth.store.add_result(self.synth.run_id, self.stage, reason, False, text[:2000], {"submission": n})
        left = self.budget - n
        tail = f" ({left} submission{'s' if left != 1 else ''} left; fix it and call submit_problem again)" if left \
            else " (no submissions left)"
        return ToolOutput(f"Rejected: {text}{tail}", ok=False, final=left <= 0)

    def _submit(self, problem: Any, solution: Any, answer: Any, check: Any, checker: Any, n: int) -> ToolOutput:
        if not isinstance(problem, str) or len(problem.strip()) < 20:
            return self._fail("problem", "problem must be the problem as a user would ask it (a sentence or more)", n)
        if isinstance(solution, str):
            solution = [solution]
        if not isinstance(solution, list) or not solution or not all(isinstance(c, str) and c.strip()
                                                                       for c in solution):
            return self._fail("solution", "solution must be a non-empty list of Python cells (strings)", n)
        if len(solution) > MAX_CELLS:
            return self._fail("solution", f"solution has {len(solution)} cells; use at most {MAX_CELLS}", n)
        for k, cell in enumerate(solution, 1):
            try:
                ast.parse(cell)
            except SyntaxError as e:
                return self._fail("solution", f"cell {k} of the solution is not valid Python: {e.msg} (line "
                                              f"{e.lineno})", n)
        if not isinstance(answer, str) or not answer.strip() or "\n" in answer.strip() or len(answer) > 300:
            return self._fail("answer", "answer must be the one-line value of the final 'Answer:' line", n)
        answer = answer.strip()
        if (check is None) == (checker is None):
            return self._fail("check", "give exactly one of check (a single correct answer) and checker (many "
                                       "correct answers)", n)
        if checker is not None:
            problems = _checker_problems(checker)
            if problems:
                return self._fail("checker", "the checker does not pass envgen's checks:\n" +
                                  "\n".join(f"- {p}" for p in problems), n)
            verifier = {"kind": "program", "args": {"file": f"verify/{self.task_id}.py", "function": CHECKER_FUNCTION}}
        else:
            try:
                verifier = {"kind": "answer", "args": answer_args(answer, check)}
            except ValueError as e:
                return self._fail("check", str(e), n)
        key = _norm_problem(problem)
        if key in self.synth.accepted_problems(exclude=self.stage):
            return self._fail("duplicate", "this problem was already written for this domain; write a different one",
                              n)
        calls = [ToolCall(tool="python", args={"code": c}) for c in solution]
        task = Task(id=self.task_id, prompt=[{"role": "user", "content": f"{problem.strip()}\n\n{INSTRUCTION}"}],
                    verifier=verifier, reference={"calls": calls, "answer": f"Answer: {answer}"},
                    difficulty=max(self.level, len(calls)),
                    meta={"source": "llm", "family": "interpreter", "domain": self.synth.domain, "level": self.level,
                          "submissions": n, "check": "checker" if checker is not None else verifier["args"]["mode"]})
        if checker is not None:
            path = self.synth.probe_dir / "hidden" / "verify" / f"{self.task_id}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(checker.rstrip() + "\n" + CHECKER_HARNESS, encoding="utf-8")
        self.sbx.reset()
        ep = replay(self.sbx, task, calls, task.reference.answer)
        for k, c in enumerate(ep.calls, 1):
            bad = not c["ok"] or next((m for m in FAILED_MARKS if m in (c["content"] or "")), None)
            if bad:
                return self._fail("solution", f"cell {k} of the solution failed in the interpreter sandbox:\n"
                                              f"{_clip(self.synth.scrub(c['content'] or ''), 1500)}", n)
        shown = shown_value(ep.calls[-1]["content"] or "")
        if not shown:
            return self._fail("solution", "the solution's last cell shows nothing; print the answer on its last line",
                              n)
        if ep.verdict.reward != 1.0:
            details = self.synth.scrub(json.dumps(ep.verdict.details, ensure_ascii=False, default=str))
            what = "your checker" if checker is not None else "the check"
            return self._fail("mismatch", f"{what} scored your own solution {ep.verdict.reward:g}, not 1 (the "
                                          f"solution shows {_clip(shown, 200)!r}, the stated answer is {answer!r}; "
                                          f"details {_clip(details, 600)}); fix the solution, the answer or the "
                                          "check", n)
        if checker is None:  # the value the solution shows, graded as the agent's answer would be
            got = self.sbx.verify(task, f"Answer: {shown}", ep.calls, ep.messages)
            if got.reward != 1.0:
                return self._fail("mismatch", f"the solution's output {_clip(shown, 200)!r} does not equal the stated "
                                              f"answer {answer!r} under the check ({verifier['args']['mode']}); the "
                                              "last line the solution shows must be the answer", n)
        g = gate(self.sbx, self.synth.probe_pack, task)
        if not g.passed:
            probe = g.reason.split(" ", 1)[0]
            return self._fail(f"redteam:{probe}", "the red-team gate rejected the problem: a trajectory that should "
                                                  f"score 0 did not [{self.synth.scrub(g.reason)}]", n)
        self.accepted = {"task": task.model_dump(mode="json", exclude_none=True), "solution": solution,
                         "answer": answer, "checker": checker, "submissions": n, "problem_key": key}
        return ToolOutput(f"Accepted: problem {self.task_id} at difficulty {task.difficulty}.", final=True)


def _checker_problems(source: Any) -> list[str]:
    if not isinstance(source, str) or not source.strip():
        return ["checker must be Python source defining verify(answer)"]
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return [f"checker is not valid Python: {e.msg} (line {e.lineno})"]
    fns = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if "verify" not in fns:
        return ["checker must define verify(answer) at the top level"]
    params = [a.arg for a in fns["verify"].args.args]
    if len(params) != 1:
        return [f"verify must take exactly one argument (the text of the Answer line), not {params}"]
    if CHECKER_FUNCTION in fns:
        return [f"{CHECKER_FUNCTION} is envgen's name; call your function verify"]
    return []


# ----------------------------------------------------------------------------- the pipeline


class _Writer(LLMPipeline):
    def __init__(self, domain: str, out: Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool, problems: int,
                 seed: int, store_url: str | None, sandbox: str, workers: int, pass_policy: str | None, pass_k: int,
                 work_dir: Path | None, agents_dir: Path | None, progress: Progress | None,
                 retry_failed: bool = False):
        if problems < 1:
            raise InputError(f"--tasks must be at least 1, got {problems}")
        if pass_k < 1:
            raise InputError(f"--pass-k must be at least 1, got {pass_k}")
        self.domain = " ".join(domain.split())
        self.slug = slugify(self.domain)
        self.name = f"interpreter-{self.slug}"
        self.out, self.n, self.seed, self.backend = Path(out), problems, seed, sandbox
        self.workers, self.pass_policy, self.pass_k = max(1, workers), pass_policy, pass_k
        work = Path(work_dir) if work_dir is not None else cache_dir() / "synth-interpreter" / f"{self.slug}-seed{seed}"
        # the run id holds only what the problems depend on: asking for more problems later extends the run
        super().__init__(llm=llm, store_url=store_url, run_id=f"interpreter/{self.slug}/seed{seed}", roles=(ROLE,),
                         agents_dir=agents_dir, work=work, progress=progress, retry_failed=retry_failed)
        # per process: Ray workers on one machine build their own pipelines, each writing its probe's checkers
        self.probe_dir = self.work / "probe" / str(os.getpid())
        self.probe_pack = self._probe_pack()
        self._scrub = {str(self.work.resolve()): "<work>"}

    def scrub(self, text: str) -> str:
        for old in sorted(self._scrub, key=len, reverse=True):
            text = text.replace(old, self._scrub[old])
        return text

    def _probe_pack(self) -> Pack:
        """The family's interpreter (env/) with the checkers written so far (hidden/verify/), as the pack has them."""
        env = self.probe_dir / "env"
        if env.exists():
            shutil.rmtree(env)
        shutil.copytree(bundled("envs") / "interpreter" / "env", env, ignore=shutil.ignore_patterns("__pycache__"))
        (self.probe_dir / "hidden" / "verify").mkdir(parents=True, exist_ok=True)
        manifest = Manifest(name=f"probe-{self.name}", family="interpreter", category=self.slug,
                            tools=describe_tools(env), limits=PACK_LIMITS, instructions=INSTRUCTIONS)
        return Pack(manifest, [], root=self.probe_dir)

    def _open(self, label: str) -> Sandbox:
        sbx = open_sandbox(self.probe_pack, self.backend)
        for attr in ("work", "root", "hidden"):
            p = getattr(sbx, attr, None)
            if isinstance(p, str):
                self._scrub[p] = f"<{label}>"
        return sbx

    def accepted_problems(self, exclude: str) -> set[str]:
        return {c.data.get("problem_key") for c in self.store.candidates(self.run_id, "validated") if c.key != exclude}

    # -- one problem

    def problem(self, i: int) -> None:
        key = f"p{i:04d}"
        level = 1 + i % LEVELS
        spec = self.specs[ROLE]
        with self._open("check") as sbx, self._open("scratch") as scratch:
            box = Problem(self, sbx, key, i, level, spec.budgets.max_attempts)
            offered: dict[str, Any] = {"submit_problem": FunctionTools([box.submit_problem])}
            if "python" in spec.tools:
                scratch.reset()
                offered["python"] = SandboxTools(scratch, only=["python"], timeout=spec.budgets.tool_timeout_s)
            unknown = [t for t in spec.tools if t not in offered]
            if unknown:
                raise InputError(f"{spec.path}: header: tools: {unknown} are not offered; available: "
                                 f"{', '.join(offered)}")
            agent = self.agent(ROLE, key, i, Tools(*(offered[t] for t in spec.tools)))
            msg = (f"Domain: {self.domain}\nProblem {i + 1} of {self.n} (build seed {self.seed}: let it vary your "
                   f"choice of topic and numbers). Level {level} of {LEVELS}.\n\nWrite one problem as your "
                   "instructions say and hand it in with submit_problem.")
            try:
                res = self.until_accepted(agent, msg, box, "submit_problem",
                                          "problem, solution, answer and check (or checker)")
            finally:
                self.finish_agent(agent, key, ROLE)
        if box.accepted is None:
            reason = box.last_reason if box.submissions else f"no submission ({res.outcome})"
            data = {"level": level, "submissions": box.submissions}
            self.store.finish_stage(self.run_id, key, {"status": "rejected", "reason": reason, **data},
                                    candidates=[{"key": key, "kind": "problem", "status": "rejected", "reason": reason,
                                                 "data": data}])
            return
        task = box.accepted["task"]
        self.store.finish_stage(self.run_id, key, {"status": "validated", "task_id": task["id"],
                                                   "difficulty": task["difficulty"], "submissions": box.submissions},
                                candidates=[{"key": key, "kind": "problem", "status": "validated",
                                             "difficulty": task["difficulty"],
                                             "data": {**box.accepted, "level": level}}])

    # -- the run

    def execute(self) -> BuildReport:
        check_out(self.out)
        started = time.perf_counter()
        self.store.open_run(self.run_id, "synth-interpreter", {
            "domain": self.domain, "problems": self.n, "seed": self.seed, "sandbox": self.backend,
            "pass_policy": self.pass_policy, "pass_k": self.pass_k,
            "models": [c.describe() for c in self.pool.configs]})
        todo = []
        for i in range(self.n):
            st = self.store.stage(self.run_id, f"p{i:04d}")
            if st is not None and st.status == "done":
                self.progress(1)
            else:
                todo.append(i)
        t0 = time.perf_counter()
        if todo:
            self._run_all(todo)
        stages = {"problems": round(time.perf_counter() - t0, 3)}
        return self._assemble(started, stages)

    def _run_all(self, todo: list[int]) -> None:
        self.run_stages([(f"p{i:04d}", (i,)) for i in todo], self.problem, workers=self.workers, error=SynthesisError,
                        stopped=f"{self.domain!r}: interpreter pipeline stopped",
                        kept="finished problems and paid LLM calls", thread_name="envgen-writer")

    def _assemble(self, started: float, stages: dict[str, float]) -> BuildReport:
        cands = {c.key: c for c in self.store.candidates(self.run_id)}
        tasks, dropped, checkers, seen = [], [], {}, set()
        for i in range(self.n):
            c = cands.get(f"p{i:04d}")
            if c is None:
                continue
            if c.status != "validated":
                dropped.append(c.reason or "unknown")
                continue
            if c.data["problem_key"] in seen:  # two workers wrote the same problem at once
                dropped.append("duplicate")
                continue
            seen.add(c.data["problem_key"])
            task = Task.model_validate(c.data["task"])
            tasks.append(task)
            if c.data.get("checker"):
                checkers[task.id] = c.data["checker"]
        by_reason = count_reasons(dropped)
        if not tasks:
            raise SynthesisError(f"no problem was accepted (dropped: {by_reason or 'none written'}); see the "
                                 f"transcripts in {self.transcripts}")
        build = self.work / "final"
        shutil.rmtree(build, ignore_errors=True)
        shutil.copytree(bundled("envs") / "interpreter" / "env", build / "env",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (build / "hidden" / "verify").mkdir(parents=True)
        for tid, source in checkers.items():
            (build / "hidden" / "verify" / f"{tid}.py").write_text(source.rstrip() + "\n" + CHECKER_HARNESS,
                                                                   encoding="utf-8")
        gen = Generated(name=self.name, description=f"Problems of the domain {self.domain!r} that need a Python "
                        "interpreter, written by an LLM agent with a reference solution run in the sandbox and a "
                        "checked answer.", family="interpreter", category=self.slug, env_dir=build / "env",
                        hidden_dir=build / "hidden", tasks=tasks, instructions=INSTRUCTIONS, limits=PACK_LIMITS,
                        generator=GENERATOR)
        gated = self.work / "gated" if self.pass_policy else self.out
        if self.pass_policy:
            shutil.rmtree(gated, ignore_errors=True)
        report = build_generated(gen, gated, seed=self.seed, workers=self.workers, sandbox=self.backend,
                                 progress=None, stages=stages, started=started)
        report.proposed = len(tasks) + len(dropped)
        merged = count_reasons(dropped)
        for k, v in report.rejected_by_reason.items():
            merged[f"final gate: {k}"] = v
        report.rejected_by_reason = merged
        if self.pass_policy:
            self._pass_check(report, gated)
        spent = self.store.llm_spend(self.run_id)
        failures = count_reasons(r.kind for r in self.store.results(self.run_id) if not r.passed)
        report.details.update(domain=self.domain, written=len(tasks) + len(dropped), accepted=len(tasks),
                              failures_by_reason=failures, llm={"session": self.usage.to_dict(), "spent": dict(spent)},
                              models=sorted(self.models), run_id=self.run_id, transcripts=str(self.transcripts))
        report.seconds = time.perf_counter() - started
        self.store.finish_run(self.run_id, "done", report.summary())
        return report

    def _pass_check(self, report: BuildReport, gated: Path) -> None:
        t0 = time.perf_counter()
        res = check(str(gated), self.pass_policy, k=self.pass_k, keep="at-least-once", workers=self.workers,
                    sandbox=self.backend, store_url=self.store.url, out=self.out)
        report.stages["pass_check"] = round(time.perf_counter() - t0, 3)
        dropped = len(res.stats) - len(res.kept)
        if dropped:
            report.rejected_by_reason[f"pass check: no pass in {self.pass_k}"] = dropped
        report.kept = len(res.kept)
        report.out = self.out.resolve()
        report.details["pass_check"] = {k: v for k, v in res.summary().items() if k not in ("pack", "kept_pack")}


def synthesize_problems(domain: str, out: str | Path, *, llm: LLMConfig | list[LLMConfig] | LLMPool,
                        problems: int = DEFAULT_PROBLEMS, seed: int = 0, store_url: str | None = None,
                        sandbox: str = "local", workers: int = 2, pass_policy: str | None = None, pass_k: int = 4,
                        work_dir: str | Path | None = None, agents_dir: str | Path | None = None,
                        progress: Callable[[int], Any] | None = None, executor: str = "local",
                        ray_address: str | None = None, lease_s: float = LEASE_S,
                        retry_failed: bool = False) -> BuildReport:
    """Build an interpreter pack of ``problems`` problems of ``domain`` (in words) with a problem-writer agent.

    State (stages, candidates, paid LLM calls) lives in ``store_url`` (default ``ENVGEN_STORE``, else a SQLite
    file in ~/.cache/envgen), keyed by domain and seed: running the same command again resumes, and asking for
    more problems extends the run. ``pass_policy`` (a policy spec, e.g. ``openai:MODEL``) keeps only problems
    it solves at least once in ``pass_k`` rollouts. ``progress(1)`` is called once per problem.
    ``executor="ray"`` writes each problem in a Ray task on the cluster at ``ray_address`` (its state in
    ``store_url``, which every node must reach); the pack is the one a local build writes. ``retry_failed``:
    stages that failed before ask the model afresh instead of replaying their cached calls.
    """
    kwargs = dict(domain=domain, out=Path(out), llm=llm, problems=problems, seed=seed, store_url=store_url,
                  sandbox=sandbox, workers=workers, pass_policy=pass_policy, pass_k=pass_k,
                  work_dir=Path(work_dir) if work_dir is not None else None,
                  agents_dir=Path(agents_dir) if agents_dir is not None else None, progress=progress,
                  retry_failed=retry_failed)
    writer = _Writer(**kwargs)
    if check_executor(executor) == "ray":  # one Ray task per problem; the pass check stays on this machine
        writer.on_ray(_Writer, {**kwargs, "store_url": writer.store.url, "work_dir": writer.work},
                      address=ray_address, lease_s=lease_s)
    return writer.run()
