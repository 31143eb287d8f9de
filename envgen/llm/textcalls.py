"""Tool calls a model wrote as text, read back into OpenAI ``tool_calls``.

An OpenAI-compatible server turns the model's tool-call syntax into ``tool_calls`` only when its tool parser is
on (vLLM: ``--enable-auto-tool-choice --tool-call-parser NAME``; llama.cpp: ``--jinja``). Without it the calls
arrive as plain text in ``content`` and would read as a final answer. ``parse_text_calls`` reads the common
forms, so the agent runs them (and says so in its transcript) instead of stopping:

- Hermes / Qwen2.5 / SmolLM / NousResearch: ``<tool_call>{"name": "T", "arguments": {...}}</tool_call>``;
- Qwen3-Coder (XML): ``<tool_call><function=T><parameter=K>value</parameter></function></tool_call>``, with or
  without the outer ``<tool_call>``;
- Llama 3.1 custom: ``<function=T>{...JSON arguments...}</function>``;
- Mistral: ``[TOOL_CALLS][{"name": "T", "arguments": {...}}, ...]``;
- Llama 3.x JSON: ``<|python_tag|>{"name": "T", "parameters": {...}}``.

Arguments that do not parse are passed on as their raw text, so the agent answers the model with the usual
"not valid JSON" tool error rather than dropping the call.
"""

from __future__ import annotations

import json
import re
from typing import Any

MARKERS = ("<tool_call>", "<function=", "[TOOL_CALLS]", "<|python_tag|>")
"""Text that starts a tool call in one of the forms above."""

_TOOL_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|\Z)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)\s*>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.S)


def has_text_calls(text: str | None) -> bool:
    """Whether ``text`` holds the start of a tool call written as text."""
    return bool(text) and any(m in text for m in MARKERS)


def _call(name: str, args: Any, i: int) -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {"id": f"text_call_{i}", "type": "function", "function": {"name": str(name).strip(), "arguments": raw}}


def _from_json(obj: Any, i: int) -> dict[str, Any] | None:
    if isinstance(obj, dict) and isinstance(obj.get("function"), dict):  # an OpenAI item written out as text
        obj = obj["function"]
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return None
    args = obj.get("arguments", obj.get("parameters"))
    return _call(obj["name"], args, i)


def _xml_params(body: str) -> dict[str, Any]:
    """``<parameter=K>value</parameter>`` pairs: values that read as JSON (numbers, lists) are JSON, else text."""
    out: dict[str, Any] = {}
    for m in _PARAMETER.finditer(body):
        value = m.group(2).removeprefix("\n").removesuffix("\n")
        try:
            out[m.group(1)] = json.loads(value)
        except ValueError:
            out[m.group(1)] = value
    return out


def _function_block(name: str, body: str, i: int) -> dict[str, Any]:
    """``<function=NAME>`` with either XML parameters or a JSON object as its body."""
    if "<parameter=" in body:
        return _call(name, _xml_params(body), i)
    stripped = body.strip()
    return _call(name, stripped or "{}", i)


def _json_values(text: str) -> list[Any]:
    """Every JSON value in ``text`` one after another (a list is flattened), stopping at the first that is not."""
    dec, out, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,;":
            pos += 1
        if pos >= len(text):
            return out
        try:
            obj, pos = dec.raw_decode(text, pos)
        except ValueError:
            return out
        out.extend(obj if isinstance(obj, list) else [obj])


def parse_text_calls(text: str) -> tuple[str, list[dict[str, Any]], str] | None:
    """``(the text outside the calls, OpenAI tool_calls, the form's name)``, or None when ``text`` holds no call
    in a form this module reads (``has_text_calls`` may still be true: a marker with nothing usable after it)."""
    if not has_text_calls(text):
        return None
    calls: list[dict[str, Any]] = []
    if "<tool_call>" in text:
        kept, form = [], "hermes"
        last = 0
        for m in _TOOL_CALL.finditer(text):
            kept.append(text[last:m.start()])
            last = m.end()
            body = m.group(1).strip()
            fn = _FUNCTION.search(body)
            if fn is not None:
                calls.append(_function_block(fn.group(1), fn.group(2), len(calls)))
                form = "qwen3-xml"
                continue
            values = _json_values(body)
            got = [c for c in (_from_json(v, len(calls) + k) for k, v in enumerate(values)) if c is not None]
            if got:
                calls.extend(got)
            elif body.startswith("{"):  # a call whose JSON is broken (cut off, unbalanced): the model hears why
                name = re.search(r'"name"\s*:\s*"([^"]+)"', body)
                if name:
                    calls.append(_call(name.group(1), body, len(calls)))
        kept.append(text[last:])
        return ("".join(kept).strip(), calls, form) if calls else None
    if "<function=" in text:
        kept, last = [], 0
        for m in _FUNCTION.finditer(text):
            kept.append(text[last:m.start()])
            last = m.end()
            calls.append(_function_block(m.group(1), m.group(2), len(calls)))
        kept.append(text[last:])
        return ("".join(kept).strip(), calls, "function-tag") if calls else None
    for marker, form in (("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3-json")):
        if marker in text:
            head, _, tail = text.partition(marker)
            values = _json_values(tail)
            calls = [c for c in (_from_json(v, k) for k, v in enumerate(values)) if c is not None]
            if calls:
                return head.strip(), calls, form
    return None


def tools_system_prompt(tools: list[dict[str, Any]]) -> str:
    """The Hermes/Qwen tool instructions (what Qwen2.5's chat template writes into its system prompt): the tool
    schemas inside ``<tools>`` and how to call one, which ``parse_text_calls`` and PackEnv read back.

    For chat templates that ignore ``tools`` (SmolLM2's, many base-model templates): without it the model is
    never told which tools exist."""
    lines = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
            f"function signatures within <tools></tools> XML tags:\n<tools>\n{lines}\n</tools>\n\nFor each function "
            "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
            '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def calls_as_text(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message with its ``tool_calls`` written into the content as ``<tool_call>`` blocks (for a
    template that would drop them, so the model still sees what it called)."""
    calls = message.get("tool_calls") or []
    if not calls:
        return message
    blocks = []
    for tc in calls:
        fn = tc.get("function", {})
        args = fn.get("arguments")
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except ValueError:
            pass
        blocks.append("<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
                      + "\n</tool_call>")
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = "\n".join(x for x in [message.get("content") or "", *blocks] if x)
    return out
