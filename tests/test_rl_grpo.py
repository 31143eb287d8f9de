"""GRPO end to end on CPU: a tiny Qwen3 warmed up to call tools, a Qwen3-MoE with keep routing, the preset."""

from __future__ import annotations

import math
import os

import pytest

torch = pytest.importorskip("torch", reason="the rl extra (torch) is not installed")
pytest.importorskip("trl", reason="the rl extra (trl) is not installed")

import _rl_util  # noqa: E402

from envgen.errors import EnvgenError  # noqa: E402
from envgen.rl import deepseek_v32_config  # noqa: E402
from envgen.rl.config import config_path  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

CPU = dict(use_cpu=True, bf16=False, report_to="none", save_strategy="no", per_device_train_batch_size=8,
           num_generations=4, steps_per_generation=2, learning_rate=1e-4, max_completion_length=160)


def test_deepseek_v32_preset():
    cfg = deepseek_v32_config(output_dir="/tmp/unused", **CPU)
    assert cfg.loss_type == "grpo" and cfg.scale_rewards == "none"
    assert cfg.use_bias_correction_kl and cfg.beta > 0
    assert cfg.off_policy_mask_threshold == 0.5
    assert cfg.keep_sampling_mask and cfg.keep_routing and cfg.concurrent_tools
    assert cfg.top_p == 0.95 and cfg.learning_rate == 1e-4  # overrides win over the preset
    with pytest.raises(EnvgenError, match="unknown training arguments \\['bogus'\\]"):
        deepseek_v32_config(bogus=1)


def test_rl_train_script_parses_the_preset():
    from trl import ModelConfig, TrlParser

    from envgen.rl.trainer import EnvgenGRPOConfig
    from envgen.rl.training import PackArguments

    parser = TrlParser((PackArguments, EnvgenGRPOConfig, ModelConfig))
    pack_args, args, model_args = parser.parse_args_and_config(args=[
        "--pack", "p1", "p2", "--model_name_or_path", "m", "--output_dir", "/tmp/out", "--max_steps", "3",
        "--use_cpu", "true", "--bf16", "false",
        "--config", str(config_path("deepseek_v32"))])
    assert pack_args.pack == ["p1", "p2"] and model_args.model_name_or_path == "m"
    assert args.keep_routing and args.off_policy_mask_threshold == 0.5 and args.max_steps == 3


def test_grpo_on_a_pack_calls_tools_scores_with_the_verifier_and_trains(tmp_path):
    from envgen.rl.training import build_trainer, summarize

    policy = _rl_util.tiny_policy()
    args = deepseek_v32_config(output_dir=str(tmp_path / "out"), max_steps=2, **CPU)
    trainer = build_trainer([_rl_util.tiny_pack()], str(policy), args, tools=_rl_util.TRAIN_TOOLS)
    assert trainer.chat_template is None  # TRL kept envgen's template (prefix-preserving, tool-capable)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all(math.isfinite(h["loss"]) for h in logs)
    first = logs[0]
    assert first["tools/call_frequency"] > 0.5  # the warmed-up model calls tools
    assert 0.0 <= first["rewards/verifier/mean"] <= 1.0 and "envgen/tiny/reward" in first
    assert first["envgen/tiny/tool_calls"] > 0.5
    assert first["keep_sampling/sampled_in_set"] == 1.0 and 0 < first["keep_sampling/kept_mass"] <= 1.0
    assert "off_policy/masked_frac" in first and "kl" in first
    assert first["stabilizers/unmatched_turns"] == 0.0
    judged = [env._episode.verdict for env in trainer.environments if env._episode and env._episode.verdict]
    # the pack's own program verifier (hidden/verify.py) judged every answered rollout
    assert judged and all(set(v.details) & {"got", "reason"} for v in judged)
    calls = [c["tool"] for env in trainer.environments for c in env._calls]
    assert set(calls) <= {"put", "submit"} and calls
    summary = summarize(trainer)
    assert summary["steps"] == 2 and "envgen/tiny/reward" in summary


def test_envgen_train_function_saves_a_model_with_the_template(tmp_path):
    from transformers import AutoTokenizer

    from envgen.rl import train

    out = tmp_path / "trained"
    summary = train([_rl_util.tiny_pack()], str(_rl_util.tiny_policy()), "deepseek_v32", output_dir=str(out),
                    max_steps=1, tools=_rl_util.TRAIN_TOOLS, **{**CPU, "max_completion_length": 96})
    assert summary["steps"] == 1 and summary["output_dir"] == str(out)
    assert math.isfinite(summary["loss"])
    tok = AutoTokenizer.from_pretrained(out)
    assert "thinking-retention" in tok.chat_template
    assert (out / "config.json").exists()


def test_grpo_with_keep_routing_on_a_tiny_moe(tmp_path):
    from transformers import AutoTokenizer

    from envgen.rl.templates import install_template
    from envgen.rl.tiny import tiny_model
    from envgen.rl.training import build_trainer

    tok = install_template(AutoTokenizer.from_pretrained(_rl_util.tiny_policy()), "qwen3")
    model = tiny_model(tok, "qwen3_moe", seed=3)
    args = deepseek_v32_config(output_dir=str(tmp_path / "out"), max_steps=2, beta=0.0,
                               **{**CPU, "max_completion_length": 32})
    trainer = build_trainer([_rl_util.tiny_pack()], model, args, tokenizer=tok, tools=_rl_util.TRAIN_TOOLS)
    assert trainer._routing is not None and trainer._routing.num_layers == 2
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert all(math.isfinite(h["loss"]) for h in logs)
    assert logs[0]["keep_routing/replayed_frac"] > 0.5  # most (token, layer) routings come from the rollout
    # before any update a fresh routing disagrees with the rollout's only by numerics (cache vs. full forward)
    assert logs[0]["keep_routing/changed_frac"] < 0.05
    assert "keep_routing/changed_frac" in logs[1] and "aux_loss" in logs[0]


def test_several_packs_train_together_with_per_pack_metrics(tmp_path):
    from envgen.pack import format as packmod
    from envgen.rl.training import build_trainer

    base = _rl_util.tiny_pack()
    twin = packmod.save(packmod.Pack(base.manifest.model_copy(update={"name": "twin"}), base.tasks, base.root),
                        tmp_path / "twin")
    args = deepseek_v32_config(output_dir=str(tmp_path / "out"), max_steps=1, beta=0.0, keep_sampling_mask=False,
                               **{**CPU, "steps_per_generation": 1, "max_completion_length": 96,
                                  "per_device_train_batch_size": 16, "num_generations": 2})  # 8 rows: both packs
    trainer = build_trainer([base, twin], str(_rl_util.tiny_policy()), args, tools=_rl_util.TRAIN_TOOLS)
    assert sorted(trainer.environment_factories) == ["tiny", "twin"]
    trainer.train()
    log = trainer.state.log_history[0]
    assert math.isfinite(log["loss"])
    assert {"envgen/tiny/tool_calls", "envgen/twin/tool_calls"} <= set(log)  # rows were routed to both packs
    kinds = {type(env)._key for env in trainer.environments}
    assert kinds == {"tiny", "twin"}
