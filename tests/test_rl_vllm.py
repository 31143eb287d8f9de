"""EnvgenGRPOTrainer with ``use_vllm=True, vllm_mode="server"`` and both stabilizers, against a fake vLLM
server at the HTTP boundary (tests/fake_vllm.py) that generates with a tiny MoE on CPU: TRL's own
``VLLMClient`` and ``VLLMGeneration`` talk to it over real HTTP.

vLLM itself is not installed (it pulls CUDA), so TRL's ``is_vllm_available`` is answered True, and the two
client methods that run NCCL (``init_communicator``, ``update_named_params``: the tensors go over an NCCL group
that needs CUDA) are replaced: the weights the trainer streams are copied into the fake's model in-process,
which is what the broadcast delivers. Everything else (requests, responses, parsing) is TRL's real code.
"""

from __future__ import annotations

import logging
import os

import pytest

torch = pytest.importorskip("torch", reason="the rl extra (torch) is not installed")
pytest.importorskip("trl", reason="the rl extra (trl) is not installed")

from fake_vllm import ROWS, SMALL, FakeVLLM, save_tiny_moe, tiny_tokenizer  # noqa: E402

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
def vllm_boundary(monkeypatch):
    """TRL's vLLM client without vLLM installed; weight sync handed to the fake in-process (see module doc)."""
    import trl.generation.vllm_client as client_mod
    import trl.generation.vllm_generation as gen_mod

    monkeypatch.setattr(gen_mod, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(client_mod, "is_vllm_available", lambda *a, **k: True)
    state = {"fake": None}
    monkeypatch.setattr(client_mod.VLLMClient, "init_communicator", lambda self, device=0: None)
    monkeypatch.setattr(client_mod.VLLMClient, "update_named_params",
                        lambda self, metadata, named_params: state["fake"].load_weights(named_params))
    return state


def make_fake(policy_dir, **kw):
    from transformers import AutoModelForCausalLM

    return FakeVLLM(AutoModelForCausalLM.from_pretrained(policy_dir), **kw)


def constant_reward(completions, **_):
    return [1.0] * len(completions)


def make_trainer(policy_dir, tok, fake, tmp_path, reward=constant_reward, **overrides):
    from datasets import Dataset

    from envgen.rl import EnvgenGRPOTrainer

    overrides = {"top_p": 0.9, "top_k": 8, **overrides}
    args = deepseek_v32_config(output_dir=str(tmp_path / "out"), beta=0.04, temperature=1.3, use_vllm=True, vllm_mode="server", vllm_server_base_url=fake.url,
                               vllm_server_timeout=5, router_aux_loss_coef=0.0, **{**SMALL, **overrides})
    return EnvgenGRPOTrainer(model=str(policy_dir), processing_class=tok, args=args,
                             train_dataset=Dataset.from_list(ROWS),
                             reward_funcs=[reward])


@pytest.mark.parametrize("sampling", [dict(top_k=8, top_p=0.9), dict(top_k=0, top_p=0.7, min_p=0.3)])
def test_server_routing_is_replayed_and_kl_is_zero_at_the_reference(tmp_path, tok, policy_dir, vllm_boundary,
                                                                    sampling):
    with make_fake(policy_dir, routed_format="npy") as fake:
        vllm_boundary["fake"] = fake
        trainer = make_trainer(policy_dir, tok, fake, tmp_path, truncated_completion_reward=None, **sampling)
        assert trainer._routing is not None and trainer._ref_routing is not None
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        batch = trainer._generate_and_score_completions(ROWS)
        assert fake.weight_loads == 1 and len(fake.requests) == 1
        sent = fake.requests[0]
        assert (sent["temperature"], sent["top_k"], sent["top_p"], sent["n"]) == (
            1.3, sampling["top_k"], sampling["top_p"], 4)
        by_ids = {(tuple(c["prompt_token_ids"]), tuple(c["token_ids"])): c for c in fake.choices}
        P = batch["prompt_ids"].size(1)
        for b in range(4):
            p = batch["prompt_ids"][b][batch["prompt_mask"][b].bool()].tolist()
            c = batch["completion_ids"][b][batch["completion_mask"][b].bool()].tolist()
            served = by_ids[(tuple(p), tuple(c))]
            replay = batch["routing_replay"][b, P - len(p):P + len(c) - 1]
            # the routing replayed in training is the one the server's routers picked, token by token
            assert torch.equal(replay.long(), served["_routing"].long())
            assert (batch["routing_replay"][b, P + len(c) - 1:] == -1).all()  # the last token was never fed
            # the kept sets rebuilt from the request are the sets the server sampled from
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


def test_two_training_steps_through_the_server(tmp_path, tok, policy_dir, vllm_boundary):
    with make_fake(policy_dir, routed_format="list") as fake:  # earlier vLLM: a nested list
        vllm_boundary["fake"] = fake
        name = "model.layers.0.mlp.gate.weight"
        initial = dict(fake.model.named_parameters())[name].detach().clone()
        trainer = make_trainer(policy_dir, tok, fake, tmp_path, max_steps=2, learning_rate=1e-2,
                               truncated_completion_reward=None,  # the random-init model never ends a turn
                               reward=lambda completions, **_: [float(i % 2) for i in range(len(completions))])
        trainer.train()
        assert len(fake.requests) == 2 and fake.weight_loads == 2  # weights synced before each generation
        logged = [e for e in trainer.state.log_history if "keep_routing/replayed_frac" in e]
        assert len(logged) == 2 and all(e["keep_routing/replayed_frac"] > 0.5 for e in logged)
        assert all(e["keep_sampling/sampled_in_set"] == 1.0 for e in logged)
        # the second generation ran on step 1's weights (synced), and step 2 updated the policy after that
        served = dict(fake.model.named_parameters())[name]
        trained = dict(trainer.model.named_parameters())[name]
        assert not torch.equal(served, initial) and not torch.equal(served, trained)


def test_a_server_without_routed_experts_is_refused_in_one_line(tmp_path, tok, policy_dir, vllm_boundary):
    with make_fake(policy_dir, routed_experts=False, advertise_routing=False) as fake:
        vllm_boundary["fake"] = fake
        with pytest.raises(InputError) as err:
            make_trainer(policy_dir, tok, fake, tmp_path)
    msg = str(err.value)
    assert "\n" not in msg and "--enable-return-routed-experts" in msg and "vLLM >= 0.21" in msg
    assert "allow_missing_stabilizers=True" in msg


def test_a_silent_server_is_refused_at_its_first_answer(tmp_path, tok, policy_dir, vllm_boundary):
    with make_fake(policy_dir, routed_experts=False, advertise_routing=None) as fake:
        vllm_boundary["fake"] = fake
        trainer = make_trainer(policy_dir, tok, fake, tmp_path)
        trainer.model.train()
        with pytest.raises(InputError, match="--enable-return-routed-experts"):
            trainer._generate_and_score_completions(ROWS)


def test_allow_missing_stabilizers_trains_without_keep_routing(tmp_path, tok, policy_dir, vllm_boundary, caplog):
    with make_fake(policy_dir, routed_experts=False, advertise_routing=None) as fake:
        vllm_boundary["fake"] = fake
        trainer = make_trainer(policy_dir, tok, fake, tmp_path, allow_missing_stabilizers=True)
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        with caplog.at_level(logging.WARNING, logger="envgen.rl.trainer"):
            batch = trainer._generate_and_score_completions(ROWS)
            trainer._generate_and_score_completions(ROWS)
        lines = [r.getMessage() for r in caplog.records if "enable-return-routed-experts" in r.getMessage()]
        assert len(lines) == 1 and "training without keep_routing" in lines[0]
        assert trainer._routing is None and trainer._ref_routing is None
        assert "routing_replay" not in batch and "keep_sampling_ids" in batch  # the other stabilizer stays on
        loss = trainer.compute_loss(trainer.model, batch)
        assert torch.isfinite(loss)


def test_dense_policy_keeps_the_sampling_mask_through_the_server(tmp_path, tok, vllm_boundary):
    """A dense model (nothing to route) with use_vllm: refused before issue 17; KL 0 at the reference now."""
    from envgen.rl.tiny import tiny_model

    tiny_model(tok, "qwen3", seed=2, hidden_size=32, layers=1).save_pretrained(tmp_path / "dense")
    tok.save_pretrained(tmp_path / "dense")
    with make_fake(tmp_path / "dense", advertise_routing=False) as fake:
        vllm_boundary["fake"] = fake
        trainer = make_trainer(tmp_path / "dense", tok, fake, tmp_path, truncated_completion_reward=None,
                               top_k=0, top_p=0.7)
        assert trainer._routing is None
        trainer.model.train()
        trainer.current_gradient_accumulation_steps = 1
        batch = trainer._generate_and_score_completions(ROWS)
        assert "routing_replay" not in batch
        served = {tuple(c["token_ids"]): c["_kept"] for c in fake.choices}
        for b in range(4):
            c = batch["completion_ids"][b][batch["completion_mask"][b].bool()].tolist()
            for j, want in enumerate(served[tuple(c)]):
                got = batch["keep_sampling_ids"][b, j]
                assert torch.equal(got[got >= 0].long().sort().values, want.sort().values)
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, batch)
        loss.backward()
        assert abs(trainer._metrics["train"]["kl"][-1]) < 1e-7 and abs(loss.item()) < 1e-7


def test_routing_from_a_server_running_another_model_is_refused(tmp_path, tok, policy_dir, vllm_boundary):
    from envgen.rl.tiny import tiny_model

    tiny_model(tok, "qwen3_moe", seed=1, hidden_size=32, layers=1).save_pretrained(tmp_path / "other")
    from types import SimpleNamespace

    with make_fake(tmp_path / "other") as fake:  # one MoE layer where the policy has two
        vllm_boundary["fake"] = SimpleNamespace(load_weights=lambda params: None)  # the shapes differ: no sync
        trainer = make_trainer(policy_dir, tok, fake, tmp_path)
        trainer.model.train()
        with pytest.raises(InputError, match=r"routed experts have shape \(\d+, 1, 2\).*same model"):
            trainer._generate_and_score_completions(ROWS)
