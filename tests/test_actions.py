"""Parsing assistant actions in every supported format, their errors, and the render round trip."""

from __future__ import annotations

import json

import pytest

from envgen.episodes.actions import (
    DS_CALL_BEGIN,
    DS_CALL_END,
    DS_CALLS_BEGIN,
    DS_CALLS_END,
    DS_SEP,
    DSML,
    RENDER_FORMATS,
    ActionError,
    Call,
    parse_action,
    render_action,
    split_reasoning,
)
from envgen.errors import EnvgenError


def calls_of(parsed):
    return [(c.name, c.arguments) for c in parsed.tool_calls]


# ---------------------------------------------------------------- OpenAI JSON


def test_openai_dict_with_string_and_object_arguments():
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "put", "arguments": '{"key": "k", "value": "v"}'}},
        {"type": "function", "function": {"name": "get", "arguments": {"key": "k"}}},
    ]}
    p = parse_action(msg)
    assert p.content == "" and p.format == "openai"
    assert calls_of(p) == [("put", {"key": "k", "value": "v"}), ("get", {"key": "k"})]
    assert [c.id for c in p.tool_calls] == ["c1", "call_1"]


def test_openai_json_string_and_unpacking():
    text = json.dumps({"content": "thinking aloud", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "noop", "arguments": ""}}]})
    content, calls = parse_action(text)
    assert content == "thinking aloud" and calls == [Call("noop", {}, "x")]


def test_openai_final_answer_content_parts_and_reasoning():
    p = parse_action({"role": "assistant", "content": [{"type": "text", "text": "42"}], "reasoning_content": "hmm"})
    assert (p.content, p.tool_calls, p.reasoning, p.format) == ("42", [], "hmm", "text")
    assert p.to_message() == {"role": "assistant", "content": "42", "reasoning_content": "hmm"}
    q = parse_action({"content": "<think>plan</think>The answer is 42."})
    assert (q.content, q.reasoning) == ("The answer is 42.", "plan")


@pytest.mark.parametrize("action, code, needle", [
    ('{"content": "", "tool_calls": [{"function": {"name": "put", "arguments": "{"}}', "malformed_json", "not valid JSON"),
    ({"tool_calls": [{"function": {"name": "put", "arguments": "{key: 1}"}}]}, "malformed_json", "arguments of tool call 1 (put)"),
    ({"tool_calls": [{"function": {"name": "put", "arguments": "[1, 2]"}}]}, "bad_tool_call", "must be a JSON object"),
    ({"tool_calls": [{"function": {"arguments": "{}"}}]}, "bad_tool_call", 'no "name"'),
    ({"tool_calls": [{"name": "put"}]}, "bad_tool_call", '"function" object'),
    ({"tool_calls": [{"type": "code_interpreter", "function": {"name": "x"}}]}, "bad_tool_call", "only \"function\""),
    ({"tool_calls": {"function": {"name": "put"}}}, "bad_message", "must be a list"),
    ({"content": 5}, "bad_message", "must be a string"),
])
def test_openai_errors(action, code, needle):
    with pytest.raises(ActionError) as e:
        parse_action(action)
    assert e.value.code == code and needle in str(e.value)
    assert isinstance(e.value, EnvgenError)


def test_openai_mode_rejects_broken_json_but_takes_plain_text():
    with pytest.raises(ActionError, match="not valid JSON"):
        parse_action('{"content": "x"', "openai")
    assert parse_action("just an answer", "openai").content == "just an answer"


def test_plain_text_and_non_message_json_are_final_answers():
    assert calls_of(parse_action("  The total is 17.  ")) == []
    assert parse_action("  The total is 17.  ").content == "The total is 17."
    p = parse_action('{"answer": 5}')
    assert p.content == '{"answer": 5}' and p.tool_calls == []
    assert parse_action('{not json at all').content == "{not json at all"


def test_unsupported_action_types():
    with pytest.raises(ActionError) as e:
        parse_action(42)
    assert e.value.code == "unsupported_action"
    assert parse_action(b"bytes are text").content == "bytes are text"
    with pytest.raises(EnvgenError, match="unknown tool_format"):
        parse_action("x", "klingon")


# ---------------------------------------------------------------- Hermes / Qwen


def test_hermes_multiple_calls_with_content_and_reasoning():
    text = ('<think>I should store it first.\n<tool_call>{"name": "boom", "arguments": {}}</tool_call></think>'
            'Let me do it.\n<tool_call>\n{"name": "put", "arguments": {"key": "k", "value": "ü中"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "submit", "arguments": "{\\"answer\\": \\"v\\"}"}\n</tool_call><|im_end|>')
    p = parse_action(text)
    assert p.format == "hermes"
    assert calls_of(p) == [("put", {"key": "k", "value": "ü中"}), ("submit", {"answer": "v"})]
    assert p.content == "Let me do it."
    assert p.reasoning.startswith("I should store it first.")  # the call quoted in the reasoning is not run
    assert [c.id for c in parse_action(text, id_prefix="call_3_").tool_calls] == ["call_3_0", "call_3_1"]


def test_hermes_unclosed_last_block_and_parameters_alias():
    p = parse_action('<tool_call>\n{"name": "get", "parameters": {"key": "a"}}')
    assert calls_of(p) == [("get", {"key": "a"})]


@pytest.mark.parametrize("text, code, needle", [
    ('<tool_call>{"name": "put", "arguments": {"key": }}</tool_call>', "malformed_json", "<tool_call> block 1 is not valid JSON"),
    ('<tool_call>{"arguments": {}}</tool_call>', "bad_tool_call", 'no "name"'),
    ('<tool_call>["put"]</tool_call>', "bad_tool_call", "must be a JSON object"),
    ('<tool_call>{"name": "put", "arguments": 3}</tool_call>', "bad_tool_call", "must be a JSON object, not int"),
])
def test_hermes_errors_explain_the_syntax(text, code, needle):
    with pytest.raises(ActionError) as e:
        parse_action(text, "hermes")
    assert e.value.code == code and needle in str(e.value) and "<tool_call>{" in str(e.value)


# ---------------------------------------------------------------- DeepSeek


def test_deepseek_v3_fenced_form():
    text = (f"I will store it.{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}put\n```json\n"
            f'{{"key": "k", "value": "v"}}\n```{DS_CALL_END}{DS_CALL_BEGIN}function{DS_SEP}noop\n```json\n{{}}\n```'
            f"{DS_CALL_END}{DS_CALLS_END}<｜end▁of▁sentence｜>")
    p = parse_action(text)
    assert p.format == "deepseek" and p.content == "I will store it."
    assert calls_of(p) == [("put", {"key": "k", "value": "v"}), ("noop", {})]


def test_deepseek_v31_form_with_reasoning():
    text = (f"reasoning here</think>{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get{DS_SEP}{{\"key\": \"k\"}}{DS_CALL_END}"
            f"{DS_CALL_BEGIN}add{DS_SEP}{{\"a\": 1, \"b\": 2}}{DS_CALL_END}{DS_CALLS_END}")
    p = parse_action(text, "deepseek")
    assert calls_of(p) == [("get", {"key": "k"}), ("add", {"a": 1, "b": 2})]
    assert p.reasoning == "reasoning here" and p.content == ""


def test_deepseek_unclosed_call_at_end_of_generation():
    p = parse_action(f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get{DS_SEP}{{\"key\": \"z\"}}")
    assert calls_of(p) == [("get", {"key": "z"})]


def test_dsml_form():
    text = (f"Storing.\n\n<{DSML}function_calls>\n<{DSML}invoke name=\"put\">\n"
            f'<{DSML}parameter name="key" string="true">42</{DSML}parameter>\n'
            f'<{DSML}parameter name="value" string="false">{{"n": [1, 2]}}</{DSML}parameter>\n'
            f"</{DSML}invoke>\n</{DSML}function_calls>")
    p = parse_action(text)
    assert p.format == "dsml" and p.content == "Storing."
    assert calls_of(p) == [("put", {"key": "42", "value": {"n": [1, 2]}})]


@pytest.mark.parametrize("text, code", [
    (f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}put{DS_SEP}{{\"key\": }}{DS_CALL_END}{DS_CALLS_END}", "malformed_json"),
    (f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}put {{}}{DS_CALL_END}{DS_CALLS_END}", "bad_tool_call"),
    (f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}{DS_SEP}{{}}{DS_CALL_END}{DS_CALLS_END}", "bad_tool_call"),
    (f"{DS_CALLS_BEGIN}{DS_CALLS_END}", "bad_tool_call"),
    (f"<{DSML}function_calls></{DSML}function_calls>", "bad_tool_call"),
    (f'<{DSML}function_calls><{DSML}invoke name="a"><{DSML}parameter name="x" string="false">nope'
     f"</{DSML}parameter></{DSML}invoke></{DSML}function_calls>", "malformed_json"),
])
def test_deepseek_errors(text, code):
    with pytest.raises(ActionError) as e:
        parse_action(text)
    assert e.value.code == code


def test_declared_format_does_not_read_other_syntaxes():
    ds = f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get{DS_SEP}{{}}{DS_CALL_END}{DS_CALLS_END}"
    assert parse_action(ds, "hermes").tool_calls == []
    assert parse_action('<tool_call>{"name": "get", "arguments": {}}</tool_call>', "deepseek").tool_calls == []


# ---------------------------------------------------------------- reasoning


@pytest.mark.parametrize("text, visible, reasoning", [
    ("<think>a</think>b", "b", "a"),
    ("a</think>b", "b", "a"),
    ("b<think>still thinking", "b", "still thinking"),
    ("<think>x</think>mid<think>y</think>end", "midend", "x\n\ny"),
    ("no reasoning", "no reasoning", None),
])
def test_split_reasoning(text, visible, reasoning):
    assert split_reasoning(text) == (visible, reasoning)


def test_final_answer_strips_reasoning():
    p = parse_action("<think>The user wants 17.</think>\n\nThe total is 17.<|im_end|>")
    assert (p.content, p.reasoning, p.tool_calls) == ("The total is 17.", "The user wants 17.", [])


# ---------------------------------------------------------------- rendering


CALLS = [Call("put", {"key": "k ü", "value": "v\n\"q\""}, "id0"), Call("add", {"a": 1, "b": [2, 3]}, "id1")]


@pytest.mark.parametrize("fmt", RENDER_FORMATS)
def test_render_round_trips(fmt):
    action = render_action("Working on it.", CALLS, fmt, reasoning="plan first")
    if fmt == "openai":
        assert isinstance(action, dict) and isinstance(action["tool_calls"][0]["function"]["arguments"], str)
        json.dumps(action)
    p = parse_action(action, id_prefix="id")
    assert calls_of(p) == [(c.name, c.arguments) for c in CALLS]
    assert p.content == "Working on it." and p.reasoning == "plan first"
    final = parse_action(render_action("Done: 42", [], fmt))
    assert (final.content, final.tool_calls) == ("Done: 42", [])


def test_render_accepts_several_call_shapes():
    shapes = [("noop", {}), {"name": "get", "arguments": {"key": "a"}}, {"tool": "put", "args": {"key": "b", "value": "c"}},
              {"id": "z", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]
    msg = render_action("", shapes, "openai")
    assert [c["id"] for c in msg["tool_calls"]] == ["call_0", "call_1", "call_2", "z"]
    assert calls_of(parse_action(msg)) == [("noop", {}), ("get", {"key": "a"}), ("put", {"key": "b", "value": "c"}),
                                           ("add", {"a": 1, "b": 2})]
    with pytest.raises(EnvgenError, match="unknown tool_format"):
        render_action("", [], "auto")
