"""A local vLLM server at the HTTP boundary: what TRL's ``VLLMClient`` calls, answered by a tiny model on CPU.

Endpoints (the ones ``trl.generation.vllm_client.VLLMClient`` and ``VLLMGeneration`` call in server mode):
``GET /health``, ``GET /v1/models``, ``GET /server_info`` (``vllm_config.model_config.logprobs_mode`` and
``enable_return_routed_experts``, ``weight_transfer_config``), ``GET /get_world_size``, ``POST /v1/completions``,
``POST /reset_prefix_cache`` and the weight-transfer endpoints (``/init_weight_transfer_engine``,
``/start_weight_update``, ``/update_weights``, ``/finish_weight_update``: accepted; the tensors themselves travel
over NCCL on a real server, so tests hand them to ``load_weights`` in-process).

``/v1/completions`` samples like vLLM's v1 sampler (temperature, then min-p, then top-k / top-p), prefill then one
decode step per token through the KV cache, and answers each choice with ``prompt_token_ids``, ``token_ids``,
completions-style ``logprobs`` of the sampled tokens (processed log-probs: after temperature and truncation)
and, when ``routed_experts`` is on, the experts every MoE router picked for each token it fed (prompt + completion
- 1 positions, MoE layers, top-k), read by hooks of its own and encoded as recent vLLM does (base64 ``.npy``) or
as a nested list (``routed_format="list"``, earlier vLLM).

``FakeEngine`` is the sampling part alone; ``fake_vllm_module`` wraps it in a stand-in for the ``vllm`` package
(``LLM``, ``SamplingParams``, ``RequestOutput`` / ``CompletionOutput`` / ``Logprob``) for colocate mode, where TRL
builds ``vllm.LLM`` in-process: ``CompletionOutput.routed_experts`` is the ``np.ndarray`` vLLM >= 0.21 fills
(vllm/outputs.py) when the engine is built with ``enable_return_routed_experts=True``.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import types
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

import numpy as np
import torch


class FakeEngine:
    """vLLM's sampling on CPU: ``_sample(prompt, body)`` answers one completions-style choice; every choice is
    kept in ``choices`` with the routing its routers picked (``_routing``) and the kept sets (``_kept``)."""

    def __init__(self, model: Any, *, routed_experts: bool = True, routed_format: str = "npy", seed: int = 0,
                 name: str = "tiny"):
        self.model = model.eval()
        self.routed_experts = routed_experts
        self.routed_format = routed_format
        self.name = name
        self.generator = torch.Generator().manual_seed(seed)
        self.requests: list[dict] = []
        self.choices: list[dict] = []  # every choice answered; its routing under "_routing", kept sets under "_kept"
        self.weight_loads = 0
        self.lock = threading.Lock()
        self.routers = [m for m in model.modules() if type(m).__name__.lower().endswith("topkrouter")]
        self._seen: list[list[torch.Tensor]] | None = None
        for i, r in enumerate(self.routers):
            r.register_forward_hook(self._hook(i))

    def _hook(self, layer: int):
        def hook(module, args, output):
            if self._seen is not None:
                self._seen[layer].append(output[2].detach().clone())
        return hook

    @torch.no_grad()
    def load_weights(self, named_params) -> None:
        """What the NCCL broadcast delivers: the trainer's tensors copied into the engine's model."""
        state = self.model.state_dict()
        with self.lock:
            for name, tensor in named_params:
                state[name].copy_(tensor.detach().to(state[name].dtype))
            self.weight_loads += 1

    # ------------------------------------------------------------ generation

    def _process(self, logits: torch.Tensor, body: dict) -> torch.Tensor:
        defaults = self.model.generation_config.to_diff_dict()  # a field sent as null: the checkpoint's value
        temperature, min_p, top_k, top_p = (body.get(k) if body.get(k) is not None else defaults.get(k)
                                            for k in ("temperature", "min_p", "top_k", "top_p"))
        z = logits.float() / float(temperature or 1.0)
        min_p, top_k, top_p = min_p or 0.0, top_k or 0, top_p or 1.0
        if min_p > 0:
            probs = z.softmax(-1)
            z = z.masked_fill(probs < min_p * probs.max(), float("-inf"))
        if top_k and top_k > 0:
            kth = z.topk(min(top_k, z.numel())).values[-1]
            z = z.masked_fill(z < kth, float("-inf"))
        if top_p < 1.0:
            sorted_z, idx = z.sort(descending=True)
            cum = sorted_z.softmax(-1).cumsum(-1)
            drop = cum - sorted_z.softmax(-1) >= top_p  # keep the smallest prefix reaching top_p
            z[idx[drop]] = float("-inf")
        return z

    @torch.no_grad()
    def _sample(self, prompt: list[int], body: dict) -> dict:
        eos = self.model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos])
        self._seen = [[] for _ in self.routers]
        out, lps, kept = [], [], []
        ids = torch.tensor([prompt])
        past = None
        finish = "length"
        for _ in range(int(body.get("max_tokens") or 16)):
            res = self.model(input_ids=ids, past_key_values=past, use_cache=True)
            past = res.past_key_values
            z = self._process(res.logits[0, -1], body)
            tok = int(torch.multinomial(z.softmax(-1), 1, generator=self.generator))
            kept.append(torch.isfinite(z).nonzero().squeeze(-1))
            out.append(tok)
            lps.append(float(z.log_softmax(-1)[tok]))
            if tok in eos:
                finish = "stop"
                break
            ids = torch.tensor([[tok]])
        seen, self._seen = self._seen, None
        routing = torch.stack([torch.cat(chunks, 0) for chunks in seen], 1) if self.routers else None
        choice = {"text": "", "finish_reason": finish, "stop_reason": None, "prompt_token_ids": list(prompt),
                  "token_ids": out,
                  "logprobs": {"tokens": [f"token_id:{t}" for t in out], "token_logprobs": lps,
                               "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(out, lps)],
                               "text_offset": [0] * len(out)},
                  "routed_experts": None}
        record = {**choice, "_kept": kept}
        if routing is not None:
            assert routing.size(0) == len(prompt) + len(out) - 1
            self.choices.append({**record, "_routing": routing})
            if self.routed_experts:
                arr = routing.numpy().astype(np.int32)
                if self.routed_format == "array":  # vllm.CompletionOutput (offline LLM)
                    choice["routed_experts"] = arr
                elif self.routed_format == "list":
                    choice["routed_experts"] = arr.tolist()
                else:
                    buf = io.BytesIO()
                    np.save(buf, arr, allow_pickle=False)
                    choice["routed_experts"] = base64.b64encode(buf.getvalue()).decode("ascii")
        else:
            self.choices.append(record)
        return choice


class FakeVLLM(FakeEngine):
    """``FakeEngine`` behind vLLM's HTTP API (server mode)."""

    def __init__(self, model: Any, *, advertise_routing: bool | None = True, **kw: Any):
        super().__init__(model, **kw)
        self.advertise_routing = advertise_routing
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FakeVLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()

    def completions(self, body: dict) -> dict:
        with self.lock:
            self.requests.append(body)
            prompts = body["prompt"]
            prompts = [prompts] if prompts and isinstance(prompts[0], int) else prompts
            choices = []
            for prompt in prompts:
                for _ in range(int(body.get("n", 1))):
                    choices.append({"index": len(choices), **self._sample(prompt, body)})
        return {"id": "cmpl-fake", "object": "text_completion", "model": self.name, "choices": choices}

    def server_info(self) -> dict:
        model_config = {"logprobs_mode": "processed_logprobs"}
        if self.advertise_routing is not None:
            model_config["enable_return_routed_experts"] = self.advertise_routing
        return {"vllm_config": {"model_config": model_config, "weight_transfer_config": {"backend": "nccl"}}}

    # ------------------------------------------------------------ HTTP

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, obj: Any, status: int = 200) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = urlparse(self.path).path
                if path == "/health":
                    self._send({})
                elif path == "/v1/models":
                    self._send({"object": "list", "data": [{"id": fake.name, "object": "model"}]})
                elif path == "/server_info":
                    self._send(fake.server_info())
                elif path == "/get_world_size":
                    self._send({"world_size": 1})
                else:
                    self._send({"error": f"no route {path}"}, 404)

            def do_POST(self) -> None:
                path = urlparse(self.path).path
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if path == "/v1/completions":
                    self._send(fake.completions(body))
                elif path in ("/reset_prefix_cache", "/init_weight_transfer_engine", "/start_weight_update",
                              "/update_weights", "/finish_weight_update"):
                    self._send({"success": True})
                else:
                    self._send({"error": f"no route {path}"}, 404)

        return Handler


# ---------------------------------------------------------------- colocate mode: a stand-in ``vllm`` package


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    routed_experts: np.ndarray | None = None  # [seq_len, layer_num, topk], vLLM >= 0.21
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class SamplingParams:
    """The fields TRL sets, with vLLM's defaults."""

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16
    logprobs: int | None = None
    logit_bias: dict | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    structured_outputs: Any = None
    extra: dict = field(default_factory=dict)


class StructuredOutputsParams:
    def __init__(self, **kw: Any):
        self.__dict__.update(kw)


def fake_vllm_module(*, routing_flag: bool = True, returns_routing: bool = True, seed: int = 0) -> types.ModuleType:
    """A ``vllm`` module whose ``LLM`` loads the checkpoint with transformers and samples with ``FakeEngine``.

    ``routing_flag=False`` is a vLLM before 0.21 (``enable_return_routed_experts`` is an unexpected keyword);
    ``returns_routing=False`` accepts the flag but fills no ``routed_experts``. Every engine built is appended
    to the module's ``engines``.
    """
    module = types.ModuleType("vllm")
    module.engines = []

    class LLM:
        def __init__(self, model: str, *, enable_return_routed_experts: bool = False, **kwargs: Any):
            from transformers import AutoModelForCausalLM

            self.kwargs = {**kwargs, "enable_return_routed_experts": enable_return_routed_experts}
            self.engine = FakeEngine(AutoModelForCausalLM.from_pretrained(model),
                                     routed_experts=enable_return_routed_experts and returns_routing,
                                     routed_format="array", seed=seed)
            self.generate_calls: list[SamplingParams] = []
            runner = types.SimpleNamespace(model=types.SimpleNamespace(load_weights=self.engine.load_weights))
            self.llm_engine = types.SimpleNamespace(
                model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)),
                model_config=types.SimpleNamespace(max_model_len=kwargs.get("max_model_len") or 4096))
            module.engines.append(self)

        def generate(self, prompts: list[dict], sampling_params: SamplingParams | None = None,
                     *, use_tqdm: bool = True) -> list[RequestOutput]:
            sp = sampling_params or SamplingParams()
            self.generate_calls.append(sp)
            body = {k: getattr(sp, k) for k in ("temperature", "top_k", "top_p", "min_p", "max_tokens")}
            results = []
            for i, prompt in enumerate(prompts):
                ids = list(prompt["prompt_token_ids"])
                outs = []
                for j in range(sp.n):
                    c = self.engine._sample(ids, body)
                    lps = c["logprobs"]["token_logprobs"]
                    outs.append(CompletionOutput(
                        index=j, text="", token_ids=c["token_ids"], cumulative_logprob=float(sum(lps)),
                        logprobs=[{t: Logprob(lp, 1)} for t, lp in zip(c["token_ids"], lps)],
                        routed_experts=c["routed_experts"], finish_reason=c["finish_reason"]))
                results.append(RequestOutput(str(i), None, ids, None, outs))
            return results

        def reset_prefix_cache(self) -> bool:
            return True

        def sleep(self, level: int = 1) -> None:
            pass

        def wake_up(self, tags: list[str] | None = None) -> None:
            pass

    if not routing_flag:
        base = LLM

        class LLM(base):  # noqa: F811
            def __init__(self, model: str, **kwargs: Any):
                if "enable_return_routed_experts" in kwargs:
                    raise TypeError("EngineArgs.__init__() got an unexpected keyword argument "
                                    "'enable_return_routed_experts'")
                super().__init__(model, **kwargs)

    module.LLM, module.SamplingParams, module.RequestOutput = LLM, SamplingParams, RequestOutput
    module.CompletionOutput, module.Logprob = CompletionOutput, Logprob
    module.sampling_params = types.ModuleType("vllm.sampling_params")
    module.sampling_params.SamplingParams = SamplingParams
    module.sampling_params.StructuredOutputsParams = StructuredOutputsParams
    return module


# ---------------------------------------------------------------- what both vLLM test modules train on

SMALL = dict(use_cpu=True, bf16=False, report_to="none", save_strategy="no", per_device_train_batch_size=4,
             num_generations=4, steps_per_generation=1, max_completion_length=12, mask_truncated_completions=False,
             logging_steps=1)
"""GRPOConfig settings for a CPU step of 4 rollouts of up to 12 tokens."""
ROWS = [{"prompt": [{"role": "user", "content": "keys and values"}]}] * 4


def tiny_tokenizer():
    """A Qwen3-templated BPE tokenizer trained offline on a one-line corpus."""
    from envgen.rl.templates import install_template
    from envgen.rl.tiny import train_tokenizer

    return install_template(train_tokenizer(
        ["keys and values, tools and answers, a small corpus for a small model " * 8], "qwen3", vocab_size=200), "qwen3")


def save_tiny_moe(dest, tok):
    """A random-init tiny Qwen3-MoE policy (and its tokenizer) saved at ``dest``; returns ``dest``."""
    from envgen.rl.tiny import tiny_model

    tiny_model(tok, "qwen3_moe", seed=1, hidden_size=32, layers=2).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest
