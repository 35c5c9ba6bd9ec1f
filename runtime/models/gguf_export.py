"""A transformers Llama directory -> a GGUF file that llama.cpp runs (the llamacpp backend's target).

Written with the `gguf` package (llama.cpp's own writer, already a dependency for reading the default
target). Weights stay fp32 (or f16 with ``dtype="f16"``), so the file holds the same numbers as the
directory. Two layout rules carry the meaning:

- llama.cpp's Llama applies RoPE to adjacent pairs (x[2i], x[2i+1]); transformers' to halves
  (x[i], x[i + d/2]). The q and k projections are permuted row-wise so that both compute the same
  attention: per head, row i of the first half goes to 2i and row i of the second half to 2i + 1.
- Byte-level BPE vocabularies become `tokenizer.ggml.model = "gpt2"` with their tokens in id order and
  their merges; llama.cpp needs them to load, specsched itself tokenizes with transformers.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from .cache import staging
from .errors import CorruptArchive, UnknownModel

TOKEN_NORMAL, TOKEN_CONTROL = 1, 3  # gguf.TokenType values


def rope_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a q/k projection from halves-RoPE order to pairs-RoPE order (per head)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def export_gguf(model_dir: Path, out: Path, *, dtype: str = "f32") -> Path:
    """Write ``model_dir`` (a LlamaForCausalLM with a byte-level BPE tokenizer) to ``out``; returns ``out``."""
    model_dir, out = Path(model_dir), Path(out)
    cfg = json.loads((model_dir / "config.json").read_text()) if (model_dir / "config.json").is_file() else {}
    if cfg.get("model_type") != "llama":
        raise UnknownModel(f"{model_dir}: only Llama models convert to GGUF here (model_type "
                           f"{cfg.get('model_type')!r})")
    if dtype not in ("f32", "f16"):
        raise ValueError(f"GGUF dtype must be f32 or f16, not {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    c = model.config
    heads, kv_heads = c.num_attention_heads, c.num_key_value_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
    rope = (getattr(c, "rope_parameters", None) or {}).get("rope_theta") or getattr(c, "rope_theta", 10000.0)

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = staging(out)
    w = gguf.GGUFWriter(str(partial), "llama")
    w.add_name(model_dir.name)
    w.add_context_length(int(c.max_position_embeddings))
    w.add_embedding_length(int(c.hidden_size))
    w.add_block_count(int(c.num_hidden_layers))
    w.add_feed_forward_length(int(c.intermediate_size))
    w.add_head_count(int(heads))
    w.add_head_count_kv(int(kv_heads))
    w.add_key_length(int(head_dim))
    w.add_value_length(int(head_dim))
    w.add_rope_dimension_count(int(head_dim))
    w.add_rope_freq_base(float(rope))
    w.add_layer_norm_rms_eps(float(c.rms_norm_eps))
    w.add_vocab_size(int(c.vocab_size))
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    _add_tokenizer(w, AutoTokenizer.from_pretrained(model_dir), model_dir, int(c.vocab_size), c)

    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    for name, array in _tensors(state, int(c.num_hidden_layers), heads, kv_heads):
        keep32 = array.ndim == 1 or dtype == "f32"  # norms stay f32, as llama.cpp's converter does
        w.add_tensor(name, array.astype(np.float32 if keep32 else np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(partial, out)
    return out


def _tensors(state: dict[str, np.ndarray], layers: int, heads: int, kv_heads: int):
    yield "token_embd.weight", state["model.embed_tokens.weight"]
    for i in range(layers):
        p = f"model.layers.{i}."
        yield f"blk.{i}.attn_norm.weight", state[p + "input_layernorm.weight"]
        yield f"blk.{i}.attn_q.weight", rope_permute(state[p + "self_attn.q_proj.weight"], heads)
        yield f"blk.{i}.attn_k.weight", rope_permute(state[p + "self_attn.k_proj.weight"], kv_heads)
        yield f"blk.{i}.attn_v.weight", state[p + "self_attn.v_proj.weight"]
        yield f"blk.{i}.attn_output.weight", state[p + "self_attn.o_proj.weight"]
        yield f"blk.{i}.ffn_norm.weight", state[p + "post_attention_layernorm.weight"]
        yield f"blk.{i}.ffn_gate.weight", state[p + "mlp.gate_proj.weight"]
        yield f"blk.{i}.ffn_up.weight", state[p + "mlp.up_proj.weight"]
        yield f"blk.{i}.ffn_down.weight", state[p + "mlp.down_proj.weight"]
    yield "output_norm.weight", state["model.norm.weight"]
    head = state.get("lm_head.weight")
    if head is not None and not np.array_equal(head, state["model.embed_tokens.weight"]):
        yield "output.weight", head  # absent = tied: llama.cpp reuses token_embd


def _add_tokenizer(w, tok, model_dir: Path, vocab_size: int, c) -> None:
    spec = json.loads((model_dir / "tokenizer.json").read_text()) if (model_dir / "tokenizer.json").is_file() else {}
    if spec.get("model", {}).get("type") != "BPE":
        raise UnknownModel(f"{model_dir}: only byte-level BPE tokenizers convert to GGUF here")
    by_id = {i: t for t, i in tok.get_vocab().items()}
    special = set(tok.all_special_ids)
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    types = [TOKEN_CONTROL if i in special or i not in by_id else TOKEN_NORMAL for i in range(vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"].get("merges", [])]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    eos = c.eos_token_id[0] if isinstance(c.eos_token_id, list) else c.eos_token_id
    w.add_bos_token_id(int(c.bos_token_id if c.bos_token_id is not None else eos))
    w.add_eos_token_id(int(eos))
    w.add_add_bos_token(False)
    if getattr(tok, "chat_template", None):
        w.add_chat_template(tok.chat_template)


def dequantise_gguf(path: Path, out: Path) -> None:
    """Dequantise a GGUF Llama into fp32 safetensors plus its tokenizer (chat template included).

    A GGUF-loaded model carries a quantization_config and refuses save_pretrained, so the config is rebuilt
    without it and the dequantised state dict copied into a plain LlamaForCausalLM.
    """
    loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    cfg = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "transformers_version", "architectures", "dtype"):
        cfg.pop(key, None)
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # lm_head is tied to the embeddings in SmolLM2, so it may be absent from the GGUF state dict.
    if unexpected or any(k != "lm_head.weight" for k in missing):
        raise CorruptArchive(f"{path.name}: unexpected weights {unexpected}, missing {missing}")
    if missing:
        model.tie_weights()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    tokenizer.save_pretrained(out)
