"""Tiny language models built offline for tests: a BPE tokenizer trained with `tokenizers` and a
random-init transformers model (Qwen3, or Qwen3-MoE), saved as a checkpoint directory."""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{%- endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", \"arguments\": "
    "{{ c.function.arguments }}}</tool_call>{%- endfor %}<|im_end|>\n{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
CORPUS = [
    "Store value under key, then submit it.", "<tool_call>{\"name\": \"put\", \"arguments\": {\"key\": \"k0\"}}</tool_call>",
    "The answer is submitted. I have stored the value.", "search hotels restaurants attractions transport city price",
    "{\"role\": \"user\", \"content\": \"hello\"} tools functions parameters type object properties required",
] * 20


def build_tokenizer(dest: Path, vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHATML
    fast.save_pretrained(dest)
    return fast


def build_checkpoint(dest: Path, *, moe: bool = False, seed: int = 0) -> Path:
    """Save a tiny random-init Qwen3 (or Qwen3-MoE) with its tokenizer to `dest`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

    tok = build_tokenizer(dest)
    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, tie_word_embeddings=True)
    cfg = (Qwen3MoeConfig(**common, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                          decoder_sparse_step=1) if moe else Qwen3Config(**common))
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(dest)
    return dest
