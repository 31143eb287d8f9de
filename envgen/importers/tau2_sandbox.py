"""The files an imported tau2-bench pack carries into its sandbox besides the domain's own code.

A tau2 domain's ``tools.py`` and ``data_model.py`` import a few names of tau2's framework (``ToolKitBase``,
``is_tool``, ``ToolType``, ``DB``, ``BaseModelNoExtra``, ``DATA_DIR``). tau2's own framework modules pull in a
dozen packages (docstring_parser, loguru, deepdiff, addict, toml, yaml, dotenv) for schema rendering, logging and
hashing that running a tool never uses, so the pack carries these small stand-ins with the same names and the
same calling semantics instead (the domain's files themselves are copied byte for byte). ``BRIDGE`` is the
module the generated ``tools.py`` calls: it loads the JSON state with the domain's own pydantic model, runs
tau2's method, renders its result as tau2's environment does, and writes the state back after a call of a tool
tau2 marks as mutating, in one canonical form (so an unchanged state keeps its bytes).
"""

from __future__ import annotations

FRAMEWORK: dict[str, str] = {
    "tau2/__init__.py": '"""Stand-ins for the parts of tau2-bench\'s framework a domain\'s tools import."""\n',
    "tau2/environment/__init__.py": "",
    "tau2/environment/toolkit.py": '''"""tau2.environment.toolkit as a domain's tools use it: the tool decorator and the toolkit base."""

from enum import Enum
from typing import Callable, Dict, Optional

TOOL_ATTR = "__tool__"
TOOL_TYPE_ATTR = "__tool_type__"
MUTATES_STATE_ATTR = "__mutates_state__"
DISCOVERABLE_ATTR = "__discoverable__"


class ToolType(str, Enum):
    READ = "read"
    WRITE = "write"
    THINK = "think"
    GENERIC = "generic"


def is_tool(tool_type: ToolType = ToolType.READ, mutates_state: Optional[bool] = None):
    if mutates_state is None:
        mutates_state = tool_type == ToolType.WRITE

    def decorator(func):
        setattr(func, TOOL_ATTR, True)
        setattr(func, TOOL_TYPE_ATTR, tool_type)
        setattr(func, MUTATES_STATE_ATTR, mutates_state)
        return func

    return decorator


def is_discoverable_tool(tool_type: ToolType = ToolType.READ, mutates_state: Optional[bool] = None):
    def decorator(func):
        is_tool(tool_type, mutates_state)(func)
        setattr(func, DISCOVERABLE_ATTR, True)
        return func

    return decorator


class ToolKitType(type):
    def __init__(cls, name, bases, attrs):
        func_tools = {}
        for key, method in attrs.items():
            if isinstance(method, property):
                method = method.fget
            if hasattr(method, TOOL_ATTR):
                func_tools[key] = method

        @property
        def _func_tools(self) -> Dict[str, Callable]:
            out = func_tools.copy()
            try:
                out.update(super(cls, self)._func_tools)
            except AttributeError:
                pass
            return out

        cls._func_tools = _func_tools


class ToolKitBase(metaclass=ToolKitType):
    def __init__(self, db=None):
        self.db = db

    @property
    def tools(self) -> Dict[str, Callable]:
        return {name: getattr(self, name) for name in self._func_tools.keys()}

    def use_tool(self, tool_name: str, **kwargs):
        if tool_name not in self.tools:
            raise ValueError(f"Tool '{tool_name}' not found.")
        return self.tools[tool_name](**kwargs)

    def has_tool(self, tool_name: str) -> bool:
        return tool_name in self.tools

    def tool_type(self, tool_name: str) -> ToolType:
        return getattr(self.tools[tool_name], TOOL_TYPE_ATTR)

    def tool_mutates_state(self, tool_name: str) -> bool:
        return getattr(self.tools[tool_name], MUTATES_STATE_ATTR, True)
''',
    "tau2/environment/db.py": '''"""tau2.environment.db: the domain database base class (a pydantic model read from JSON)."""

import json

from tau2.utils.pydantic_utils import BaseModelNoExtra


class DB(BaseModelNoExtra):
    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls.model_validate(json.load(f))

    def dump(self, path, exclude_defaults: bool = False, **kwargs):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.model_dump(mode="json", exclude_defaults=exclude_defaults), f, **kwargs)
''',
    "tau2/utils/__init__.py": "",
    "tau2/utils/utils.py": '''"""tau2.utils.utils: where tau2 keeps its data (unused inside a pack: the state is state/db.json)."""

import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("TAU2_DATA_DIR") or Path(__file__).resolve().parents[2] / "data")
''',
    "tau2/utils/pydantic_utils.py": '''"""tau2.utils.pydantic_utils: a pydantic model that rejects unknown fields."""

from pydantic import BaseModel, ConfigDict


class BaseModelNoExtra(BaseModel):
    model_config = ConfigDict(extra="forbid")
''',
    "loguru/__init__.py": '''"""loguru's ``logger`` as tau2's tools use it (info/warning/debug/error), on the standard library."""

import logging

logger = logging.getLogger("tau2")
''',
}
"""Path under env/ -> text of the framework stand-ins."""

PROVIDED = {
    "tau2.environment.toolkit": {"ToolKitBase", "ToolType", "is_tool", "is_discoverable_tool", "ToolKitType"},
    "tau2.environment.db": {"DB"},
    "tau2.utils.utils": {"DATA_DIR"},
    "tau2.utils.pydantic_utils": {"BaseModelNoExtra"},
    "loguru": {"logger"},
}
"""The framework names the stand-ins provide (module -> names): a domain importing anything else of tau2's
framework cannot be imported."""

THIRD_PARTY = {"pydantic", "typing_extensions"}
"""Packages outside the standard library a domain's code may import (the pack's image installs them)."""

PIP = ("pydantic==2.11.7",)
"""What the pack's Dockerfile pip-installs for the domain's data model (pinned: the image tag hashes it)."""

DOCKERFILE = """ARG ENVGEN_BASE
FROM ${ENVGEN_BASE}
USER root
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip >/dev/null \\
 && python3 -m pip install --no-cache-dir --break-system-packages --disable-pip-version-check --progress-bar off \\
 %s >/dev/null && rm -rf /var/lib/apt/lists/*
""" % " ".join(PIP)

BRIDGE = '''"""Runs tau2-bench's own {domain} tools against the pack's JSON state (written by `envgen import tau2`).

Every call loads {state} with the domain's pydantic model (kept in memory while the file is unchanged), calls
the method of tau2's toolkit with the agent's arguments as tau2's environment does, and, for a tool tau2 marks
as mutating the state, writes the model back in one canonical form: what tau2 would hold in memory is what the
file holds. Results are rendered as tau2 renders them for the agent (pydantic models as JSON).
"""

import datetime
import importlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

DOMAIN = {domain!r}
TOOLKIT = {toolkit!r}
DB_CLASS = {db_class!r}
STATE = {state!r}

_cache = {{}}


def _kit_class():
    return getattr(importlib.import_module("tau2.domains." + DOMAIN + ".tools"), TOOLKIT)


def _db_class():
    return getattr(importlib.import_module("tau2.domains." + DOMAIN + ".data_model"), DB_CLASS)


def dumps(db) -> str:
    """The canonical text of the state: pydantic's own JSON of the model (its field order, two-space indent)."""
    return db.model_dump_json(indent=2) + "\\n"


def _stamp(path):
    st = os.stat(path)
    return (os.path.abspath(path), st.st_ino, st.st_size, st.st_mtime_ns)


def _load():
    stamp = _stamp(STATE)
    if _cache.get("stamp") != stamp:
        with open(STATE, "rb") as f:
            db = _db_class().model_validate_json(f.read())
        _cache.update(stamp=stamp, kit=_kit_class()(db))
    return _cache["kit"]


def _save(kit) -> None:
    tmp = STATE + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(dumps(kit.db))
    os.replace(tmp, STATE)
    _cache["stamp"] = _stamp(STATE)


def _render(resp):
    from pydantic import BaseModel

    if isinstance(resp, BaseModel):
        return resp.model_dump()
    if isinstance(resp, (str, type(None))):
        return resp
    if isinstance(resp, (int, float, bool)):
        return str(resp)
    if isinstance(resp, (list, tuple)):
        return [_render(x) for x in resp]
    if isinstance(resp, dict):
        return {{k: _render(v) for k, v in resp.items()}}
    if isinstance(resp, (datetime.datetime, datetime.date)):
        return resp.isoformat()
    raise ValueError("Unsupported type: " + str(type(resp)))


def call(name: str, **args) -> str:
    """tau2's ``use_tool(name, **args)``; the state is written back after a mutating tool, even one that
    raised (tau2 keeps what a tool changed before it failed)."""
    kit = _load()
    try:
        resp = kit.use_tool(name, **args)
    finally:
        if kit.tool_mutates_state(name):
            _save(kit)
    return resp if isinstance(resp, str) else json.dumps(_render(resp), default=str)


def _doc_args(doc: str) -> dict:
    import inspect
    import re

    out, current, indent = {{}}, None, None
    section = None
    for line in inspect.cleandoc(doc or "").splitlines():
        head = re.match(r"^(\\w+):\\s*$", line)
        if head:
            section, current = head.group(1), None
            continue
        if section not in ("Args", "Arguments", "Parameters"):
            continue
        m = re.match(r"^(\\s+)(\\w+)(?:\\s*\\([^)]*\\))?:\\s*(.*)$", line)
        if m and (indent is None or len(m.group(1)) <= indent):
            indent, current = len(m.group(1)), m.group(2)
            out[current] = m.group(3).strip()
        elif current and line.strip():
            out[current] = (out[current] + " " + line.strip()).strip()
    return out


def _description(doc: str) -> str:
    import inspect
    import re

    lines = []
    for line in inspect.cleandoc(doc or "").splitlines():
        if re.match(r"^(Args|Arguments|Parameters|Returns|Raises|Examples?):\\s*$", line):
            break
        lines.append(line)
    return "\\n".join(lines).strip()


def describe() -> dict:
    """What the importer needs: each tool's schema (as tau2 builds it: a pydantic model of the signature
    with the docstring's argument descriptions), its type and whether it mutates the state; and the state
    rewritten in canonical form."""
    import inspect
    import typing

    from pydantic import Field, create_model

    with open(STATE, encoding="utf-8") as f:
        db = _db_class().model_validate(json.load(f))
    with open(STATE, "w", encoding="utf-8") as f:
        f.write(dumps(db))
    kit = _kit_class()(db)
    tools = []
    for name, fn in kit.tools.items():
        if getattr(fn, "__discoverable__", False):
            continue
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:
            hints = {{}}
        docs = _doc_args(fn.__doc__)
        fields, params = {{}}, []
        for pname, p in sig.parameters.items():
            anno = hints.get(pname, p.annotation)
            if anno is inspect.Parameter.empty:
                anno = typing.Any
            default = ... if p.default is p.empty else p.default
            fields[pname] = (anno, Field(default, description=docs[pname]) if pname in docs else default)
            params.append({{"name": pname, "required": p.default is p.empty,
                            "default": None if p.default is p.empty else repr(p.default)}})
        schema = create_model("parameters", **fields).model_json_schema()
        schema.pop("title", None)
        for prop in (schema.get("properties") or {{}}).values():
            prop.pop("title", None)
        tools.append({{"name": name, "type": kit.tool_type(name).value, "mutates": bool(kit.tool_mutates_state(name)),
                       "params": params, "doc": fn.__doc__ or "",
                       "schema": {{"type": "function", "function": {{"name": name, "description": _description(
                           fn.__doc__) or name, "parameters": schema}}}}}})
    return {{"tools": tools}}


if __name__ == "__main__":
    os.chdir(sys.argv[1])
    try:
        described = describe()
    except Exception as e:  # one line for the importer's error: what failed, on which field
        lines = [x.strip() for x in str(e).splitlines() if x.strip() and "errors.pydantic" not in x][:3]
        sys.stderr.write(type(e).__name__ + ": " + " / ".join(lines) + "\\n")
        sys.exit(1)
    print(json.dumps(described))
'''
"""The bridge module (``env/_tau2.py``), formatted with domain, toolkit, db_class and state."""
