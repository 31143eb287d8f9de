"""Tool calls of different rollouts run concurrently under TRL's sequential tool loop (ToolPrefetch)."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import _rl_util
from envgen.rl.concurrency import ToolPrefetch

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


class Recorder:
    """A stand-in environment: tools sleep and record when and in which order they ran."""

    _executor = ThreadPoolExecutor(2)

    def __init__(self, name):
        self.name, self.log = name, []

    def wait(self, seconds: float, tag: str = "") -> str:
        self.log.append(("start", tag, time.perf_counter()))
        time.sleep(seconds)
        self.log.append(("end", tag, time.perf_counter()))
        if tag == "boom":
            raise RuntimeError("tool failed")
        return f"{self.name}:{tag}"


def call(name, **args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


def trl_style_loop(prefetch, completions):
    """What TRL's _tool_call_loop does with the dicts: rollout after rollout, call after call."""
    out = []
    for i, msgs in enumerate(completions):
        for tc in msgs[-1].get("tool_calls") or []:
            fn = prefetch.tool_dicts[i].get(tc["function"]["name"])
            try:
                if fn is None:
                    raise ValueError("not found")
                out.append((i, fn(**tc["function"]["arguments"])))
            except Exception as e:  # noqa: BLE001 - as TRL does
                out.append((i, f"error: {e}"))
    return out


def test_prefetch_runs_rollouts_in_parallel_in_order_within_a_rollout_and_bounded():
    envs = [Recorder(f"r{i}") for i in range(4)]
    completions = [[{"role": "assistant", "content": "", "tool_calls": [
        call("wait", seconds=0.3, tag="a"), call("wait", seconds=0.1, tag="b"),
        call("wait", bogus=1), call("missing"), call("wait", seconds=0.1, tag="boom")]}] for _ in envs]
    dicts = [{"wait": e.wait} for e in envs]
    prefetch = ToolPrefetch(envs, completions, dicts, ThreadPoolExecutor(8))
    t0 = time.perf_counter()
    results = trl_style_loop(prefetch, completions)
    elapsed = time.perf_counter() - t0
    assert prefetch.jobs == 4
    # the class executor has 2 workers: two rounds of ~0.5 s, not four sequential ones (2 s)
    assert 0.9 <= elapsed < 1.6, elapsed
    for i, env in enumerate(envs):
        tags = [tag for kind, tag, _ in env.log if kind == "start"]
        assert tags == ["a", "b", "boom"]  # in the rollout's order; the unbindable call never reached the tool
        assert results[5 * i:5 * i + 5] == [(i, f"r{i}:a"), (i, f"r{i}:b"),
                                            (i, "error: Recorder.wait() got an unexpected keyword argument 'bogus'"),
                                            (i, "error: not found"), (i, "error: tool failed")]


def test_eight_rollouts_of_a_half_second_tool_take_about_half_a_second(tmp_path):
    pytest.importorskip("torch", reason="the rl extra (torch) is not installed")
    pytest.importorskip("trl", reason="the rl extra (trl) is not installed")
    pack = _rl_util.make_slow_pack(tmp_path / "slow")
    trainer, batch, times = _rl_util.canned_trainer(tmp_path, pack, rollouts=8)
    trainer._generate_and_score_completions(batch)  # starts the 8 sandboxes; not timed
    out = trainer._generate_and_score_completions(batch)
    concurrent = times[-1]
    trainer._concurrent_tools = False
    trainer._generate_and_score_completions(batch)
    sequential = times[-1]
    metrics = trainer._metrics["train"]
    assert metrics["tools/call_frequency"][-1] == 1.0 and metrics["tools/failure_frequency"][-1] == 0.0
    assert metrics["rewards/verifier/mean"][-1] == 1.0  # every rollout's verifier saw its slow() call
    assert out["tool_mask"].min() == 0  # tool-result tokens are masked out of the loss, as TRL does
    assert concurrent < 1.5, f"8 x 0.5 s took {concurrent:.2f} s with concurrent tools"
    assert sequential > 3.9, sequential
    assert threading.active_count() < 64
