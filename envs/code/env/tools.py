"""Tools of a code (SWE) pack: a shell and a file viewer/editor in the task's repository, and submit.

The repository is ``repo/`` in the work dir; its git data (``repo.git/``, one commit: the task's base)
comes from the pack and its working tree is checked out at every reset (this module is re-imported
then). ``submit`` records the patch the verifier judges, as SWE-bench judges a prediction: the working
tree's changes against the base commit, or a patch given explicitly. Paths are relative to the
repository root. Runs on the sandbox's own Python (3.9+), stdlib only.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile

CONFIG = "code.json"
SUBMISSION = os.path.join(".envgen", "submission.patch")
MAX_PATCH_BYTES = 4 << 20
_WORK = os.getcwd()  # the runtime imports the tools with the work dir as the current directory

__all__ = ["bash", "view_file", "replace_in_file", "write_file", "submit"]


def _config() -> dict:
    with open(os.path.join(_WORK, CONFIG), encoding="utf-8") as f:
        return json.load(f)


def _git(*args, input=None, env=None, check=True):
    cfg = _config()
    cmd = ["git", "-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", "-C", _repo(cfg), *args]
    genv = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    genv.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_TERMINAL_PROMPT": "0", "HOME": tempfile.gettempdir()})
    genv.update(env or {})
    out = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=genv, timeout=120)
    if check and out.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {out.stderr.decode(errors='replace').strip()[-800:]}")
    return out


def _repo(cfg=None) -> str:
    return os.path.join(_WORK, (cfg or _config()).get("repo", "repo"))


def _prepare() -> None:
    """Check out the working tree after a reset restored the git data (no-op in an empty work dir)."""
    if not os.path.isfile(os.path.join(_WORK, CONFIG)):
        return
    cfg = _config()
    git_dir = os.path.join(_WORK, cfg.get("git_dir", "repo.git"))
    tree = _repo(cfg)
    if not os.path.isdir(git_dir) or os.path.exists(os.path.join(tree, ".git")):
        return
    os.makedirs(tree, exist_ok=True)
    with open(os.path.join(tree, ".git"), "w") as f:
        f.write(f"gitdir: {os.path.relpath(git_dir, tree)}\n")
    _git("reset", "--hard", "-q", cfg["base"])
    gen = _generated()
    if gen is not None:
        gen.overlay(tree)


def _generated():
    """The kit's module for the files the project's install generated (``_version.py``, in-place builds),
    or None where the image has none: they are laid over the tree at every reset and are never part of
    a submission (the verifier restores them)."""
    try:
        from envgen_verifiers import install
    except ImportError:  # a runtime without the kit: no image-built install either
        return None
    return install if os.path.isdir(install.GENERATED_DIR) else None


_prepare()


def _python(cfg: dict) -> str:
    py = cfg.get("python")
    return py if py and os.path.exists(py) else sys.executable


def _env() -> dict:
    cfg = _config()
    tree = _repo(cfg)
    tmp = tempfile.gettempdir()
    env = {"PATH": os.pathsep.join([os.path.dirname(_python(cfg)), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": tmp, "TMPDIR": tmp, "TZ": "UTC", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "PYTHONDONTWRITEBYTECODE": "1",
           "GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@localhost",
           "GIT_COMMITTER_NAME": "agent", "GIT_COMMITTER_EMAIL": "agent@localhost"}
    roots = [tree if p in ("", ".") else os.path.join(tree, p) for p in cfg.get("pythonpath", [])]
    if roots:
        env["PYTHONPATH"] = os.pathsep.join(roots)
    runner = _runner(cfg)
    return runner.env(env, tree, dict(cfg.get("options") or {})) if runner is not None else env


def _runner(cfg: dict):
    """The kit's test runner of another language (its toolchain's settings: the same as the verifier's),
    or None for Python and where the kit is not importable."""
    try:
        from envgen_verifiers import runners
    except ImportError:
        return None
    return runners.get(cfg.get("framework") or "")


def _path(path: str) -> str:
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(_repo(), path))


def bash(command: str, timeout: int = 120) -> str:
    """Run a shell command with bash in the repository root and return its output and exit code.

    git and the project's toolchain (Python and pytest, Go, Node, a JDK with Maven, GCC with CMake, or
    PHP with PHPUnit) are on PATH; the project under test builds and imports from the working tree. There
    is no network. Start background jobs with their output redirected (``cmd >/tmp/log 2>&1 &``), or the
    call waits for them.

    Args:
        command: the command line, e.g. "python -m pytest tests/test_core.py -x -q" or "grep -rn parse src"
        timeout: seconds before the command is killed
    """
    proc = subprocess.Popen(["bash", "-c", command], cwd=_repo(), env=_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    note = ""
    try:
        out, _ = proc.communicate(timeout=max(1, timeout))
    except subprocess.TimeoutExpired:
        _killpg(proc)
        out, _ = proc.communicate()
        note = f"\n[killed after {timeout} s]"
    finally:
        if proc.poll() is None:  # the sandbox's own step deadline interrupted us: leave nothing running
            _killpg(proc)
            proc.wait()
    return f"{out.decode('utf-8', errors='replace')}{note}\n[exit code {proc.returncode}]"


def _killpg(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def view_file(path: str, start: int = 1, end: int = 0) -> str:
    """Show a file with line numbers (or list a directory).

    Args:
        path: file or directory, relative to the repository root
        start: first line to show (1-based)
        end: last line to show; 0 shows to the end of the file
    """
    p = _path(path)
    if os.path.isdir(p):
        entries = sorted(e + ("/" if os.path.isdir(os.path.join(p, e)) else "") for e in os.listdir(p))
        return "\n".join(e for e in entries if e != ".git")
    with open(p, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    start = max(1, start)
    stop = len(lines) if end <= 0 else min(end, len(lines))
    width = len(str(stop))
    body = "\n".join(f"{n:>{width}}  {lines[n - 1]}" for n in range(start, stop + 1))
    return f"{path} (lines {start}-{stop} of {len(lines)})\n{body}"


def replace_in_file(path: str, old: str, new: str) -> str:
    """Replace one exact occurrence of a text in a file.

    Args:
        path: file, relative to the repository root
        old: the exact text to replace (whitespace included); it must occur exactly once
        new: the replacement text
    """
    p = _path(path)
    with open(p, encoding="utf-8", newline="") as f:
        text = f.read()
    count = text.count(old) if old else 0
    if count != 1:
        raise ValueError(f"the text to replace occurs {count} times in {path}; give an exact, unique snippet")
    at = text.index(old)
    text = text[:at] + new + text[at + len(old):]
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    first = text.count("\n", 0, at) + 1
    shown = text.splitlines()[max(0, first - 3): first + new.count("\n") + 3]
    return f"replaced in {path} at line {first}:\n" + "\n".join(shown)


def write_file(path: str, content: str) -> str:
    """Create or overwrite a file with the given content.

    Args:
        path: file, relative to the repository root (missing directories are created)
        content: the whole new content
    """
    p = _path(path)
    os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
    with open(p, "w", encoding="utf-8", newline="") as f:
        f.write(content)
    return f"wrote {len(content)} characters to {path}"


def submit(patch: str = "") -> str:
    """Hand in your fix. Without a patch, every change in the working tree (against the original commit,
    new files included, ignored files left out) is submitted; with one, that unified diff is submitted
    instead. Call it once you are done; the last successful submission counts.

    Args:
        patch: optional unified diff (git format, paths relative to the repository root)
    """
    cfg = _config()
    base = cfg["base"]
    fd, index = tempfile.mkstemp(prefix="envgen-index-")
    os.close(fd)
    os.unlink(index)
    env = {"GIT_INDEX_FILE": index}
    try:
        _git("read-tree", base, env=env)
        if patch.strip():
            text = patch if patch.endswith("\n") else patch + "\n"
            from envgen_verifiers.tests import check_patch  # the kit's parser: the verifier applies the same rule

            check_patch(text)
            out = _git("apply", "--cached", "--check", "-", input=text.encode(), env=env, check=False)
            if out.returncode != 0:
                raise ValueError("the patch does not apply to the original commit: "
                                 + out.stderr.decode(errors="replace").strip()[-800:])
        else:
            _git("add", "-A", env=env)
            gen = _generated()
            if gen is not None and gen.generated_files():
                _git("rm", "--cached", "-q", "--ignore-unmatch", "--", *gen.generated_files(), env=env)
            text = _git("diff", "--cached", "--binary", base, env=env).stdout.decode("utf-8", errors="surrogateescape")
            if not text.strip():
                raise ValueError("nothing to submit: the working tree has no changes against the original commit")
    finally:
        if os.path.exists(index):
            os.unlink(index)
    data = text.encode("utf-8", errors="surrogateescape")
    if len(data) > MAX_PATCH_BYTES:
        raise ValueError(f"the patch is {len(data)} bytes, over the {MAX_PATCH_BYTES} limit; remove generated files")
    dest = os.path.join(_WORK, SUBMISSION)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(data)
    files = [line.split(" b/", 1)[-1] for line in text.splitlines() if line.startswith("diff --git ")]
    from envgen_verifiers.tests import Infrastructure

    gen = _generated()
    made = set(gen.generated_files()) if gen is not None else set()
    ignored = [f for f in files if Infrastructure()(f) or f in made]
    note = (f"\nnote: {', '.join(ignored[:10])}: test configuration, interpreter hooks or files the install "
            "generated, restored to the original before your patch is graded (these changes have no effect)"
            ) if ignored else ""
    return f"submitted a patch changing {len(files)} file(s): {', '.join(files[:20])}{note}"
