"""One error hierarchy in envgen/errors.py: every exception class lives there or is a listed internal signal,
categories are catchable, and the CLI prints one line per error, its category first."""

from __future__ import annotations

import ast
import builtins
import importlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from envgen import errors

ROOT = Path(__file__).resolve().parents[1]

# Control flow inside one module, never shown to a user: (module, class) -> why it is not an EnvgenError.
INTERNAL_SIGNALS = {
    ("envgen.build.distributed", "Lost"): "a build unit whose lease went to another worker stores nothing",
    ("envgen.build.distributed", "Unfinished"): "a build unit reports a result it does not store as done",
    ("envgen.families.code.python", "_Unknown"): "setup() reading gives up on an expression it cannot evaluate",
    ("envgen.build.sdk", "ReferenceFailed"): "a generator skips a candidate whose reference call failed",
    ("envgen.llm.client", "_BadReply"): "the LLM client retries an empty or non-JSON completion",
    ("envgen.llm.judge", "JudgeParseError"): "the rubric judge retries an unparseable reply",
    ("envgen.sandbox.channel", "ReplyTooLong"): "the channel's reader reports an overlong line to its sandbox",
}


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exception_classes(files: list[Path]) -> list[tuple[str, str]]:
    """(module, class) for every class in ``files`` whose base is an exception, builtin or defined in them."""
    defs = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                defs.append((_module(path), node.name, bases))
    known = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
             and issubclass(getattr(builtins, n), BaseException)}
    known |= {"APIError", "HTTPError", "HfHubHTTPError"}
    found: set[tuple[str, str]] = set()
    while True:
        new = {(m, c) for m, c, bases in defs if (m, c) not in found and any(b in known for b in bases)}
        if not new:
            return sorted(found)
        found |= new
        known |= {c for _, c in new}


def test_every_exception_class_lives_in_errors_or_is_a_listed_signal():
    found = _exception_classes(sorted((ROOT / "envgen").rglob("*.py")))
    assert ("envgen.errors", "LLMError") in found and ("envgen.llm.client", "_BadReply") in found  # the scan works
    stray = [f"{m}.{c}" for m, c in found if m != "envgen.errors" and (m, c) not in INTERNAL_SIGNALS]
    assert not stray, f"move these into envgen/errors.py or list them as internal signals: {stray}"
    assert set(INTERNAL_SIGNALS) <= set(found), "a listed internal signal no longer exists; drop it from the list"


def test_internal_signals_are_not_user_errors():
    for (mod, name) in INTERNAL_SIGNALS:
        cls = getattr(importlib.import_module(mod), name)
        assert issubclass(cls, BaseException) and not issubclass(cls, errors.EnvgenError), f"{mod}.{name}"
    envgen_errors = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, BaseException)}
    for path in sorted((ROOT / "envs").rglob("generator.py")):  # e.g. Infeasible: a generator's own retry signal
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases}
                assert not bases & envgen_errors, f"{path}: {node.name} derives from an envgen error"


def test_categories_are_catchable_and_old_import_paths_still_work():
    e = errors
    assert issubclass(e.PackError, e.InputError) and issubclass(e.ActionError, e.InputError)
    for cls in (e.LLMError, e.LLMUnavailable, e.GitHubError, e.HubError, e.SearchUnavailable):
        assert issubclass(cls, e.ServiceError) and not issubclass(cls, e.InputError), cls
    assert issubclass(e.SynthesisError, e.BuildError) and issubclass(e.SearchSynthesisError, e.SynthesisError)
    assert issubclass(e.EnvironmentFailed, e.BuildError) and not issubclass(e.JudgeError, e.ServiceError)
    for cls in (e.InputError, e.SandboxError, e.BuildError, e.ServiceError, e.JudgeError):
        assert issubclass(cls, e.EnvgenError)
    assert e.InputError.exit_code == 2 and e.ServiceError.exit_code == 1
    assert {e.InputError.category, e.ServiceError.category, e.SandboxError.category, e.BuildError.category,
            e.JudgeError.category} == {"error", "service error", "sandbox error", "build error", "judge error"}
    from envgen.episodes.actions import ActionError
    from envgen.llm.client import LLMError, LLMUnavailable
    from envgen.families.code.repo_image import EnvironmentFailed
    from envgen.families.code.sources import GitHubError
    from envgen.llm.judge import JudgeError
    from envgen.retrieval.search import SearchUnavailable
    from envgen.families.general.pipeline import SynthesisError
    from envgen.families.search.pipeline import SearchSynthesisError
    assert (ActionError, LLMError, LLMUnavailable, EnvironmentFailed, GitHubError, JudgeError, SearchUnavailable,
            SynthesisError, SearchSynthesisError) == (e.ActionError, e.LLMError, e.LLMUnavailable,
                                                      e.EnvironmentFailed, e.GitHubError, e.JudgeError,
                                                      e.SearchUnavailable, e.SynthesisError, e.SearchSynthesisError)


def _envgen(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "envgen", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200", **env})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_prints_an_input_error_as_one_line_naming_the_input(tmp_path):
    p = _envgen("validate", str(tmp_path / "nopack"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ") and str(tmp_path / "nopack") in lines[0] and "Traceback" not in p.stderr


def test_cli_prints_a_service_outage_as_one_line_with_its_category(tmp_path):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    p = _envgen("validate", "hf://org/some-pack", HF_ENDPOINT=endpoint, ENVGEN_CACHE=str(tmp_path / "cache"),
                HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1, p.stderr
    assert lines[0].startswith("service error: cannot reach the Hub at " + endpoint), lines[0]
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("cls", [errors.SynthesisError, errors.LLMUnavailable])
def test_multi_line_messages_still_print_one_line(cls, monkeypatch, capsys):
    from envgen import cli

    def boom():
        raise cls("the tool-writer did not produce working tools:\nline two")

    monkeypatch.setattr(cli, "app", boom)
    with pytest.raises(SystemExit) as exc:
        cli.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 1 and len(err) == 1 and err[0].startswith(cls.category + ": ") and "line two" in err[0]
