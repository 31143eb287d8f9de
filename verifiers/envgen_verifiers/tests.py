"""Test-based verifier of code tasks (stdlib only; Python 3.9+).

After the episode: the repository is reset to the task's commit, the agent's submitted patch is
applied, then the hidden test patch, and the task's test files run once under a timeout. The reward
is 1 only if every FAIL_TO_PASS and every PASS_TO_PASS test passed; a test missing from the report
counts as failed.

The same functions run the host's validation (``python -m envgen_verifiers.tests matrix SPEC``: the
test runs at the base commit and with the gold patch, repeated), so what decided a task's test lists
at build time is exactly what judges an agent. Reports are read from JUnit XML first; when there is
none (a crash, a timeout, a runner without JUnit output) the runner's own summary lines are parsed
(pytest ``-rA``, unittest ``-v``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

PASSED, FAILED, ERROR, SKIPPED, XFAIL = "passed", "failed", "error", "skipped", "xfail"
PASSING = (PASSED, XFAIL)
"""Outcomes that count as a pass (an expected failure met its expectation, as SWE-bench counts it)."""
FAILING = (FAILED, ERROR)
SUBMISSION = ".envgen/submission.patch"
"""Where the submit tool writes the patch the agent hands in, relative to the work dir."""
PROTECTED_NAMES = ("conftest.py", "pytest.ini", "tox.ini", "sitecustomize.py", "usercustomize.py")
"""Files a submission may not touch: they can rewrite test outcomes without fixing anything."""
TAIL_CHARS = 3000


class PatchError(ValueError):
    """A patch that is malformed or does not apply."""


# ---------------------------------------------------------------- report parsing


def _module_of(path: str) -> str:
    return path[:-3].replace("/", ".") if path.endswith(".py") else path.replace("/", ".")


def _junit_id(case: ET.Element, files: list[str]) -> str | None:
    """A pytest node id (``path::Class::name``) from a testcase's classname/name/file attributes."""
    name = case.get("name") or ""
    classname = case.get("classname") or ""
    if not classname:
        return None  # a collection error entry: it names a module, not a test
    path = (case.get("file") or "").replace("\\", "/")
    parts = classname.split(".")
    if not path:  # xunit2 has no file attribute: find the run file whose module prefixes classname
        for f in sorted(files, key=len, reverse=True):
            mod = _module_of(f)
            if classname == mod or classname.startswith(mod + "."):
                path = f
                break
    if path:
        mod = _module_of(path).split(".")
        inner = parts[len(mod):] if parts[:len(mod)] == mod else parts[-1:] if parts[-1][:1].isupper() else []
        return "::".join([path, *inner, name])
    return "::".join([*parts, name])


def parse_junit(text: str, files: list[str] = ()) -> dict[str, str]:
    """{test id: outcome} from JUnit XML (pytest's, or any runner's); raises ValueError if it is not JUnit."""
    root = ET.fromstring(text)
    if root.tag not in ("testsuites", "testsuite"):
        raise ValueError(f"not a JUnit report (root element {root.tag!r})")
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        tid = _junit_id(case, list(files))
        if tid is None:
            continue
        status = PASSED
        for child in case:
            if child.tag == "failure":
                status = FAILED
            elif child.tag == "error":
                status = ERROR
            elif child.tag == "skipped":
                status = XFAIL if (child.get("type") or "").endswith("xfail") else SKIPPED
        if out.get(tid) in FAILING and status not in FAILING:
            continue  # a test with a passing call and a failing teardown is reported twice: it failed
        out[tid] = status
    return out


_RA = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+::\S.*?)(?:\s+-\s+.*)?$")


def parse_pytest_summary(text: str) -> dict[str, str]:
    """{node id: outcome} from pytest's ``-rA`` short summary lines (``PASSED tests/x.py::test_a``)."""
    mapping = {"PASSED": PASSED, "FAILED": FAILED, "ERROR": ERROR, "XFAIL": XFAIL, "XPASS": PASSED,
               "SKIPPED": SKIPPED}
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _RA.match(line.strip())
        if m:
            status = mapping[m.group(1)]
            if out.get(m.group(2)) not in FAILING:
                out[m.group(2)] = status
    return out


_UT = re.compile(r"^(\w+) \(([\w.]+)\)")
_UT_RESULT = re.compile(r"\.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)\s*$")


def parse_unittest_verbose(text: str) -> dict[str, str]:
    """{module.Class.test: outcome} from ``python -m unittest -v`` (3.9-3.10 and 3.11+ line formats)."""
    mapping = {"ok": PASSED, "FAIL": FAILED, "ERROR": ERROR, "expected failure": XFAIL,
               "unexpected success": FAILED}
    out: dict[str, str] = {}
    pending = None
    for line in text.splitlines():
        m = _UT.match(line)
        if m:
            name, where = m.groups()
            pending = where if where.endswith("." + name) else f"{where}.{name}"
        r = _UT_RESULT.search(line)
        if r and pending:
            word = r.group(1)
            out[pending] = SKIPPED if word.startswith("skipped") else mapping[word]
            pending = None
    return out


def parse_report(framework: str, junit_text: str | None, output: str, files: list[str] = ()) -> tuple[dict, str]:
    """(outcomes, source): JUnit XML when there is a usable report, else the framework's summary lines."""
    if junit_text:
        try:
            res = parse_junit(junit_text, files)
            if res:
                return res, "junit"
        except (ET.ParseError, ValueError):
            pass
    if framework == "unittest":
        return parse_unittest_verbose(output), "unittest-verbose"
    return parse_pytest_summary(output), "pytest-rA"


# ---------------------------------------------------------------- patches


_HEADERS = ("index ", "--- ", "+++ ", "old mode ", "new mode ", "deleted file mode ", "new file mode ",
            "similarity index ", "dissimilarity index ", "rename from ", "rename to ", "copy from ", "copy to ",
            "Binary files ")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def check_patch(text: str) -> int:
    """Raise PatchError unless ``text`` is a well-formed unified (git) diff; return its file count.

    Stricter than ``git apply``, which skips lines it does not understand: a patch with a stray line
    after its last hunk (a truncated or corrupted submission) is refused instead of half-read.
    """
    if not text.strip():
        raise PatchError("the patch is empty")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    i, files, state = 0, 0, "start"
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            files, state = files + 1, "header"
        elif state == "binary" and (line == "" or line.startswith(("literal ", "delta "))
                                    or re.fullmatch(r"[A-Za-z][0-9A-Za-z!#$%&()*+;<=>?@^_`{|}~-]*", line)):
            pass
        elif line.startswith("--- ") and state in ("start", "hunks", "binary"):
            files, state = files + 1, "header"  # a plain unified diff (no git header)
        elif line.startswith(_HEADERS) and state == "header":
            pass
        elif line == "GIT binary patch" and state == "header":
            state = "binary"
        elif line.startswith("@@") and state in ("header", "hunks"):
            m = _HUNK.match(line)
            if not m:
                raise PatchError(f"line {i + 1}: malformed hunk header {line[:80]!r}")
            old = int(m.group(2)) if m.group(2) is not None else 1
            new = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            while old > 0 or new > 0:
                if i >= len(lines):
                    raise PatchError(f"the patch ends inside a hunk ({old} old and {new} new lines missing)")
                body = lines[i]
                tag = body[:1]
                if tag in (" ", "") and old > 0 and new > 0:
                    old, new = old - 1, new - 1
                elif tag == "-" and old > 0:
                    old -= 1
                elif tag == "+" and new > 0:
                    new -= 1
                elif tag == "\\":
                    pass
                else:
                    raise PatchError(f"line {i + 1}: {body[:80]!r} does not fit its hunk's line counts")
                i += 1
            while i < len(lines) and lines[i].startswith("\\"):
                i += 1
            state = "hunks"
            continue
        else:
            raise PatchError(f"line {i + 1}: {line[:80]!r} is neither a diff header nor part of a hunk")
        i += 1
    if files == 0:
        raise PatchError("no file diffs in the patch")
    return files


def patch_files(text: str) -> list[str]:
    """Paths a patch touches (both sides of renames), in order."""
    out: list[str] = []
    for line in text.splitlines():
        m = re.match(r"^diff --git a/(.+?) b/(.+)$", line)
        names = list(m.groups()) if m else []
        if not m and line.startswith(("--- ", "+++ ")):
            p = line[4:].split("\t")[0].strip()
            if p != "/dev/null":
                names = [p[2:] if p[:2] in ("a/", "b/") else p]
        for n in names:
            if n not in out:
                out.append(n)
    return out


def protected_touches(text: str, extra: list[str] = ()) -> list[str]:
    """Files of a submission that may change test outcomes without a fix (test files of the task,
    pytest configuration and plugins, interpreter start-up hooks)."""
    extra = set(extra)
    return [p for p in patch_files(text)
            if p in extra or os.path.basename(p) in PROTECTED_NAMES or p.endswith(".pth")]


# ---------------------------------------------------------------- git


def _git_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C.UTF-8"})
    env.setdefault("HOME", tempfile.gettempdir())
    return env


def git(repo: str, *args: str, input: bytes | None = None, env: dict | None = None,
        check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["git", "-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", "-C", repo, *args]
    out = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or _git_env(),
                         timeout=300)
    if check and out.returncode != 0:
        raise PatchError(f"git {' '.join(args[:2])} failed ({out.returncode}): "
                         f"{out.stderr.decode(errors='replace').strip()[-500:]}")
    return out


def prepare_repo(work_dir: str, repo: str = "repo", git_dir: str = "repo.git") -> str | None:
    """Give the work dir's git data (``repo.git``) its working tree (``repo``, with a ``.git`` file).

    A pack ships only the git data (images never hold ``.git`` folders, and the objects are smaller
    than a checkout); the tree is materialised in the writable work dir. Returns the tree's path, or
    None when the work dir holds no repository.
    """
    gd = os.path.join(work_dir, git_dir)
    if not os.path.isdir(gd):
        return None
    tree = os.path.join(work_dir, repo)
    os.makedirs(tree, exist_ok=True)
    gitfile = os.path.join(tree, ".git")
    fresh = not os.path.exists(gitfile)
    if fresh:
        with open(gitfile, "w") as f:
            f.write(f"gitdir: {os.path.relpath(gd, tree)}\n")
        git(tree, "reset", "--hard", "-q")
    return tree


def reset_repo(tree: str, base: str) -> None:
    """Back to ``base`` exactly: tracked files restored, untracked and ignored files removed."""
    git(tree, "reset", "--hard", "-q", base)
    git(tree, "clean", "-ffdxq")


def apply_patch(tree: str, text: str, what: str) -> None:
    if not text.endswith("\n"):
        text += "\n"
    out = git(tree, "apply", "--whitespace=nowarn", "-", input=text.encode(), check=False)
    if out.returncode != 0:
        raise PatchError(f"{what} does not apply: {out.stderr.decode(errors='replace').strip()[-500:]}")


# ---------------------------------------------------------------- running tests


def test_command(framework: str, python: str, files: list[str], junit: str) -> list[str]:
    if framework == "pytest":
        return [python, "-m", "pytest", "-rA", "--tb=short", "-p", "no:cacheprovider", "-o", "junit_family=xunit1",
                f"--junitxml={junit}", *files]
    if framework == "unittest":
        return [python, "-m", "unittest", "-v", *files]
    raise ValueError(f"unknown test framework {framework!r} (known: pytest, unittest)")


def resolve_python(python: str | None) -> str:
    """The task's interpreter when it exists here (the image's venv), else this one (a local sandbox)."""
    return python if python and os.path.exists(python) else sys.executable


def test_env(tree: str, python: str, pythonpath: list[str] = ()) -> dict:
    """The environment tests run in: fixed time zone and hash seed, the task's interpreter first on PATH."""
    tmp = tempfile.gettempdir()
    path = os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": tmp, "TMPDIR": tmp, "TZ": "UTC", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8",
           "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    roots = [os.path.join(tree, p) if p not in ("", ".") else tree for p in pythonpath]
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(roots)
    return env


def run_tests(tree: str, framework: str, files: list[str], *, python: str | None = None,
              pythonpath: list[str] = (), timeout_s: float = 300.0) -> dict:
    """Run the test files once; return outcomes, report source, exit code, seconds and the output's tail."""
    py = resolve_python(python)
    jdir = tempfile.mkdtemp(prefix="envgen-junit-")
    junit = os.path.join(jdir, "report.xml")
    cmd = test_command(framework, py, files, junit)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=tree, env=test_env(tree, py, pythonpath), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _killpg(proc)
        out, _ = proc.communicate()
    finally:
        if proc.poll() is None:
            _killpg(proc)
            proc.wait()
    seconds = time.monotonic() - t0
    _killpg(proc)  # whatever the tests left running in their session
    text = out.decode("utf-8", errors="replace")
    junit_text = None
    if os.path.isfile(junit):
        with open(junit, encoding="utf-8", errors="replace") as f:
            junit_text = f.read()
    shutil.rmtree(jdir, ignore_errors=True)
    outcomes, source = parse_report(framework, junit_text, text, files)
    return {"outcomes": outcomes, "source": source, "rc": proc.returncode, "timed_out": timed_out,
            "seconds": round(seconds, 4), "tail": text[-TAIL_CHARS:]}


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the verifier


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError:
        return None


def check(args: dict, *, answer: str, calls: list, work_dir: str, hidden_dir: str | None, **_) -> dict:
    """Judge a code episode: reward 1 iff the submitted patch makes every FAIL_TO_PASS and PASS_TO_PASS pass.

    args: base (commit), framework, files (test files to run), FAIL_TO_PASS, PASS_TO_PASS, test_patch
    (file in hidden/), and optionally python, pythonpath, timeout_s, repo, git_dir, submit_tool.
    """
    submit_tool = args.get("submit_tool", "submit")
    f2p, p2p = list(args.get("FAIL_TO_PASS") or []), list(args.get("PASS_TO_PASS") or [])
    if not any(c.get("tool") == submit_tool and c.get("ok") for c in calls):
        return {"reward": 0.0, "details": {"reason": f"nothing was submitted (no successful {submit_tool} call)"}}
    patch = _read(os.path.join(work_dir, SUBMISSION))
    if not patch or not patch.strip():
        return {"reward": 0.0, "details": {"reason": "the submission is empty"}}
    tree = prepare_repo(work_dir, args.get("repo", "repo"), args.get("git_dir", "repo.git"))
    if tree is None:
        return {"reward": 0.0, "details": {"reason": "the task's repository is missing from the work dir"}}
    test_patch = _read(os.path.join(hidden_dir or "", args.get("test_patch", "test.patch"))) if hidden_dir else None
    if test_patch is None:
        raise RuntimeError("the hidden test patch is missing: the pack is broken")
    touched = protected_touches(patch, patch_files(test_patch))
    if touched:
        return {"reward": 0.0, "details": {"reason": f"the submission changes test infrastructure: {touched[:5]}"}}
    try:
        check_patch(patch)
        reset_repo(tree, args["base"])
        apply_patch(tree, patch, "the submitted patch")
        apply_patch(tree, test_patch, "the test patch")
    except PatchError as e:
        return {"reward": 0.0, "details": {"reason": str(e)}}
    res = run_tests(tree, args.get("framework", "pytest"), list(args.get("files") or []),
                    python=args.get("python"), pythonpath=list(args.get("pythonpath") or []),
                    timeout_s=float(args.get("timeout_s", 300)))
    outcomes = res["outcomes"]
    bad_f2p = [t for t in f2p if outcomes.get(t) not in PASSING]
    bad_p2p = [t for t in p2p if outcomes.get(t) not in PASSING]
    reward = 1.0 if not bad_f2p and not bad_p2p and (f2p or p2p) else 0.0
    details = {"FAIL_TO_PASS": f"{len(f2p) - len(bad_f2p)}/{len(f2p)}",
               "PASS_TO_PASS": f"{len(p2p) - len(bad_p2p)}/{len(p2p)}",
               "failed": (bad_f2p + bad_p2p)[:20], "report": res["source"], "seconds": res["seconds"],
               "timed_out": res["timed_out"]}
    if reward == 0.0:
        details["tail"] = res["tail"][-1500:]
    return {"reward": reward, "details": details}


# ---------------------------------------------------------------- validation runs (host-driven)


def matrix(spec: dict) -> dict:
    """Run the test files ``runs`` times per mode (patch set), each from a clean reset; the host judges.

    spec: git_dir (to copy into work), work, base, framework, files, python, pythonpath, timeout_s,
    runs, modes: [{name, patches: [paths]}].
    """
    t0 = time.monotonic()
    work = spec["work"]
    os.makedirs(work, exist_ok=True)
    local_gd = os.path.join(work, "repo.git")
    if not os.path.isdir(local_gd):
        shutil.copytree(spec["git_dir"], local_gd)
    tree = prepare_repo(work)
    setup = time.monotonic() - t0
    runs = []
    for mode in spec["modes"]:
        patches = []
        for p in mode["patches"]:
            with open(p, encoding="utf-8", errors="surrogateescape") as f:
                patches.append((os.path.basename(p), f.read()))
        for r in range(int(spec.get("runs", 3))):
            t1 = time.monotonic()
            rec = {"mode": mode["name"], "run": r + 1}
            try:
                reset_repo(tree, spec["base"])
                for name, text in patches:
                    apply_patch(tree, text, name)
            except PatchError as e:
                rec.update(outcomes={}, error=str(e), seconds=0.0, total_seconds=round(time.monotonic() - t1, 4))
                runs.append(rec)
                continue
            res = run_tests(tree, spec["framework"], spec["files"], python=spec.get("python"),
                            pythonpath=spec.get("pythonpath") or [], timeout_s=float(spec.get("timeout_s", 300)))
            rec.update(res)
            rec["total_seconds"] = round(time.monotonic() - t1, 4)
            runs.append(rec)
    return {"runs": runs, "setup_seconds": round(setup, 4), "seconds": round(time.monotonic() - t0, 4),
            "python": sys.version.split()[0]}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] != "matrix":
        print("usage: python -m envgen_verifiers.tests matrix SPEC.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    result = matrix(spec)
    sys.stdout.write("\n" + json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
