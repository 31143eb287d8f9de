"""Generator-agent roles: one Markdown file per role in ``agents/``, a YAML header + the instructions.

::

    ---
    name: task-proposer
    description: Proposes a simple task with a solution and a verification function.
    tools: [bash, read_file, list_files, submit_task]
    model: default          # the LLM config name this role prefers (see envgen.llm.agent.LLMPool)
    budgets: {max_turns: 24, max_attempts: 4}
    ---
    You are ...

The body is the role's system prompt. Roles are data, not code: a pipeline offers tools by name and an
agent gets the ones its header lists.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import InputError
from ..paths import bundled

_NAME = r"^[a-z][a-z0-9-]*$"


class Budgets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_turns: int = Field(30, ge=1)
    """Model calls per session."""
    max_attempts: int = Field(4, ge=1)
    """Submissions (or feedback rounds) before the stage gives up; repairs are attempts after the first."""
    max_tokens: int | None = Field(None, ge=1)
    """Prompt + completion tokens per session (None: no limit beyond max_turns)."""
    max_calls_per_message: int = Field(16, ge=1)
    """Tool calls run from one assistant message; the others get an error result asking to send them later."""
    tool_timeout_s: float = Field(120.0, gt=0)
    """Wall-clock limit of one sandbox tool call (bash and friends)."""


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=_NAME)
    description: str = Field(min_length=1)
    tools: list[str] = Field(default_factory=list)
    model: str = "default"
    budgets: Budgets = Field(default_factory=Budgets)
    instructions: str = Field(min_length=1)
    path: Path | None = None


_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*\r?\n?(.*)\Z", re.S)


def parse_spec(text: str, path: Path | None = None) -> AgentSpec:
    """An AgentSpec from a role file's text; errors name the file and the header field."""
    where = str(path) if path else "<agent spec>"
    m = _FRONT.match(text)
    if not m:
        raise InputError(f"{where}: missing YAML header (the file must start with a '---' line, the header, "
                          "and another '---' line)")
    try:
        header = yaml.safe_load(m.group(1)) or {}
    except yaml.YAMLError as e:
        raise InputError(f"{where}: header is not valid YAML: {e}") from None
    if not isinstance(header, dict):
        raise InputError(f"{where}: header must be a mapping of fields")
    if "instructions" in header:
        raise InputError(f"{where}: header: 'instructions' is the file's body, not a header field")
    try:
        return AgentSpec(**header, instructions=m.group(2).strip(), path=path)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = {"missing": "missing required field", "extra_forbidden": "unknown field"}.get(err["type"], err["msg"])
        raise InputError(f"{where}: header: {loc}: {msg}") from None


def _dir(root: Path | None) -> Path:
    return Path(root) if root is not None else bundled("agents")


def list_specs(root: Path | None = None) -> list[str]:
    """Names of the roles in ``agents/`` (file stems; README.md is documentation, not a role)."""
    return sorted(p.stem for p in _dir(root).glob("*.md") if p.name.lower() != "readme.md")


@cache
def _load(path: Path) -> AgentSpec:
    return parse_spec(path.read_text(encoding="utf-8"), path)


def load_spec(name: str, root: Path | None = None) -> AgentSpec:
    """The role ``name`` (file ``agents/NAME.md``); an unknown role's error lists the known ones."""
    path = _dir(root) / f"{name}.md"
    if not re.match(_NAME, name) or not path.is_file():
        raise InputError(f"unknown agent role {name!r}; known roles: {', '.join(list_specs(root)) or 'none'}")
    spec = _load(path.resolve())
    if spec.name != name:
        raise InputError(f"{path}: header: name: {spec.name!r} does not match the file name {name!r}")
    return spec
