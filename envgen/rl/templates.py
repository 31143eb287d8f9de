"""Thinking-retention chat templates (``rl/templates``) and the response templates TRL parses tool calls with.

The Jinja files are the source of truth and plain Jinja2, so the same file serves TRL training
(``install_template``) and inference (``vllm serve --chat-template $(python -c 'import envgen.rl as r;
print(r.template_path("qwen3"))')``). The rule they implement is ``envgen.llm.agent.messages_for_request``'s:
reasoning of assistant turns after the last user message is kept, earlier reasoning is dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import InputError
from ..paths import bundled

FAMILIES = {"qwen3": "qwen3.jinja", "deepseek_v3": "deepseek_v3.jinja", "chatml": "chatml.jinja"}
"""Template families: Qwen3 (and Qwen3-MoE), DeepSeek-V3 (V3.1/V3.2 token format), generic ChatML."""
ALIASES = {"qwen": "qwen3", "qwen3_moe": "qwen3", "qwen2": "chatml", "deepseek": "deepseek_v3",
           "deepseek_v3.1": "deepseek_v3", "deepseek_v31": "deepseek_v3", "deepseek_v32": "deepseek_v3",
           "deepseek-v3": "deepseek_v3", "hermes": "chatml"}

DS_EOS = "<｜end▁of▁sentence｜>"
DEEPSEEK_RESPONSE_TEMPLATE: dict[str, Any] = {
    # The prompt ends with `<｜Assistant｜><think>` (or, continuing after tool results, `<｜tool▁output▁end｜><think>`);
    # in non-thinking mode with `</think>`, which the zero-width alternative opens as an empty reasoning region.
    "defaults": {"role": "assistant"},
    "start_anchor_pattern": r"<｜Assistant｜>|<｜tool▁output▁end｜>",
    "fields": {
        "reasoning_content": {"open_pattern": r"<think>|(?=</think>)", "close_pattern": r"</think>",
                              "content": "text"},
        "tool_calls": {
            "open_pattern": r"(?:<｜tool▁calls▁begin｜>)?<｜tool▁call▁begin｜>(?P<name>[^<]+?)<｜tool▁sep｜>\s*",
            "close_pattern": r"\s*<｜tool▁call▁end｜>(?:<｜tool▁calls▁end｜>)?\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close_pattern": r"<｜end▁of▁sentence｜>\s*", "content": "text"},
    },
}


def family_name(family: str) -> str:
    """The canonical family for ``family`` (aliases such as ``qwen3_moe`` or ``deepseek_v32`` accepted)."""
    key = family.lower()
    key = ALIASES.get(key) or ALIASES.get(key.replace("-", "_")) or key.replace("-", "_")
    if key not in FAMILIES:
        raise InputError(f"unknown chat template family {family!r}; use one of {', '.join(FAMILIES)}")
    return key


def template_path(family: str) -> Path:
    """Path of the family's Jinja file (for ``vllm serve --chat-template``)."""
    return bundled("rl/templates") / FAMILIES[family_name(family)]


def chat_template(family: str) -> str:
    """The family's chat template text."""
    return template_path(family).read_text(encoding="utf-8")


def response_template(family: str) -> dict[str, Any]:
    """The transformers ``response_template`` that parses a completion of this family into a message.

    Qwen3 and ChatML completions share TRL's Qwen3 parser (same ``<think>``/``<tool_call>`` syntax and
    ``<|im_start|>assistant`` anchor); TRL has none for the DeepSeek-V3 token format, so envgen ships one.
    """
    family = family_name(family)
    if family == "deepseek_v3":
        return DEEPSEEK_RESPONSE_TEMPLATE
    from trl.chat_template_utils import qwen3_template

    return qwen3_template


def detect_family(tokenizer: Any) -> str:
    """Guess the family from the tokenizer's vocabulary (DeepSeek special tokens, else Qwen3 ChatML tokens)."""
    vocab = tokenizer.get_vocab()
    if "<｜Assistant｜>" in vocab or "<｜User｜>" in vocab:
        return "deepseek_v3"
    if "<|im_start|>" in vocab:
        return "qwen3" if "<tool_call>" in vocab or "<think>" in vocab else "chatml"
    raise InputError("cannot tell the chat template family from the tokenizer (no DeepSeek or ChatML special "
                      f"tokens); pass one of {', '.join(FAMILIES)}")


def install_template(tokenizer: Any, family: str = "auto") -> Any:
    """Set the family's thinking-retention chat template and response template on ``tokenizer``.

    TRL's ``GRPOTrainer`` then renders prompts and tool results with it (it passes TRL's tool-calling and
    prefix-preserving checks, so TRL keeps it instead of swapping in its own training template) and
    parses tool calls with the response template. Returns the tokenizer (or processor) it was given.
    """
    import transformers
    from packaging.version import Version

    if Version(transformers.__version__) < Version("5.13.0.dev0"):
        raise InputError(f"install_template needs transformers>=5.13 (response templates); found "
                          f"{transformers.__version__}")
    family = detect_family(tokenizer) if family == "auto" else family_name(family)
    inner = getattr(tokenizer, "tokenizer", tokenizer)  # a processor parses with its inner tokenizer
    tokenizer.chat_template = chat_template(family)
    if inner is not tokenizer:
        inner.chat_template = tokenizer.chat_template
    inner.response_template = response_template(family)
    return tokenizer
