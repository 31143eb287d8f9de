"""hf: policy: a local transformers checkpoint whose generate calls batch concurrent rollouts."""

from __future__ import annotations

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
