"""Shared pieces of the RL tests (and bench/bench_rl.py): simple packs and a cached tiny policy.

Built once per process: the tiny pack, a tokenizer trained on its conversations, and a Qwen3 warmed up
on its reference trajectories (tests/conftest.py's pack; only put/submit are exposed to the model).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
import textwrap
from pathlib import Path

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # tiny models: threads only add contention on a busy 2-core host

from conftest import make_tiny_pack  # noqa: E402

from envgen.pack import format as packmod  # noqa: E402
from envgen.sandbox.local import describe_tools  # noqa: E402

TRAIN_TOOLS = ["put", "submit"]
WORK = Path(tempfile.mkdtemp(prefix="envgen-rl-tests-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)


def make_simple_pack(dest: Path, tools_source: str, tasks: list[dict], verify_source: str, name: str = "simple",
                     **limits) -> packmod.Pack:
    """A pack from tool code, a program verifier and task dicts (id, prompt text, params, reference calls)."""
    src = dest.parent / f"{dest.name}-src"
    (src / "env").mkdir(parents=True)
    (src / "hidden").mkdir()
    (src / "env" / "tools.py").write_text(textwrap.dedent(tools_source))
    (src / "hidden" / "verify.py").write_text(textwrap.dedent(verify_source))
    manifest = packmod.Manifest(name=name, family="test", description=f"{name} test pack",
                                tools=describe_tools(src / "env"), limits=packmod.Limits(**limits))
    task_list = [packmod.Task(id=t["id"], prompt=[{"role": "user", "content": t["prompt"]}],
                              verifier={"kind": "program", "args": {"params": t.get("params", {})}},
                              reference={"calls": t.get("calls", []), "answer": t.get("answer", "done")},
                              difficulty=len(t.get("calls", [])))
                 for t in tasks]
    return packmod.save(packmod.Pack(manifest, task_list), dest, env_from=src / "env", hidden_from=src / "hidden")


SLOW_TOOLS = '''
import time


def slow(seconds: float) -> str:
    """Wait, then answer.

    Args:
        seconds: how long to wait
    """
    time.sleep(seconds)
    return "waited"
'''

SLOW_VERIFY = '''
def verify(answer, calls, params, ctx):
    return float(any(c["tool"] == "slow" and c.get("ok") for c in calls)), {"calls": len(calls)}
'''


def make_slow_pack(dest: Path, tasks: int = 2) -> packmod.Pack:
    """A pack whose one tool sleeps: for measuring how tool calls of rollouts overlap."""
    return make_simple_pack(dest, SLOW_TOOLS, [
        {"id": f"slow-{i}", "prompt": "Wait half a second, then say done.",
         "calls": [{"tool": "slow", "args": {"seconds": 0.5}}]} for i in range(tasks)], SLOW_VERIFY, name="slow")


@functools.cache
def tiny_pack(tasks: int = 4) -> packmod.Pack:
    return make_tiny_pack(WORK / f"tiny-{tasks}", tasks=tasks)


@functools.cache
def tiny_policy(arch: str = "qwen3", family: str = "qwen3", steps: int = 100) -> Path:
    """Directory of a tiny model + tokenizer warmed up on the tiny pack's reference trajectories."""
    from envgen.rl.tiny import build_tiny_policy, reference_demonstrations

    demos, tools = reference_demonstrations(tiny_pack(), tools=TRAIN_TOOLS)
    out = WORK / f"policy-{arch}-{family}-{steps}"
    build_tiny_policy(demos, tools, out, arch=arch, family=family, steps=steps, lr=5e-3, batch_size=8)
    return out


def canned_trainer(tmp_path: Path, pack: packmod.Pack, rollouts: int = 8, seconds: float = 0.5,
                   max_concurrency: int = 8):
    """An EnvgenGRPOTrainer whose 'model' always calls slow(seconds), then answers: TRL's real rollout loop
    (parsing, tool loop, tool-result tokens, rewards) with fixed text. Returns (trainer, batch of rows,
    list receiving the seconds each tool-calling loop took)."""
    import time

    from envgen.rl import EnvgenGRPOConfig, EnvgenGRPOTrainer, environment_class, pack_dataset
    from envgen.rl.templates import install_template
    from envgen.rl.tiny import _render, reference_demonstrations, tiny_model, train_tokenizer

    demos, tools = reference_demonstrations(pack)
    tok = install_template(train_tokenizer([_render(d, tools, "qwen3") for d in demos], "qwen3", 400), "qwen3")
    model = tiny_model(tok, "qwen3", hidden_size=32, layers=1)
    call_ids = tok('<think>\n\n</think>\n\n<tool_call>\n{"name": "slow", "arguments": {"seconds": '
                   f'{seconds}}}}}\n</tool_call><|im_end|>').input_ids
    answer_ids = tok("<think>\n\n</think>\n\ndone<|im_end|>").input_ids
    response_id = tok.convert_tokens_to_ids("<tool_response>")
    times: list[float] = []

    class Canned(EnvgenGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            return [list(answer_ids if response_id in p else call_ids) for p in prompt_ids], None

        def _tool_call_loop(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return super()._tool_call_loop(*args, **kwargs)
            finally:
                times.append(time.perf_counter() - t0)

    cfg = EnvgenGRPOConfig(output_dir=str(tmp_path / "canned-out"), per_device_train_batch_size=rollouts,
                           num_generations=rollouts, max_completion_length=128, report_to="none", use_cpu=True,
                           bf16=False, save_strategy="no")
    ds = pack_dataset(pack)
    trainer = Canned(model=model, processing_class=tok, args=cfg, train_dataset=ds,
                     environment_factory=environment_class(pack, max_concurrency=max_concurrency))
    trainer.model.train()
    return trainer, [dict(ds[0]) for _ in range(rollouts)], times
