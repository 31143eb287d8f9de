"""EnvgenGRPOTrainer with ``use_vllm=True, vllm_mode="colocate"`` and both stabilizers.

vLLM cannot be installed here (it pulls CUDA), so a stand-in ``vllm`` package (tests/fake_vllm.py
``fake_vllm_module``, documented there) is put in ``sys.modules`` and in the names TRL's vllm_generation imported
from it: its ``LLM`` loads the checkpoint TRL names and samples with the same tiny CPU MoE engine as the fake
server (``FakeEngine``), returning ``RequestOutput`` / ``CompletionOutput`` objects with ``routed_experts``.
TRL's own colocate code (``VLLMGeneration``: building the ``LLM``, ``SamplingParams``, ``generate``, weight sync
through ``load_weights``, ``extract_logprobs``) runs unchanged.
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="the rl extra (torch) is not installed")
pytest.importorskip("trl", reason="the rl extra (trl) is not installed")

from fake_vllm import ROWS, SMALL, fake_vllm_module, save_tiny_moe, tiny_tokenizer  # noqa: E402

from envgen.errors import InputError  # noqa: E402
from envgen.rl import deepseek_v32_config  # noqa: E402

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.fixture
def policy_dir(tmp_path, tok):
    return save_tiny_moe(tmp_path / "policy", tok)


@pytest.fixture
def install_vllm(monkeypatch):
    """Put a fake ``vllm`` in place; returns a function taking ``fake_vllm_module``'s options."""
    import trl.generation.vllm_generation as gen_mod

    def install(**kw):
        module = fake_vllm_module(**kw)
        monkeypatch.setitem(sys.modules, "vllm", module)
        monkeypatch.setitem(sys.modules, "vllm.sampling_params", module.sampling_params)
        monkeypatch.setattr(gen_mod, "is_vllm_available", lambda *a, **k: True)
        for name in ("LLM", "SamplingParams", "RequestOutput"):
            monkeypatch.setattr(gen_mod, name, getattr(module, name), raising=False)
        monkeypatch.setattr(gen_mod, "StructuredOutputsParams", module.sampling_params.StructuredOutputsParams,
                            raising=False)
        return module

    return install


def constant_reward(completions, **_):
    return [1.0] * len(completions)


def make_trainer(policy_dir, tok, tmp_path, reward=constant_reward, **overrides):
    from datasets import Dataset

    from envgen.rl import EnvgenGRPOTrainer

    overrides = {"top_p": 0.9, "top_k": 8, **overrides}
    args = deepseek_v32_config(output_dir=str(tmp_path / "out"), beta=0.04, temperature=1.3, use_vllm=True,
                               vllm_mode="colocate", router_aux_loss_coef=0.0, **{**SMALL, **overrides})
    return EnvgenGRPOTrainer(model=str(policy_dir), processing_class=tok, args=args,
                             train_dataset=Dataset.from_list(ROWS), reward_funcs=[reward])


@pytest.mark.parametrize("sampling", [dict(top_k=8, top_p=0.9), dict(top_k=0, top_p=0.7, min_p=0.3)])
def test_colocated_routing_is_replayed_and_kl_is_zero_at_the_reference(tmp_path, tok, policy_dir, install_vllm,
                                                                       sampling):
    vllm = install_vllm()
    trainer = make_trainer(policy_dir, tok, tmp_path, truncated_completion_reward=None, **sampling)
    assert trainer._routing is not None and trainer._ref_routing is not None
    (llm,) = vllm.engines
    assert llm.kwargs["enable_return_routed_experts"] is True  # envgen asked TRL's LLM(...) for the experts
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = trainer._generate_and_score_completions(ROWS)
    engine = llm.engine
    # TRL loads the weights one tensor at a time before generating
    assert engine.weight_loads == len(list(trainer.model.parameters())) and len(llm.generate_calls) == 1
    sp = llm.generate_calls[0]
    assert (sp.temperature, sp.top_k, sp.top_p, sp.n) == (1.3, sampling["top_k"], sampling["top_p"], 1)
    by_ids = {(tuple(c["prompt_token_ids"]), tuple(c["token_ids"])): c for c in engine.choices}
    assert len(engine.choices) == 4
    P = batch["prompt_ids"].size(1)
    for b in range(4):
        p = batch["prompt_ids"][b][batch["prompt_mask"][b].bool()].tolist()
        c = batch["completion_ids"][b][batch["completion_mask"][b].bool()].tolist()
        served = by_ids[(tuple(p), tuple(c))]
        replay = batch["routing_replay"][b, P - len(p):P + len(c) - 1]
        # the routing replayed in training is the one the engine's routers picked, token by token
        assert torch.equal(replay.long(), served["_routing"].long())
        assert (batch["routing_replay"][b, P + len(c) - 1:] == -1).all()
        # the kept sets rebuilt from the SamplingParams are the sets the engine sampled from
        for j, want in enumerate(served["_kept"]):
            got = batch["keep_sampling_ids"][b, j]
            assert torch.equal(got[got >= 0].long().sort().values, want.sort().values)
    metrics = trainer._metrics["train"]
    assert metrics["keep_sampling/sampled_in_set"][-1] == 1.0
    assert torch.equal(batch["advantages"], torch.zeros(4))
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert metrics["keep_sampling/kept_mass"][-1] < 0.99
    assert metrics["keep_routing/replayed_frac"][-1] > 0.5
    assert abs(metrics["kl"][-1]) < 1e-7
    grads = [p.grad.abs().max().item() for p in trainer.model.parameters() if p.grad is not None]
    assert grads and max(grads) < 1e-7 and abs(loss.item()) < 1e-7


def test_two_colocated_training_steps(tmp_path, tok, policy_dir, install_vllm):
    vllm = install_vllm()
    trainer = make_trainer(policy_dir, tok, tmp_path, max_steps=2, learning_rate=1e-2,
                           truncated_completion_reward=None,  # the random-init model never ends a turn
                           reward=lambda completions, **_: [float(i % 2) for i in range(len(completions))])
    (llm,) = vllm.engines
    name = "model.layers.0.mlp.gate.weight"
    initial = dict(llm.engine.model.named_parameters())[name].detach().clone()
    trainer.train()
    # the weights are loaded (one tensor per call) before each generation
    assert len(llm.generate_calls) == 2 and llm.engine.weight_loads == 2 * len(list(trainer.model.parameters()))
    logged = [e for e in trainer.state.log_history if "keep_routing/replayed_frac" in e]
    assert len(logged) == 2 and all(e["keep_routing/replayed_frac"] > 0.5 for e in logged)
    assert all(e["keep_sampling/sampled_in_set"] == 1.0 for e in logged)
    served = dict(llm.engine.model.named_parameters())[name]
    trained = dict(trainer.model.named_parameters())[name]
    assert not torch.equal(served, initial) and not torch.equal(served, trained)


def test_a_vllm_without_the_routing_flag_is_refused_in_one_line(tmp_path, tok, policy_dir, install_vllm):
    install_vllm(routing_flag=False)  # vLLM before 0.21
    with pytest.raises(InputError) as err:
        make_trainer(policy_dir, tok, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "colocated vLLM engine returns no routed experts" in msg and "vLLM >= 0.21" in msg
    assert "allow_missing_stabilizers=True" in msg


def test_an_engine_returning_no_routed_experts_is_refused_at_its_first_answer(tmp_path, tok, policy_dir,
                                                                             install_vllm):
    install_vllm(returns_routing=False)
    trainer = make_trainer(policy_dir, tok, tmp_path)
    trainer.model.train()
    with pytest.raises(InputError, match="colocated vLLM engine returns no routed experts"):
        trainer._generate_and_score_completions(ROWS)


@pytest.mark.parametrize("kind", [dict(routing_flag=False), dict(returns_routing=False)])
def test_allow_missing_stabilizers_trains_colocated_without_keep_routing(tmp_path, tok, policy_dir, install_vllm,
                                                                         caplog, kind):
    install_vllm(**kind)
    with caplog.at_level(logging.WARNING, logger="envgen.rl.trainer"):
        trainer = make_trainer(policy_dir, tok, tmp_path, allow_missing_stabilizers=True)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        batch = trainer._generate_and_score_completions(ROWS)
        trainer._generate_and_score_completions(ROWS)
    lines = [r.getMessage() for r in caplog.records if "returns no routed experts" in r.getMessage()]
    assert len(lines) == 1 and "training without keep_routing" in lines[0]
    assert trainer._routing is None and trainer._ref_routing is None
    assert "routing_replay" not in batch and "keep_sampling_ids" in batch  # the other stabilizer stays on
    assert torch.isfinite(trainer.compute_loss(trainer.model, batch))


def test_dense_policy_colocated_keeps_the_sampling_mask(tmp_path, tok, install_vllm):
    from envgen.rl.tiny import tiny_model

    tiny_model(tok, "qwen3", seed=2, hidden_size=32, layers=1).save_pretrained(tmp_path / "dense")
    tok.save_pretrained(tmp_path / "dense")
    vllm = install_vllm(routing_flag=False)  # a dense model does not ask for the flag, so any vLLM will do
    trainer = make_trainer(tmp_path / "dense", tok, tmp_path, truncated_completion_reward=None, top_k=0, top_p=0.7)
    assert trainer._routing is None
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    batch = trainer._generate_and_score_completions(ROWS)
    assert "routing_replay" not in batch
    served = {tuple(c["token_ids"]): c["_kept"] for c in vllm.engines[0].engine.choices}
    for b in range(4):
        c = batch["completion_ids"][b][batch["completion_mask"][b].bool()].tolist()
        for j, want in enumerate(served[tuple(c)]):
            got = batch["keep_sampling_ids"][b, j]
            assert torch.equal(got[got >= 0].long().sort().values, want.sort().values)
    trainer.model.zero_grad()
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert abs(trainer._metrics["train"]["kl"][-1]) < 1e-7 and abs(loss.item()) < 1e-7
