#!/usr/bin/env python3
"""Writes the random MoE fixtures as llama.cpp would convert them, with the gguf package.

Reads crates/poot-models/tests/fixtures/random/mixtral/ (gen_random_checkpoints.py) and writes
crates/poot-models/tests/fixtures/random/mixtral_gguf/:
  model.gguf        arch `llama` with `llama.expert_count`, every tensor F32: Q and K rows
                    permuted as llama.cpp's converter does (rotary pairs interleaved), each
                    projection's experts stacked into one [experts, out, in] tensor
                    (blk.N.ffn_{gate,up,down}_exps.weight), the router as blk.N.ffn_gate_inp.
  model-q8_0.gguf   the same with the three expert stacks stored as Q8_0 blocks.
  model-q8_0-dequant.gguf
                    the same as model.gguf with the expert stacks holding the Q8_0 blocks'
                    values (gguf-py's dequantize), so a reader of the packed stacks can be
                    compared with a reader of the same values in f32.
And crates/poot-models/tests/fixtures/random/qwen3moe_gguf/model.gguf: the random Qwen3-MoE as
arch `qwen3moe`, every tensor BF16 as the checkpoint stores it (no Q/K permutation: Qwen rotates
halves), the same expert stacks and router names.
The tokenizer is a stand-in (byte-level BPE, pieces t0..t255, one merge): the tests feed ids.

Usage: PY=$(scripts/pyenv.sh); $PY scripts/ref/models/gen_moe_gguf.py
"""

import json
import pathlib

import numpy as np
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize, quantize
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_torch

ROOT = pathlib.Path(__file__).resolve().parents[3]
RANDOM = ROOT / "crates" / "poot-models" / "tests" / "fixtures" / "random"
SRC = RANDOM / "mixtral"
OUT = RANDOM / "mixtral_gguf"


def permute(w, heads):
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows (halves -> interleaved pairs)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tensors(cfg, hf):
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    experts = cfg["num_local_experts"]
    out = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        moe = p + "block_sparse_moe."
        out[f"blk.{l}.attn_norm.weight"] = hf[p + "input_layernorm.weight"]
        out[f"blk.{l}.ffn_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
        out[f"blk.{l}.attn_q.weight"] = permute(hf[p + "self_attn.q_proj.weight"], heads)
        out[f"blk.{l}.attn_k.weight"] = permute(hf[p + "self_attn.k_proj.weight"], kv_heads)
        out[f"blk.{l}.attn_v.weight"] = hf[p + "self_attn.v_proj.weight"]
        out[f"blk.{l}.attn_output.weight"] = hf[p + "self_attn.o_proj.weight"]
        out[f"blk.{l}.ffn_gate_inp.weight"] = hf[moe + "gate.weight"]
        for name, w in [("ffn_gate_exps", "w1"), ("ffn_up_exps", "w3"), ("ffn_down_exps", "w2")]:
            out[f"blk.{l}.{name}.weight"] = np.stack(
                [hf[f"{moe}experts.{e}.{w}.weight"] for e in range(experts)]
            )
    return out


def write(path, cfg, named, q8_stacks):
    w = GGUFWriter(path, arch="llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    # gguf-py drops an empty list, and a gpt2 vocabulary needs the key: one merge.
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    for name, data in named.items():
        data = np.ascontiguousarray(data, dtype=np.float32)
        if q8_stacks and "_exps." in name:
            w.add_tensor(name, quantize(data, GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def qwen3moe():
    src = RANDOM / "qwen3moe"
    cfg = json.loads((src / "config.json").read_text())
    hf = {n: t.view(torch.int16).numpy().view(np.uint16) for n, t in load_torch(src / "model.safetensors").items()}
    experts = cfg["num_experts"]
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for gguf_name, hf_name in [
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("ffn_gate_inp", "mlp.gate"),
        ]:
            named[f"blk.{l}.{gguf_name}.weight"] = hf[f"{p}{hf_name}.weight"]
        for name, w in [("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"), ("ffn_down_exps", "down_proj")]:
            named[f"blk.{l}.{name}.weight"] = np.stack([hf[f"{p}mlp.experts.{e}.{w}.weight"] for e in range(experts)])
    w = GGUFWriter(RANDOM / "qwen3moe_gguf" / "model.gguf", arch="qwen3moe")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(experts)
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    # llama.cpp renormalizes Qwen3-MoE's top-k unless told otherwise; this checkpoint does not.
    w.add_bool("qwen3moe.expert_weights_norm", cfg["norm_topk_prob"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])
    for name, data in named.items():
        w.add_tensor(name, np.ascontiguousarray(data), raw_dtype=GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def header(w, cfg):
    """The keys every fixture GGUF here shares, and the stand-in tokenizer."""
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_token_merges(["t 0"])
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])


def attention_tensors(cfg, hf, l, permute_qk):
    p = f"model.layers.{l}."
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    q, k = hf[p + "self_attn.q_proj.weight"], hf[p + "self_attn.k_proj.weight"]
    if permute_qk:
        q, k = permute(q, heads), permute(k, kv_heads)
    return {
        f"blk.{l}.attn_norm.weight": hf[p + "input_layernorm.weight"],
        f"blk.{l}.ffn_norm.weight": hf[p + "post_attention_layernorm.weight"],
        f"blk.{l}.attn_q.weight": q,
        f"blk.{l}.attn_k.weight": k,
        f"blk.{l}.attn_v.weight": hf[p + "self_attn.v_proj.weight"],
        f"blk.{l}.attn_output.weight": hf[p + "self_attn.o_proj.weight"],
    }


def write_f32(path, arch, cfg, named, keys):
    w = GGUFWriter(path, arch=arch)
    header(w, cfg)
    keys(w)
    for name, data in named.items():
        w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def globals_of(hf):
    return {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }


def olmoe():
    """OLMoE as llama.cpp's converter writes it: arch `olmoe`, no Q/K permutation (it rotates
    halves), q/k norms over the whole projections, per-expert tensors stacked."""
    src = RANDOM / "olmoe"
    cfg = json.loads((src / "config.json").read_text())
    hf = load_file(src / "model.safetensors")
    named = globals_of(hf)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        named.update(attention_tensors(cfg, hf, l, permute_qk=False))
        named[f"blk.{l}.attn_q_norm.weight"] = hf[p + "self_attn.q_norm.weight"]
        named[f"blk.{l}.attn_k_norm.weight"] = hf[p + "self_attn.k_norm.weight"]
        named[f"blk.{l}.ffn_gate_inp.weight"] = hf[p + "mlp.gate.weight"]
        for name, w in [("ffn_gate_exps", "gate_proj"), ("ffn_up_exps", "up_proj"), ("ffn_down_exps", "down_proj")]:
            named[f"blk.{l}.{name}.weight"] = np.stack(
                [hf[f"{p}mlp.experts.{e}.{w}.weight"] for e in range(cfg["num_experts"])]
            )

    def keys(w):
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])

    (RANDOM / "olmoe_gguf").mkdir(exist_ok=True)
    write_f32(RANDOM / "olmoe_gguf" / "model.gguf", "olmoe", cfg, named, keys)


def granite_keys(cfg):
    def keys(w):
        w.add_rope_dimension_count(cfg["hidden_size"] // cfg["num_attention_heads"])
        w.add_embedding_scale(cfg["embedding_multiplier"])
        w.add_residual_scale(cfg["residual_multiplier"])
        w.add_attention_scale(cfg["attention_multiplier"])
        w.add_logit_scale(cfg["logits_scaling"])
        if "num_local_experts" in cfg:
            w.add_expert_count(cfg["num_local_experts"])
            w.add_expert_used_count(cfg["num_experts_per_tok"])

    return keys


def granite(name):
    """Granite and Granite-MoE as llama.cpp's converter writes them: Llama's Q/K permutation,
    the four multipliers as `{arch}.embedding_scale`, `.residual_scale`, `.attention.scale`,
    `.logit_scale`; Granite-MoE's fused `input_linear` split into its gate (first half) and up
    (second half) stacks."""
    src = RANDOM / name
    cfg = json.loads((src / "config.json").read_text())
    hf = load_file(src / "model.safetensors")
    named = globals_of(hf)
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        named.update(attention_tensors(cfg, hf, l, permute_qk=True))
        if name == "granite":
            for gguf_name, hf_name in [("ffn_gate", "gate_proj"), ("ffn_up", "up_proj"), ("ffn_down", "down_proj")]:
                named[f"blk.{l}.{gguf_name}.weight"] = hf[f"{p}mlp.{hf_name}.weight"]
        else:
            moe = p + "block_sparse_moe."
            fused = hf[moe + "input_linear.weight"]
            inter = fused.shape[1] // 2
            named[f"blk.{l}.ffn_gate_exps.weight"] = fused[:, :inter]
            named[f"blk.{l}.ffn_up_exps.weight"] = fused[:, inter:]
            named[f"blk.{l}.ffn_down_exps.weight"] = hf[moe + "output_linear.weight"]
            named[f"blk.{l}.ffn_gate_inp.weight"] = hf[moe + "router.layer.weight"]
    (RANDOM / f"{name}_gguf").mkdir(exist_ok=True)
    write_f32(RANDOM / f"{name}_gguf" / "model.gguf", name, cfg, named, granite_keys(cfg))


def main():
    cfg = json.loads((SRC / "config.json").read_text())
    named = tensors(cfg, load_file(SRC / "model.safetensors"))
    OUT.mkdir(exist_ok=True)
    write(OUT / "model.gguf", cfg, named, q8_stacks=False)
    write(OUT / "model-q8_0.gguf", cfg, named, q8_stacks=True)
    dequant = {
        n: dequantize(quantize(d, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0) if "_exps." in n else d
        for n, d in named.items()
    }
    write(OUT / "model-q8_0-dequant.gguf", cfg, dequant, q8_stacks=False)
    (RANDOM / "qwen3moe_gguf").mkdir(exist_ok=True)
    qwen3moe()
    olmoe()
    granite("granite")
    granite("granitemoe")
    written = [*OUT.iterdir()]
    for d in ["qwen3moe_gguf", "olmoe_gguf", "granite_gguf", "granitemoe_gguf"]:
        written += (RANDOM / d).iterdir()
    for f in sorted(written):
        print(f"{f.parent.name}/{f.name}: {f.stat().st_size} bytes")


if __name__ == "__main__":
    main()
