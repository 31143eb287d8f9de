"""`hf:PATH` policy: a local transformers checkpoint with batched generation (extra `rl`).

Rollout threads each hold an HFPolicy, but the model is loaded once per process and shared: a batcher
thread collects the prompts that arrive within a few milliseconds of each other (up to `batch`) and
runs them through one left-padded `generate` call, so concurrent rollouts share forward passes the way
a serving engine would. Sampling uses one torch generator per batch, so a rollout is reproducible from
its seed only when it runs alone (`batch=1`) or greedily (`temperature=0`).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from ..llm.client import messages_for_request
from ..llm.textcalls import calls_as_text, tools_system_prompt
from ..errors import EnvgenError, InputError
from .base import Policy


@dataclass(frozen=True)
class _Sampling:
    temperature: float
    top_p: float | None
    top_k: int | None
    max_new_tokens: int


class _Batcher:
    """One model per (path, device, batching) in this process; batches prompts from many rollout threads."""

    _instances: dict[tuple, _Batcher] = {}
    _lock = threading.Lock()

    @classmethod
    def get(cls, path: str, device: str, batch: int, wait_ms: float) -> _Batcher:
        with cls._lock:
            key = (path, device, int(batch), float(wait_ms))
            if key not in cls._instances:
                cls._instances[key] = cls(path, device, batch, wait_ms)
            return cls._instances[key]

    def __init__(self, path: str, device: str, batch: int, wait_ms: float):
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError:
            raise InputError("hf: policies need the rl extra: pip install 'envgen[rl]'") from None
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
        except OSError as e:
            raise InputError(f"hf:{path}: cannot load the checkpoint: {e}") from None
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.torch, self.device, self.batch, self.wait = torch, device, int(batch), float(wait_ms) / 1000
        self.batches: list[int] = []
        """Size of every generate call, for tests and benchmarks."""
        self._q: queue.Queue = queue.Queue()
        threading.Thread(target=self._loop, name=f"envgen-hf-{path}", daemon=True).start()

    def generate(self, prompt: str, sampling: _Sampling, seed: int | None) -> tuple[str, int, int]:
        fut: Future = Future()
        self._q.put((prompt, sampling, seed, fut))
        return fut.result()

    def _loop(self) -> None:
        while True:
            items = [self._q.get()]
            try:
                while len(items) < self.batch:
                    items.append(self._q.get(timeout=self.wait))
            except queue.Empty:
                pass
            groups: dict[_Sampling, list] = {}
            for it in items:
                groups.setdefault(it[1], []).append(it)
            for sampling, group in groups.items():
                try:
                    results = self._run(sampling, group)
                except Exception as e:  # a failed batch fails its callers, never the batcher thread
                    for *_, fut in group:
                        fut.set_exception(EnvgenError(f"hf generation failed: {type(e).__name__}: {e}"))
                    continue
                for (*_, fut), res in zip(group, results):
                    fut.set_result(res)

    def _run(self, s: _Sampling, group: list) -> list[tuple[str, int, int]]:
        torch = self.torch
        enc = self.tokenizer([g[0] for g in group], return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        seed = group[0][2]
        if seed is not None:
            torch.manual_seed(seed)
        kwargs: dict[str, Any] = {"max_new_tokens": s.max_new_tokens, "pad_token_id": self.tokenizer.pad_token_id}
        if s.temperature > 0:
            kwargs.update(do_sample=True, temperature=s.temperature)
            if s.top_p is not None:
                kwargs["top_p"] = s.top_p
            if s.top_k is not None:
                kwargs["top_k"] = s.top_k
        else:
            kwargs["do_sample"] = False
        with torch.no_grad():
            out = self.model.generate(**enc, **kwargs)
        self.batches.append(len(group))
        width = enc["input_ids"].shape[1]
        results = []
        for i in range(len(group)):
            new = out[i, width:]
            prompt_tokens = int(enc["attention_mask"][i].sum())
            text = self.tokenizer.decode(new, skip_special_tokens=False)
            for tok in {self.tokenizer.pad_token, self.tokenizer.eos_token} - {None}:
                text = text.replace(tok, "")
            completion = int((new != self.tokenizer.pad_token_id).sum())
            results.append((text, prompt_tokens, completion))
        return results


def render_prompt(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> tuple[str, bool]:
    """The generation prompt for ``messages`` and ``tools`` through the tokenizer's chat template, and whether
    envgen wrote the tools in itself.

    Many templates ignore ``tools`` (SmolLM2's does): the prompt would then hold no tool at all and the model could
    only guess. When rendering with the tools gives the same text as without them, the tools go into the system
    prompt the Hermes/Qwen way (``<tools>`` schemas, answer with ``<tool_call>{...}</tool_call>``, which PackEnv
    parses) and earlier assistant calls are written as those blocks too (such templates drop ``tool_calls``)."""
    def render(msgs: list[dict[str, Any]], with_tools: list[dict[str, Any]] | None) -> str:
        try:
            return tokenizer.apply_chat_template(msgs, tools=with_tools, add_generation_prompt=True, tokenize=False)
        except Exception as e:
            raise InputError(f"hf policy: the tokenizer's chat template failed: {type(e).__name__}: {e}") from None

    msgs = messages_for_request(messages)
    prompt = render(msgs, tools or None)
    if not tools or prompt != render(msgs, None):
        return prompt, False
    system = tools_system_prompt(tools)
    msgs = [calls_as_text(m) if m.get("role") == "assistant" else m for m in msgs]
    if msgs and msgs[0].get("role") == "system":
        msgs = [{**msgs[0], "content": f"{msgs[0].get('content') or ''}\n\n{system}".strip()}, *msgs[1:]]
    else:
        msgs = [{"role": "system", "content": system}, *msgs]
    return render(msgs, None), True


class HFPolicy(Policy):
    """Spec: ``hf:PATH?temperature=T&top_p=P&top_k=K&max_tokens=N&batch=B&device=cpu``.

    The prompt is the tokenizer's chat template over the episode's messages (with thinking retention)
    and the task's tools (written into the system prompt by envgen when the template ignores them: see
    ``render_prompt``); the model's raw text goes to PackEnv, which parses its tool calls.
    """

    name = "hf"

    def __init__(self, path: str, *, temperature: float = 1.0, top_p: float | None = None, top_k: int | None = None,
                 max_tokens: int = 512, batch: int = 8, device: str = "cpu", wait_ms: float = 5.0):
        if not path:
            raise InputError("hf policy needs a checkpoint path: hf:PATH")
        self.batcher = _Batcher.get(path, device, batch, wait_ms)
        self.sampling = _Sampling(temperature, top_p, top_k, max_tokens)
        self._seed: int | None = None
        self.tools_in_system = False
        """Whether the last prompt carried the tools in its system prompt (the chat template ignores ``tools``)."""

    def begin(self, seed: int | None) -> None:
        super().begin(seed)
        self._seed = seed

    def act(self, observation: str, info: dict[str, Any]) -> str:
        prompt, self.tools_in_system = render_prompt(self.batcher.tokenizer, info["messages"], info.get("tools"))
        seed = None if self._seed is None else (self._seed * 1009 + int(info.get("turns", 0))) % (2**31)
        text, n_in, n_out = self.batcher.generate(prompt, self.sampling, seed)
        self.tokens += n_in + n_out
        return text
