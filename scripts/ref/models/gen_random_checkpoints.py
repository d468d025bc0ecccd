#!/usr/bin/env python3
"""Writes tiny random-weight Hugging Face checkpoints used as family fixtures.

Each checkpoint lands in crates/poot-models/tests/fixtures/random/<name>/ as
config.json + model.safetensors (written by transformers' save_pretrained).

Weights are re-initialised deterministically (seeded torch.Generator, float32) so that
nothing is "trivially" all ones / all zeros:
  * linear weights            ~ N(0, 1/sqrt(fan_in))      (keeps activations O(1)); the
                                residual-writing o_proj/down_proj get a gain (see TUNING)
  * token embeddings          ~ N(0, embed_std)  (see TUNING; 0.5 by default)
  * untied lm_head            ~ N(0, 0.25)
  * RMSNorm/LayerNorm weights ~ N(1, 0.1)   (Gemma3 stores w with scale (1 + w): N(0, 0.1),
                                and its post_attention/post_feedforward norms N(1, 0.1), i.e.
                                an effective scale near 2)
  * biases                    ~ N(0, 0.1) for q/k/v projections, N(0, 0.05) elsewhere
  * BERT position / token-type embeddings ~ N(0, 0.5)

config.json is written in transformers' own (v5) format, which spells RoPE as
"rope_parameters". For readers of older Hugging Face configs the script ALSO writes the
equivalent legacy keys (rope_theta, rope_scaling, rope_local_base_freq,
sliding_window_pattern, torch_dtype); both spellings describe the same model and the
script checks that transformers re-reads the file to the same rope parameters.

qwen2_yarn is a float32 Qwen2 with MQA (one KV head) and YaRN rope scaling (factor 4 over
original_max_position_embeddings 32, max_position_embeddings 128).

Usage: PY=$(scripts/pyenv.sh); $PY scripts/ref/models/gen_random_checkpoints.py [NAME ...]
(with names, only those fixtures are rewritten; seeds do not depend on the selection)
"""

import json
import math
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GraniteConfig,
    GraniteForCausalLM,
    GraniteMoeConfig,
    GraniteMoeForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    OlmoeConfig,
    OlmoeForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

ROOT = pathlib.Path(__file__).resolve().parents[3]
OUT = ROOT / "crates" / "poot-models" / "tests" / "fixtures" / "random"

torch.set_num_threads(2)
torch.set_default_dtype(torch.float32)


def common_decoder(**kw):
    base = dict(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    base.update(kw)
    return base


def llama_config():
    return LlamaConfig(
        **common_decoder(
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    )


def llama3_scaled_config():
    return LlamaConfig(
        **common_decoder(
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    )


def qwen2_config():
    return Qwen2Config(
        **common_decoder(
            rms_norm_eps=1e-6,
            hidden_act="silu",
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    )


def qwen2_yarn_config():
    return Qwen2Config(
        **common_decoder(
            num_key_value_heads=1,
            rms_norm_eps=1e-6,
            hidden_act="silu",
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        )
    )


def qwen3_config():
    return Qwen3Config(
        **common_decoder(
            head_dim=32,
            rms_norm_eps=1e-6,
            hidden_act="silu",
            attention_bias=False,
            tie_word_embeddings=False,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    )


def mixtral_config():
    return MixtralConfig(
        **common_decoder(
            intermediate_size=96,
            num_local_experts=4,
            num_experts_per_tok=2,
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    )


def qwen3moe_config():
    return Qwen3MoeConfig(
        **common_decoder(
            head_dim=32,
            intermediate_size=96,
            moe_intermediate_size=48,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            rms_norm_eps=1e-6,
            hidden_act="silu",
            attention_bias=False,
            tie_word_embeddings=False,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    )


def olmoe_config():
    return OlmoeConfig(
        **common_decoder(
            intermediate_size=32,
            num_experts=8,
            num_experts_per_tok=2,
            norm_topk_prob=False,
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=False,
            clip_qkv=None,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    )


# Granite's four multipliers, each far from 1 (and the attention scale from 1/sqrt(head_dim)).
GRANITE_MULTIPLIERS = dict(
    embedding_multiplier=4.0,
    attention_multiplier=0.1,
    residual_multiplier=0.5,
    logits_scaling=3.0,
)


def granite_config():
    return GraniteConfig(
        **common_decoder(
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **GRANITE_MULTIPLIERS,
        )
    )


def granitemoe_config():
    return GraniteMoeConfig(
        **common_decoder(
            intermediate_size=48,
            num_local_experts=4,
            num_experts_per_tok=2,
            rms_norm_eps=1e-5,
            hidden_act="silu",
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            **GRANITE_MULTIPLIERS,
        )
    )


def gemma3_config():
    return Gemma3TextConfig(
        hidden_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=96,
        vocab_size=256,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=24,
        sliding_window=8,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
        },
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        tie_word_embeddings=True,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )


def bert_config(**kw):
    return BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=256,
        max_position_embeddings=64,
        type_vocab_size=2,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        pad_token_id=0,
        **kw,
    )


# name -> (model class, config builder, save dtype, legacy keys to add to config.json)
MODELS = {
    "llama": (
        LlamaForCausalLM,
        llama_config,
        torch.float32,
        {"rope_theta": 10000.0, "rope_scaling": None},
    ),
    "llama3_scaled": (
        LlamaForCausalLM,
        llama3_scaled_config,
        torch.float32,
        {
            "rope_theta": 10000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        },
    ),
    "qwen2": (
        Qwen2ForCausalLM,
        qwen2_config,
        torch.bfloat16,
        {"rope_theta": 1000000.0, "rope_scaling": None},
    ),
    "qwen3": (
        Qwen3ForCausalLM,
        qwen3_config,
        torch.float32,
        {"rope_theta": 1000000.0, "rope_scaling": None},
    ),
    "gemma3": (
        Gemma3ForCausalLM,
        gemma3_config,
        torch.float32,
        {
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": None,
            "sliding_window_pattern": 6,
        },
    ),
    "bert": (BertModel, bert_config, torch.float32, {}),
    "bert_cross_encoder": (
        BertForSequenceClassification,
        lambda: bert_config(num_labels=1, problem_type="regression"),
        torch.float32,
        {},
    ),
    # Appended last so the earlier fixtures keep their seeds (seed = 1000 + table index).
    "qwen2_yarn": (
        Qwen2ForCausalLM,
        qwen2_yarn_config,
        torch.float32,
        {
            "rope_theta": 10000.0,
            "rope_scaling": {
                "rope_type": "yarn",
                "factor": 4.0,
                "original_max_position_embeddings": 32,
            },
        },
    ),
    "mixtral": (
        MixtralForCausalLM,
        mixtral_config,
        torch.float32,
        {"rope_theta": 1000000.0, "rope_scaling": None},
    ),
    # bfloat16, so per-expert tensors are stacked as stored bf16.
    "qwen3moe": (
        Qwen3MoeForCausalLM,
        qwen3moe_config,
        torch.bfloat16,
        {"rope_theta": 1000000.0, "rope_scaling": None, "num_experts": 4},
    ),
    # Eight experts, top-2, not renormalized; q/k norms over the whole projections.
    "olmoe": (
        OlmoeForCausalLM,
        olmoe_config,
        torch.float32,
        {"rope_theta": 10000.0, "rope_scaling": None},
    ),
    "granite": (
        GraniteForCausalLM,
        granite_config,
        torch.float32,
        {"rope_theta": 10000.0, "rope_scaling": None},
    ),
    # Experts stored stacked, gate and up fused: block_sparse_moe.input_linear [E, 2*inter, hidden].
    "granitemoe": (
        GraniteMoeForCausalLM,
        granitemoe_config,
        torch.float32,
        {"rope_theta": 10000.0, "rope_scaling": None},
    ),
}


# With tied embeddings the current token's own embedding dominates the logits of a random
# model, so greedy decoding just repeats the last token. These per-model settings (found by
# trying a few) make the residual updates large enough that greedy decoding moves on.
TUNING = {
    "llama3_scaled": {"embed_std": 0.25, "out_gain": 2.0},
    "qwen2": {"embed_std": 0.15, "out_gain": 2.0},
    "qwen2_yarn": {"embed_std": 0.15, "out_gain": 2.0},
    "gemma3": {"embed_std": 0.15, "post_norm_mean": 1.0},
}


def is_norm_weight(name, p):
    return p.dim() == 1 and name.endswith(".weight") and ("norm" in name.lower())


def interesting_init(model, seed, gemma_norm, embed_std=0.5, out_gain=1.0, post_norm_mean=0.0):
    g = torch.Generator().manual_seed(seed)

    def normal(p, mean, std):
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std + mean)

    for name, p in model.named_parameters():  # deduplicated: tied lm_head is skipped
        if is_norm_weight(name, p):
            if gemma_norm:
                normal(p, post_norm_mean if ".post_" in name else 0.0, 0.1)
            else:
                normal(p, 1.0, 0.1)
        elif name.endswith(".bias"):
            qkv = any(k in name for k in ("q_proj", "k_proj", "v_proj", ".query.", ".key.", ".value."))
            normal(p, 0.0, 0.1 if qkv else 0.05)
        elif "embed" in name or "embeddings" in name:
            if "word_embeddings" in name or "embed_tokens" in name:
                normal(p, 0.0, embed_std)
            else:  # BERT position / token-type embeddings
                normal(p, 0.0, 0.5)
        elif name.startswith("lm_head"):
            normal(p, 0.0, 0.25)
        elif p.dim() == 2:
            gain = out_gain if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0
            normal(p, 0.0, gain / math.sqrt(p.shape[1]))
        elif p.dim() == 3:  # stacked experts [experts, out, in] (transformers 5's MoE layout)
            gain = out_gain if name.endswith("down_proj") else 1.0
            normal(p, 0.0, gain / math.sqrt(p.shape[2]))
        else:
            raise SystemExit(f"no init rule for {name} {tuple(p.shape)}")


def main():
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    only = sys.argv[1:]
    unknown = set(only) - set(MODELS)
    if unknown:
        raise SystemExit(f"unknown fixture(s): {sorted(unknown)}")
    for seed, (name, (cls, make_config, dtype, legacy)) in enumerate(MODELS.items()):
        if only and name not in only:
            continue
        torch.manual_seed(1000 + seed)
        config = make_config()
        model = cls._from_config(config, attn_implementation="eager", dtype=torch.float32)
        model.eval()
        interesting_init(model, 1000 + seed, gemma_norm=(name == "gemma3"), **TUNING.get(name, {}))
        if dtype != torch.float32:
            model = model.to(dtype)
        out = OUT / name
        out.mkdir(parents=True, exist_ok=True)
        for f in out.glob("*"):
            if f.name != "reference.json":
                f.unlink()
        model.save_pretrained(out)
        (out / "generation_config.json").unlink(missing_ok=True)

        # Add legacy spellings next to transformers' own keys.
        cfg_path = out / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg.update(legacy)
        cfg["torch_dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16"}[dtype]
        cfg.pop("_name_or_path", None)
        cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")

        # Round trip: transformers reads the augmented config to the same rope parameters.
        again = AutoConfig.from_pretrained(out)
        if getattr(config, "rope_parameters", None) is not None:
            assert again.rope_parameters == config.rope_parameters, (
                name,
                again.rope_parameters,
                config.rope_parameters,
            )
        files = sorted(f.name for f in out.iterdir())
        n = sum(p.numel() for p in model.parameters())
        print(f"{name:20s} {cls.__name__:32s} params={n:7d} dtype={dtype} files={files}")


if __name__ == "__main__":
    sys.exit(main())
