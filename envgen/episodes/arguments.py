"""Typed tool arguments: every call of an episode is checked against its tool's JSON schema before it runs.

The schemas are the pack manifest's ``tools`` (what the agent was shown; a pack author may tighten the ones
``describe_tools`` derives from signatures, e.g. with nested ``properties``, ``enum`` or
``additionalProperties: false``). The check is JSON Schema (Draft 2020-12, the draft pack loading checks the
schemas against) with two conventions of Python tools:

- ``integer`` means a JSON integer: ``2.0`` is refused where the tool declares ``int`` (``number`` still
  accepts ``2``: an int where the annotation says float is fine);
- ``null`` for an optional parameter whose schema has no ``default`` is the same as leaving it out: that is
  how the runtime writes a parameter whose Python default is ``None`` (``Optional[str] = None``).

A violation names the field and what was expected (``zip: 19122 is not of type 'string'``); the caller turns
it into a ``bad_arguments`` result and the tool does not run.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

import jsonschema
from jsonschema import Draft202012Validator

_TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool))
ToolValidator = jsonschema.validators.extend(Draft202012Validator, type_checker=_TYPES)
MAX_ERRORS = 8


def _where(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(err: jsonschema.ValidationError) -> str:
    if err.validator == "type":
        want = err.validator_value
        want = " or ".join(repr(t) for t in want) if isinstance(want, list) else repr(want)
        text = f"{_show(err.instance)} is not of type {want}"
    elif err.validator == "enum":
        text = f"{_show(err.instance)} is not one of {_show(err.validator_value)}"
    elif err.validator in ("anyOf", "oneOf") and err.context:
        best = jsonschema.exceptions.best_match(err.context)
        return _message(best) if best is not None else err.message
    else:
        text = err.message
    where = _where(err.absolute_path)
    return f"{where}: {text}" if where else text


class ArgumentChecker:
    """Compiled validators for a list of OpenAI tool schemas, by tool name."""

    def __init__(self, schemas: Iterable[dict[str, Any]]):
        self._schemas: dict[str, dict[str, Any]] = {}
        for s in schemas:
            fn = s.get("function", s)
            self._schemas[fn["name"]] = fn.get("parameters") or {"type": "object", "properties": {}}
        self._validators: dict[str, Any] = {}

    def knows(self, tool: str) -> bool:
        return tool in self._schemas

    def problems(self, tool: str, args: Any) -> list[str]:
        """What is wrong with `args` for `tool` (empty: the call may run). A tool without a schema here
        is not checked (the runtime binds the names)."""
        params = self._schemas.get(tool)
        if params is None:
            return []
        if not isinstance(args, dict):
            return [f"arguments must be a JSON object, got {_show(args)}"]
        v = self._validators.get(tool)
        if v is None:
            v = self._validators[tool] = ToolValidator(params)
        props = params.get("properties") or {}
        required = set(params.get("required") or ())
        view = {k: a for k, a in args.items()
                if not (a is None and k not in required and isinstance(props.get(k), dict) and "default" not in props[k])}
        errors = sorted(v.iter_errors(view), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        mistyped = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
        errors = [e for e in errors if e.validator == "type" or tuple(e.absolute_path) not in mistyped]
        return [_message(e) for e in errors[:MAX_ERRORS]]

    def check(self, tool: str, args: Any) -> str | None:
        """One line for a ``bad_arguments`` error naming every wrong field, or None when the call is fine."""
        found = self.problems(tool, args)
        return f"{tool}: " + "; ".join(found) if found else None
