#!/usr/bin/env python3
"""Writes the dense-decoder fixtures of issue #24: tiny random-weight checkpoints, their
transformers references and GGUF conversions, for gemma2, olmo2, qwen2_moe, smollm3, phi3, gpt_oss, mpt and bloom (more families are
appended here).

For each NAME, under crates/poot-models/tests/fixtures/random/:
  NAME/{config.json, model.safetensors}  transformers save_pretrained of a seeded random model
                                          (gen_random_checkpoints.py's initialisation rules)
  NAME/reference.json                     gen_random_references.py's decoder shape: an 11-token
                                          prompt and a 20-token "long" prompt (longer than any
                                          sliding window), every prefill position's logits, 4
                                          cached greedy decode steps; float32, eager attention
  NAME_gguf/model.gguf                    the checkpoint as llama.cpp's converter writes it
                                          (gguf-py; F32 tensors, a stand-in tokenizer)
  gpt_oss_mxfp4/                          a gpt-oss saved as OpenAI released it: experts as
                                          MXFP4 `*_blocks` / `*_scales`, the rest bfloat16

Seeds are 5000 + the family's index in FAMILIES (checkpoint) and 6000 + index (prompts), so
appending a family leaves the others' files unchanged.

Usage: PY=$(scripts/pyenv.sh); $PY scripts/ref/models/gen_dense_fixtures.py [NAME ...]
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import gguf  # noqa: E402
import transformers  # noqa: E402
from gguf import GGUFWriter  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

import gen_moe_gguf  # noqa: E402
import gen_random_checkpoints as ckpt  # noqa: E402
import gen_random_references as refs  # noqa: E402

RANDOM = ckpt.OUT
LONG_PROMPT_LEN = 20


def gemma2_config():
    return transformers.Gemma2Config(
        hidden_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        intermediate_size=96,
        vocab_size=256,
        max_position_embeddings=128,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
        query_pre_attn_scalar=24,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"] * 2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        # Small caps, so that both tanh curves bend on this model's logits.
        attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0,
        tie_word_embeddings=True,
        bos_token_id=2,
        eos_token_id=1,
        pad_token_id=0,
    )


def stand_in_tokenizer(w, cfg):
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    w.add_token_merges(["t 0"])  # gguf-py drops an empty list; a gpt2 vocabulary needs one
    w.add_bos_token_id(cfg["bos_token_id"])
    w.add_eos_token_id(cfg["eos_token_id"])


def write_gguf(name, arch, cfg, named, meta):
    out = RANDOM / f"{name}_gguf"
    out.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(out / "model.gguf", arch=arch)
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    meta(w)
    stand_in_tokenizer(w, cfg)
    for n, data in named.items():
        w.add_tensor(n, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gemma2_gguf(cfg, hf):
    # llama.cpp's converter stores Gemma norm scales as w + 1 and leaves Q/K rows as they are.
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"] + 1,
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, h, plus in [
            ("attn_norm", "input_layernorm", 1),
            ("post_attention_norm", "post_attention_layernorm", 1),
            ("ffn_norm", "pre_feedforward_layernorm", 1),
            ("post_ffw_norm", "post_feedforward_layernorm", 1),
            ("attn_q", "self_attn.q_proj", 0),
            ("attn_k", "self_attn.k_proj", 0),
            ("attn_v", "self_attn.v_proj", 0),
            ("attn_output", "self_attn.o_proj", 0),
            ("ffn_gate", "mlp.gate_proj", 0),
            ("ffn_up", "mlp.up_proj", 0),
            ("ffn_down", "mlp.down_proj", 0),
        ]:
            named[f"blk.{l}.{g}.weight"] = hf[f"{p}{h}.weight"] + plus

    def meta(w):
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
        w.add_rope_freq_base(cfg["rope_theta"])
        w.add_sliding_window(cfg["sliding_window"])
        # llama.cpp would scale this model by head_dim^-1/2 (its converter drops
        # query_pre_attn_scalar); the standard key states the checkpoint's scale instead.
        w.add_attention_scale(cfg["query_pre_attn_scalar"] ** -0.5)
        w.add_attn_logit_softcapping(cfg["attn_logit_softcapping"])
        w.add_final_logit_softcapping(cfg["final_logit_softcapping"])

    write_gguf("gemma2", "gemma2", cfg, named, meta)


def changed_by(d, ids, want, **overrides):
    """The largest |logit change| at the last position when the config is changed so."""
    cfg = transformers.AutoConfig.from_pretrained(d)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    m = transformers.AutoModelForCausalLM.from_pretrained(
        d, config=cfg, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        got = m(input_ids=torch.tensor([ids])).logits[0, -1]
    return float((got - torch.tensor(want)).abs().max())


def gemma2_checks(d, long_case):
    """The fixture must exercise the window and both softcaps: each changes the logits."""
    ids, want = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    window = changed_by(d, ids, want, sliding_window=4096)
    attn = changed_by(d, ids, want, attn_logit_softcapping=None)
    final = changed_by(d, ids, want, final_logit_softcapping=None)
    assert min(window, attn, final) > 1e-2, (window, attn, final)
    return f"max |dlogit| without the window {window:.3f}, attn softcap {attn:.3f}, final softcap {final:.3f}"


def olmo2_config():
    return transformers.Olmo2Config(
        **ckpt.common_decoder(
            rms_norm_eps=1e-6,
            hidden_act="silu",
            attention_bias=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    )


def olmo2_gguf(cfg, hf):
    # llama.cpp's converter keeps OLMo 2's tensors as they are (it rotates halves, no permute).
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, h in [
            ("post_attention_norm", "post_attention_layernorm"),
            ("post_ffw_norm", "post_feedforward_layernorm"),
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("attn_q_norm", "self_attn.q_norm"),
            ("attn_k_norm", "self_attn.k_norm"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ]:
            named[f"blk.{l}.{g}.weight"] = hf[f"{p}{h}.weight"]

    def meta(w):
        w.add_rope_freq_base(cfg["rope_theta"])

    write_gguf("olmo2", "olmo2", cfg, named, meta)


def olmo2_checks(d, long_case):
    hf = load_file(d / "model.safetensors")
    q, k = hf["model.layers.0.self_attn.q_norm.weight"], hf["model.layers.0.self_attn.k_norm.weight"]
    assert q.shape == (64,) and k.shape == (32,), (q.shape, k.shape)
    assert "model.layers.0.input_layernorm.weight" not in hf
    return f"q_norm {q.shape}, k_norm {k.shape} (whole projections), no input norms"


def qwen2_moe_config():
    return transformers.Qwen2MoeConfig(
        **ckpt.common_decoder(
            rms_norm_eps=1e-6,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=48,
            shared_expert_intermediate_size=96,
            norm_topk_prob=True,
            qkv_bias=True,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    )


def qwen2_moe_gguf(cfg, hf):
    # llama.cpp's converter keeps Qwen2's rows as stored (halves rotated), stacks each
    # projection's experts and renames the shared expert `*_shexp`.
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, h in [
            ("attn_norm.weight", "input_layernorm.weight"),
            ("ffn_norm.weight", "post_attention_layernorm.weight"),
            ("attn_q.weight", "self_attn.q_proj.weight"),
            ("attn_k.weight", "self_attn.k_proj.weight"),
            ("attn_v.weight", "self_attn.v_proj.weight"),
            ("attn_q.bias", "self_attn.q_proj.bias"),
            ("attn_k.bias", "self_attn.k_proj.bias"),
            ("attn_v.bias", "self_attn.v_proj.bias"),
            ("attn_output.weight", "self_attn.o_proj.weight"),
            ("ffn_gate_inp.weight", "mlp.gate.weight"),
            ("ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"),
            ("ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"),
            ("ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"),
            ("ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"),
        ]:
            named[f"blk.{l}.{g}"] = hf[p + h]
        for g, h in [("gate", "gate_proj"), ("up", "up_proj"), ("down", "down_proj")]:
            named[f"blk.{l}.ffn_{g}_exps.weight"] = np.stack(
                [hf[f"{p}mlp.experts.{e}.{h}.weight"] for e in range(cfg["num_experts"])]
            )

    def meta(w):
        w.add_rope_freq_base(cfg["rope_theta"])
        w.add_expert_count(cfg["num_experts"])
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        w.add_expert_feed_forward_length(cfg["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(cfg["shared_expert_intermediate_size"])
        # llama.cpp's converter omits norm_topk_prob for this architecture (its graph never
        # renormalizes); stated here so the GGUF computes what the checkpoint does.
        w.add_expert_weights_norm(cfg["norm_topk_prob"])

    write_gguf("qwen2_moe", "qwen2moe", cfg, named, meta)


def qwen2_moe_checks(d, long_case):
    """No token's top-2 choice may be a near tie, and the shared expert must matter."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = long_case["prompt_ids"]
    margin, used = refs.router_margin(model, ids, model.config.num_experts_per_tok)
    assert margin > refs.MIN_ROUTER_MARGIN, margin
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.shared_expert.down_proj.weight.zero_()
        got = model(input_ids=torch.tensor([ids])).logits[0, -1]
    shared = float((got - torch.tensor(long_case["prefill_logits"][-1])).abs().max())
    assert shared > 1e-2, shared
    return (
        f"smallest top-2 router margin {margin:.2e}, experts used per layer {used}, "
        f"max |dlogit| without the shared expert {shared:.3f}"
    )


def smollm3_config():
    # Four layers: with the default interval of 4, layer 3 goes without rotary embeddings.
    return transformers.SmolLM3Config(
        **ckpt.common_decoder(
            num_hidden_layers=4,
            rms_norm_eps=1e-6,
            no_rope_layer_interval=4,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    )


def smollm3_gguf(cfg, hf):
    # llama.cpp's converter writes SmolLM3 as a Llama: Q and K rows permuted, no key for the
    # NoPE layers (its graph fixes the interval at 4).
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, h in [
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ]:
            named[f"blk.{l}.{g}.weight"] = hf[f"{p}{h}.weight"]
        named[f"blk.{l}.attn_q.weight"] = gen_moe_gguf.permute(hf[p + "self_attn.q_proj.weight"], heads)
        named[f"blk.{l}.attn_k.weight"] = gen_moe_gguf.permute(hf[p + "self_attn.k_proj.weight"], kv_heads)

    def meta(w):
        w.add_rope_freq_base(cfg["rope_theta"])
        w.add_rope_dimension_count(cfg["hidden_size"] // heads)

    write_gguf("smollm3", "smollm3", cfg, named, meta)


def smollm3_checks(d, long_case):
    """Layer 3 must go without rotary embeddings, and that must change the logits."""
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["no_rope_layers"] == [1, 1, 1, 0], cfg["no_rope_layers"]
    ids, want = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    nope = changed_by(d, ids, want, no_rope_layers=[1, 1, 1, 1])
    assert nope > 1e-2, nope
    return f"no_rope_layers {cfg['no_rope_layers']}; max |dlogit| with rotary on every layer {nope:.3f}"


def phi3_config():
    # Half the head's features rotate; every layer slides over a window of 8 (shorter than the
    # long prompt).
    return transformers.Phi3Config(
        **ckpt.common_decoder(
            rms_norm_eps=1e-5,
            sliding_window=8,
            tie_word_embeddings=False,
            original_max_position_embeddings=128,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        )
    )


# LongRoPE's per-pair factors for the 8 rotary features of phi3_longrope's heads.
LONGROPE_SHORT = [1.0, 1.5, 2.25, 3.5]
LONGROPE_LONG = [1.0, 2.0, 4.0, 8.0]


def phi3_longrope_config():
    # The checkpoint claims 128 positions over an original 64: transformers scales the tables
    # by sqrt(1 + ln 2 / ln 64) and divides each frequency by its short factor.
    return transformers.Phi3Config(
        **ckpt.common_decoder(
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            max_position_embeddings=128,
            original_max_position_embeddings=64,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
                "short_factor": LONGROPE_SHORT,
                "long_factor": LONGROPE_LONG,
            },
        )
    )


def phi3_gguf(cfg, hf):
    # llama.cpp's converter keeps Phi-3's fused `qkv_proj` (`attn_qkv`) and `gate_up_proj`
    # (`ffn_up`) as stored, rows unpermuted (halves rotated).
    named = {
        "token_embd.weight": hf["model.embed_tokens.weight"],
        "output_norm.weight": hf["model.norm.weight"],
        "output.weight": hf["lm_head.weight"],
    }
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for g, h in [
            ("attn_norm", "input_layernorm"),
            ("ffn_norm", "post_attention_layernorm"),
            ("attn_qkv", "self_attn.qkv_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("ffn_up", "mlp.gate_up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ]:
            named[f"blk.{l}.{g}.weight"] = hf[f"{p}{h}.weight"]

    def meta(w):
        head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
        w.add_rope_dimension_count(int(head_dim * cfg["rope_parameters"]["partial_rotary_factor"]))
        w.add_rope_freq_base(cfg["rope_theta"])
        w.add_rope_scaling_orig_ctx_len(cfg["original_max_position_embeddings"])
        w.add_sliding_window(cfg["sliding_window"])

    write_gguf("phi3", "phi3", cfg, named, meta)


def phi3_checks(d, long_case):
    ids, want = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    window = changed_by(d, ids, want, sliding_window=None)
    assert window > 1e-2, window
    return f"max |dlogit| without the window {window:.3f}"


def phi3_longrope_checks(d, long_case):
    """The short factors and the attention factor must both change the logits."""
    ids, want = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    cfg = json.loads((d / "config.json").read_text())
    plain = dict(cfg["rope_parameters"], short_factor=[1.0] * 4, attention_factor=None)
    factors = changed_by(d, ids, want, rope_parameters=dict(plain, attention_factor=cfg_attention(cfg)))
    scale = changed_by(d, ids, want, rope_parameters=dict(cfg["rope_parameters"], attention_factor=1.0))
    assert min(factors, scale) > 1e-2, (factors, scale)
    return f"max |dlogit| with short factors 1: {factors:.3f}, attention factor 1: {scale:.3f}"


def gpt_oss_config():
    # Four layers alternating sliding (window 8, shorter than the long prompt) and full
    # attention; YaRN without truncation, as the released checkpoints state it; a small
    # swiglu_limit so that both clamps bind on this model's activations.
    return transformers.GptOssConfig(
        **ckpt.common_decoder(
            num_hidden_layers=4,
            head_dim=16,
            intermediate_size=48,
            rms_norm_eps=1e-5,
            num_local_experts=4,
            num_experts_per_tok=2,
            sliding_window=8,
            layer_types=["sliding_attention", "full_attention"] * 2,
            swiglu_alpha=1.702,
            swiglu_limit=1.5,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
                "original_max_position_embeddings": 32,
            },
        )
    )


def gpt_oss_init(model, seed):
    """gen_random_checkpoints' rules, plus gpt-oss's own parameters: sinks ~ N(0, 1), the
    experts' stacks (stored [experts, in, out]) ~ N(0, 1/sqrt(in)), their biases and the
    router's ~ N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed + 1)

    def normal(p, std):
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * std)

    own = {}
    for name, p in model.named_parameters():
        if name.endswith(".sinks"):
            own[name] = (p, 1.0)
        elif name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            own[name] = (p, 1.0 / np.sqrt(p.shape[1]))
        elif name.endswith(("_proj_bias", "router.bias")):
            own[name] = (p, 0.1)
    params = dict(model.named_parameters())
    for n in own:
        del params[n]

    class View(torch.nn.Module):
        def named_parameters(self):
            return params.items()

    ckpt.interesting_init(View(), seed, gemma_norm=False)
    for n, (p, std) in own.items():
        normal(p, std)


def gpt_oss_checks(d, long_case):
    """No top-2 choice may be a near tie; the sinks, the window, YaRN and both clamps must
    change the logits."""
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    ids = long_case["prompt_ids"]
    margin, used = refs.router_margin(model, ids, model.config.num_experts_per_tok)
    assert margin > refs.MIN_ROUTER_MARGIN, margin
    want = torch.tensor(long_case["prefill_logits"][-1])

    def without(edit):
        m = transformers.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        edit(m)
        with torch.no_grad():
            got = m(input_ids=torch.tensor([ids])).logits[0, -1]
        return float((got - want).abs().max())

    def no_sinks(m):
        for layer in m.model.layers:
            layer.self_attn.sinks.data.fill_(-1e9)

    def no_clamp(m):
        for layer in m.model.layers:
            layer.mlp.experts.limit = 1e9

    sinks = without(no_sinks)
    clamp = without(no_clamp)
    window = changed_by(d, ids, want, sliding_window=4096)
    yarn = changed_by(
        d, ids, want, rope_parameters={"rope_type": "default", "rope_theta": 150000.0}
    )
    for v in (sinks, clamp, window, yarn):
        assert v > 1e-2, (sinks, clamp, window, yarn)
    return (
        f"smallest top-2 router margin {margin:.2e}, experts used per layer {used}, "
        f"max |dlogit| without sinks {sinks:.3f}, without clamps {clamp:.3f}, "
        f"without the window {window:.3f}, without YaRN {yarn:.3f}"
    )


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def mxfp4_hf(w):
    """`w [..., out, in]` quantized as gpt-oss's released checkpoints store experts: per 32
    inputs an E8M0 scale byte `s` (value 2^(s-127)) and 32 E2M1 codes, two a byte, even element
    in the low nibble (`*_blocks [..., out, in/32, 16]`, `*_scales [..., out, in/32]`). The
    scale is ggml's choice (floor(log2(max|x|)) - 2), each code the nearest level (first on a
    tie), so these bytes repack to what gguf-py's own MXFP4 quantizer writes (checked)."""
    x = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32).astype(np.float32)
    amax = np.abs(x).max(axis=-1)
    with np.errstate(divide="ignore"):
        s = np.where(amax > 0, np.floor(np.log2(amax)) - 2 + 127, 0).astype(np.uint8)
    scale = np.where(s < 2, np.float32(2.0**-127) * (2.0 ** s.astype(np.float64)), 2.0 ** (s.astype(np.float64) - 127))
    err = np.abs(scale[..., None, None] * E2M1 - x[..., None])
    codes = np.argmin(err, axis=-1).astype(np.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return blocks, s


def mxfp4_hf_values(blocks, scales):
    """The values of `mxfp4_hf`'s blocks and scales, decoded in the checkpoint's own layout."""
    codes = np.stack((blocks & 0x0F, blocks >> 4), axis=-1).reshape(*blocks.shape[:-1], 32)
    scale = 2.0 ** (scales.astype(np.float64) - 127)
    v = (E2M1[codes] * scale[..., None]).astype(np.float32)
    return v.reshape(*v.shape[:-2], -1)


def mxfp4_repack(blocks, scales):
    """llama.cpp's convert_hf_to_gguf GptOssModel.repack_mxfp4: the nibbles of each block
    reordered to ggml's layout (element j low, j + 16 high), the scale byte prepended; rows of
    `in/32 * 17` bytes, `[..., out, in]` MXFP4 to gguf-py."""
    t = ((blocks & 0x0F) << 4) | ((blocks & 0xF0) >> 4)
    a, b = np.split(t, 2, axis=-1)
    a = np.stack(((a & 0xF0), (a << 4) & 0xF0), axis=-1).reshape(t.shape)
    b = np.stack((b >> 4, b & 0x0F), axis=-1).reshape(t.shape)
    out = a | b
    out = ((out & 0xF0) >> 4) | ((out & 0x0F) << 4)
    packed = np.concatenate((scales[..., None], out), axis=-1)
    return np.ascontiguousarray(packed.reshape(*packed.shape[:-2], -1))


def gpt_oss_gguf_fixture():
    """gpt_oss_gguf/: a random gpt-oss (gpt_oss's config with 64 expert features, so that the
    down projection's inputs fill whole 32-element MXFP4 blocks) whose experts are quantized
    to MXFP4 as the released checkpoints store them, converted as llama.cpp's converter
    converts such a checkpoint (`gpt-oss` arch, gate and up split from the interleaved stack,
    MXFP4 stacks repacked, biases split likewise, sinks as `attn_sinks.weight`), and the
    transformers reference of the same model with its experts replaced by their MXFP4 values."""
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize, quantize

    seed = 5100
    cfg_obj = gpt_oss_config()
    cfg_obj.intermediate_size = 64
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM._from_config(
        cfg_obj, attn_implementation="eager", dtype=torch.float32
    ).eval()
    gpt_oss_init(model, seed)
    cfg = cfg_obj.to_dict()
    layers, ff = cfg["num_hidden_layers"], cfg["intermediate_size"]
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    named = {
        "token_embd.weight": sd["model.embed_tokens.weight"],
        "output_norm.weight": sd["model.norm.weight"],
        "output.weight": sd["lm_head.weight"],
    }
    raw = {}
    for l in range(layers):
        p = f"model.layers.{l}."
        for g, h in [
            ("attn_norm.weight", "input_layernorm.weight"),
            ("post_attention_norm.weight", "post_attention_layernorm.weight"),
            ("attn_sinks.weight", "self_attn.sinks"),
            ("ffn_gate_inp.weight", "mlp.router.weight"),
            ("ffn_gate_inp.bias", "mlp.router.bias"),
        ] + [
            (f"attn_{g}.{t}", f"self_attn.{h}_proj.{t}")
            for g, h in [("q", "q"), ("k", "k"), ("v", "v"), ("output", "o")]
            for t in ("weight", "bias")
        ]:
            named[f"blk.{l}.{g}"] = sd[p + h]
        experts = model.model.layers[l].mlp.experts
        # [experts, in, out] as transformers holds them; the checkpoint's blocks are [.., out, in].
        gu_blocks, gu_scales = mxfp4_hf(sd[p + "mlp.experts.gate_up_proj"].transpose(0, 2, 1))
        dn_blocks, dn_scales = mxfp4_hf(sd[p + "mlp.experts.down_proj"].transpose(0, 2, 1))
        split = {
            "ffn_gate_exps": (gu_blocks[:, ::2], gu_scales[:, ::2]),
            "ffn_up_exps": (gu_blocks[:, 1::2], gu_scales[:, 1::2]),
            "ffn_down_exps": (dn_blocks, dn_scales),
        }
        values = {}
        for name, (blocks, scales) in split.items():
            packed = mxfp4_repack(blocks, scales)
            v = dequantize(packed, Q.MXFP4)
            # ggml reads the repacked bytes as the checkpoint's layout means them, and gguf-py's
            # quantizer of those values writes the same bytes.
            assert np.array_equal(v, mxfp4_hf_values(blocks, scales)), name
            assert np.array_equal(quantize(v, Q.MXFP4), packed), name
            values[name] = v
            raw[f"blk.{l}.{name}.weight"] = packed
        gu = np.empty_like(sd[p + "mlp.experts.gate_up_proj"])
        gu[:, :, ::2] = values["ffn_gate_exps"].transpose(0, 2, 1)
        gu[:, :, 1::2] = values["ffn_up_exps"].transpose(0, 2, 1)
        assert np.abs(gu - sd[p + "mlp.experts.gate_up_proj"]).max() > 0
        with torch.no_grad():
            experts.gate_up_proj.copy_(torch.from_numpy(gu))
            experts.down_proj.copy_(torch.from_numpy(values["ffn_down_exps"].transpose(0, 2, 1).copy()))
        gu_bias = sd[p + "mlp.experts.gate_up_proj_bias"]
        named[f"blk.{l}.ffn_gate_exps.bias"] = gu_bias[:, ::2]
        named[f"blk.{l}.ffn_up_exps.bias"] = gu_bias[:, 1::2]
        named[f"blk.{l}.ffn_down_exps.bias"] = sd[p + "mlp.experts.down_proj_bias"]

    rng = np.random.default_rng(6100)
    vocab = cfg["vocab_size"]
    case, err = refs.decoder_case(model, rng.integers(0, vocab, size=refs.PROMPT_LEN).tolist())
    long_case, err2 = refs.decoder_case(model, rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist())
    margin, used = refs.router_margin(model, long_case["prompt_ids"], cfg["num_experts_per_tok"])
    assert margin > refs.MIN_ROUTER_MARGIN, margin
    out = RANDOM / "gpt_oss_gguf"
    out.mkdir(parents=True, exist_ok=True)
    ref = {
        "model": "gpt_oss_gguf",
        "architecture": "GptOssForCausalLM",
        "reference": refs.reference_meta(", experts replaced by their MXFP4 values"),
        **case,
        "long": long_case,
    }
    (out / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")

    rope = cfg["rope_parameters"]
    w = GGUFWriter(out / "model.gguf", arch="gpt-oss")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_expert_count(cfg["num_local_experts"])
    w.add_expert_used_count(cfg["num_experts_per_tok"])
    w.add_sliding_window(cfg["sliding_window"])
    w.add_expert_feed_forward_length(ff)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(rope["factor"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    # Not written by llama.cpp's converter (llama.cpp fixes the limit at 7): the fixture's
    # smaller limit, so that both clamps bind, stated per layer under the standard key.
    w.add_swiglu_clamp_exp([cfg["swiglu_limit"]] * layers)
    stand_in_tokenizer(w, cfg)
    for n, data in named.items():
        w.add_tensor(n, np.ascontiguousarray(data, dtype=np.float32))
    for n, data in raw.items():
        w.add_tensor(n, data, raw_dtype=Q.MXFP4)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(
        f"gpt_oss_gguf: smallest top-2 router margin {margin:.2e}, experts used per layer {used}, "
        f"decode={[x['input_id'] for x in case['decode']]} "
        f"long decode={[x['input_id'] for x in long_case['decode']]} cache-check err={max(err, err2):.2e}"
    )


def gpt_oss_mxfp4_fixture():
    """gpt_oss_mxfp4/: a random gpt-oss saved as OpenAI released gpt-oss-20b/120b: the
    `gpt_oss_gguf` config (64 expert features: whole 32-element MXFP4 blocks), every other
    tensor in bfloat16, and each layer's expert stacks as `*_blocks` / `*_scales` (MXFP4 in the
    checkpoint layout, `mxfp4_hf`) under `quantization_config: {quant_method: mxfp4}`, gate and
    up rows still interleaved; the biases stay bfloat16 beside them. Its reference is transformers
    on the model holding exactly those values (bfloat16 weights, experts replaced by their MXFP4
    values), which transformers' own `convert_moe_packed_tensors` must read from the blocks and
    its `Mxfp4Config(dequantize=True)` loader from the saved checkpoint (both checked)."""
    from safetensors.torch import save_file
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    seed = 5200
    cfg_obj = gpt_oss_config()
    cfg_obj.intermediate_size = 64
    torch.manual_seed(seed)
    model = transformers.GptOssForCausalLM._from_config(
        cfg_obj, attn_implementation="eager", dtype=torch.float32
    ).eval()
    gpt_oss_init(model, seed)
    layers = cfg_obj.num_hidden_layers
    stacks = ("gate_up_proj", "down_proj")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    tensors = {}
    for name, t in model.state_dict().items():
        if name.endswith(tuple(f"experts.{s}" for s in stacks)):
            # [experts, in, out] as transformers holds them; the blocks are [.., out, in / 32, 16].
            blocks, scales = mxfp4_hf(t.numpy().transpose(0, 2, 1))
            values = mxfp4_hf_values(blocks, scales).transpose(0, 2, 1)
            theirs = convert_moe_packed_tensors(
                torch.from_numpy(blocks.reshape(*scales.shape, 16)),
                torch.from_numpy(scales),
                dtype=torch.float32,
            )
            assert torch.equal(theirs, torch.from_numpy(np.ascontiguousarray(values))), name
            assert np.abs(values - t.numpy()).max() > 0, name
            with torch.no_grad():
                t.copy_(torch.from_numpy(np.ascontiguousarray(values)))
            tensors[name + "_blocks"] = torch.from_numpy(blocks.reshape(*scales.shape, 16).copy())
            tensors[name + "_scales"] = torch.from_numpy(scales.copy())
        else:
            tensors[name] = t.to(torch.bfloat16).contiguous()

    rng = np.random.default_rng(6200)
    vocab = cfg_obj.vocab_size
    case, err = refs.decoder_case(model, rng.integers(0, vocab, size=refs.PROMPT_LEN).tolist())
    long_case, err2 = refs.decoder_case(model, rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist())
    margin, used = refs.router_margin(model, long_case["prompt_ids"], cfg_obj.num_experts_per_tok)
    assert margin > refs.MIN_ROUTER_MARGIN, margin

    out = RANDOM / "gpt_oss_mxfp4"
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        f.unlink()
    model.config.save_pretrained(out)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update({"rope_theta": 150000.0, "torch_dtype": "bfloat16", "dtype": "bfloat16"})
    cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    cfg.pop("_name_or_path", None)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})

    ref = {
        "model": "gpt_oss_mxfp4",
        "architecture": "GptOssForCausalLM",
        "reference": refs.reference_meta(", bfloat16 weights, experts replaced by their MXFP4 values"),
        **case,
        "long": long_case,
    }
    (out / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")

    # transformers reads the saved checkpoint as the values the reference ran on.
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        out,
        dtype=torch.float32,
        attn_implementation="eager",
        quantization_config=transformers.Mxfp4Config(dequantize=True),
    ).eval()
    theirs = loaded.state_dict()
    for name, t in model.state_dict().items():
        assert torch.equal(theirs[name], t), name
    ids = torch.tensor([long_case["prompt_ids"]])
    with torch.no_grad():
        got = loaded(input_ids=ids).logits[0]
    reread = float((got - torch.tensor(long_case["prefill_logits"])).abs().max())
    assert reread < 1e-5, reread
    print(
        f"gpt_oss_mxfp4: smallest top-2 router margin {margin:.2e}, experts used per layer {used}, "
        f"decode={[x['input_id'] for x in case['decode']]} "
        f"long decode={[x['input_id'] for x in long_case['decode']]} cache-check err={max(err, err2):.2e} "
        f"max |dlogit| of transformers' own load {reread:.1e}"
    )


def write_gguf_keys(name, arch, cfg, named, meta):
    """A GGUF whose every hyperparameter `meta` writes (for configs that do not spell the
    Llama keys write_gguf reads), with the stand-in tokenizer and the F32 tensors."""
    out = RANDOM / f"{name}_gguf"
    out.mkdir(parents=True, exist_ok=True)
    w = GGUFWriter(out / "model.gguf", arch=arch)
    meta(w)
    stand_in_tokenizer(w, cfg)
    for n, data in named.items():
        w.add_tensor(n, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def mpt_config():
    # Six heads (not a power of two: the slopes interleave, see build_mpt_alibi_tensor), a
    # clip_qkv that binds on this model's projections and a softmax_scale of its own; tied head,
    # no biases, LayerNorms without bias. max_seq_len covers the long prompt and its decode.
    return transformers.MptConfig(
        d_model=96,
        n_heads=6,
        n_layers=2,
        expansion_ratio=4,
        max_seq_len=64,
        vocab_size=256,
        layer_norm_epsilon=1e-5,
        no_bias=True,
        tie_word_embeddings=True,
        attn_config={
            "alibi": True,
            "alibi_bias_max": 8,
            "clip_qkv": 1.5,
            "softmax_scale": 0.2,
            "qk_ln": False,
            "attn_impl": "torch",
        },
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def mpt_init(model, seed):
    """gen_random_checkpoints' rules; the token embedding (`wte`, which the rules would treat
XX"""
    ckpt.interesting_init(model, seed, gemma_norm=False)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        wte = model.transformer.wte.weight
        wte.copy_(torch.randn(wte.shape, generator=g, dtype=torch.float32) * 0.15)


def mpt_gguf(cfg, hf):
    # llama.cpp's converter (MPTModel) keeps every tensor as stored, writes no output.weight for
    # a tied head, a fixed layer_norm_epsilon of 1e-5, the clip as clamp_kqv and the slopes'
    # bias as max_alibi_bias. It drops softmax_scale (llama.cpp scales by head_dim^-1/2); the
    # standard attention.scale key states the checkpoint's scale instead, as for gemma2.
    named = {
        "token_embd.weight": hf["transformer.wte.weight"],
        "output_norm.weight": hf["transformer.norm_f.weight"],
    }
    for l in range(cfg["n_layers"]):
        p = f"transformer.blocks.{l}."
        for g, h in [
            ("attn_norm", "norm_1"),
            ("attn_qkv", "attn.Wqkv"),
            ("attn_output", "attn.out_proj"),
            ("ffn_norm", "norm_2"),
            ("ffn_up", "ffn.up_proj"),
            ("ffn_down", "ffn.down_proj"),
        ]:
            named[f"blk.{l}.{g}.weight"] = hf[f"{p}{h}.weight"]
    attn = cfg["attn_config"]

    def meta(w):
        w.add_context_length(cfg["max_seq_len"])
        w.add_embedding_length(cfg["d_model"])
        w.add_block_count(cfg["n_layers"])
        w.add_feed_forward_length(4 * cfg["d_model"])
        w.add_head_count(cfg["n_heads"])
        w.add_layer_norm_eps(1e-5)
        w.add_clamp_kqv(attn["clip_qkv"])
        w.add_max_alibi_bias(attn["alibi_bias_max"])
        w.add_attention_scale(attn["softmax_scale"])

    write_gguf_keys("mpt", "mpt", cfg, named, meta)


def mpt_checks(d, long_case):
    """The slopes follow transformers' interleaving for six heads; ALiBi, the clip and the
    softmax scale each move the long prompt's last logits."""
    from transformers.models.mpt import modeling_mpt

    got = modeling_mpt.build_mpt_alibi_tensor(6, 2)[:, 0, 0].neg().tolist()
    want = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert got == want, (got, want)
    ids, want_logits = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    original = modeling_mpt.build_mpt_alibi_tensor
    modeling_mpt.build_mpt_alibi_tensor = lambda h, s, b=8, device=None: torch.zeros(h, 1, s)
    try:
        alibi = changed_by(d, ids, want_logits)
    finally:
        modeling_mpt.build_mpt_alibi_tensor = original
    attn = json.loads((d / "config.json").read_text())["attn_config"]
    attn_config = transformers.models.mpt.configuration_mpt.MptAttentionConfig
    clip = changed_by(d, ids, want_logits, attn_config=attn_config(**dict(attn, clip_qkv=None)))
    scale = changed_by(d, ids, want_logits, attn_config=attn_config(**dict(attn, softmax_scale=None)))
    assert min(alibi, clip, scale) > 1e-2, (alibi, clip, scale)
    return (
        f"slopes {got}; max |dlogit| without ALiBi {alibi:.3f}, without clip_qkv {clip:.3f}, "
        f"with the default softmax scale {scale:.3f}"
    )


def bloom_config():
    # Twelve heads: eight slopes from 2^-1, then four from the doubled count's odd powers
    # (2^-0.5, 2^-1.5, ...), which are not exact in f32. Three layers, head dim 8.
    return transformers.BloomConfig(
        hidden_size=96,
        n_layer=3,
        n_head=12,
        vocab_size=256,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )


def bloom_init(model, seed):
    """gen_random_checkpoints' rules, with the final LayerNorm (`ln_f`, which they do not name
    a norm) a norm: weight ~ N(1, 0.1), bias ~ N(0, 0.05)."""
    params = {n: p for n, p in model.named_parameters() if not n.startswith("transformer.ln_f.")}

    class View(torch.nn.Module):
        def named_parameters(self):
            return params.items()

    ckpt.interesting_init(View(), seed, gemma_norm=False)
    g = torch.Generator().manual_seed(seed + 1)
    ln_f = model.transformer.ln_f
    with torch.no_grad():
        ln_f.weight.copy_(torch.randn(ln_f.weight.shape, generator=g) * 0.1 + 1.0)
        ln_f.bias.copy_(torch.randn(ln_f.bias.shape, generator=g) * 0.05)


def bloom_gguf(cfg, hf):
    # llama.cpp's converter (BloomModel) re-orders query_key_value from per-head [heads, 3,
    # head_dim] rows to [3, heads, head_dim] (and its bias alike), copies the embedding as
    # output.weight for the tied head, and states the context as seq_length, else n_embed.
    heads, d = cfg["n_head"], cfg["hidden_size"]
    p0 = "transformer."
    named = {
        "token_embd.weight": hf[p0 + "word_embeddings.weight"],
        "token_embd_norm.weight": hf[p0 + "word_embeddings_layernorm.weight"],
        "token_embd_norm.bias": hf[p0 + "word_embeddings_layernorm.bias"],
        "output_norm.weight": hf[p0 + "ln_f.weight"],
        "output_norm.bias": hf[p0 + "ln_f.bias"],
        "output.weight": hf[p0 + "word_embeddings.weight"],
    }
    for l in range(cfg["n_layer"]):
        p = f"{p0}h.{l}."
        for g, h in [
            ("attn_norm", "input_layernorm"),
            ("attn_output", "self_attention.dense"),
            ("ffn_norm", "post_attention_layernorm"),
            ("ffn_up", "mlp.dense_h_to_4h"),
            ("ffn_down", "mlp.dense_4h_to_h"),
        ]:
            for s in ("weight", "bias"):
                named[f"blk.{l}.{g}.{s}"] = hf[f"{p}{h}.{s}"]
        qkv = hf[p + "self_attention.query_key_value.weight"].reshape(heads, 3, d // heads, d)
        named[f"blk.{l}.attn_qkv.weight"] = np.concatenate([qkv[:, j].reshape(-1, d) for j in range(3)])
        qkv_b = hf[p + "self_attention.query_key_value.bias"].reshape(heads, 3, d // heads)
        named[f"blk.{l}.attn_qkv.bias"] = np.concatenate([qkv_b[:, j].reshape(-1) for j in range(3)])

    def meta(w):
        w.add_context_length(cfg.get("seq_length", d))
        w.add_embedding_length(d)
        w.add_feed_forward_length(4 * d)
        w.add_block_count(cfg["n_layer"])
        w.add_head_count(heads)
        w.add_head_count_kv(heads)
        w.add_layer_norm_eps(cfg["layer_norm_epsilon"])

    write_gguf_keys("bloom", "bloom", cfg, named, meta)


def bloom_checks(d, long_case):
    """The slopes for twelve heads; ALiBi must move the long prompt's last logits, and so must
    reading query_key_value as [3, heads, head_dim] instead of per head."""
    from transformers.models.bloom import modeling_bloom

    got = modeling_bloom._get_alibi_slopes(12, "cpu").tolist()
    want = [2.0**-k for k in range(1, 9)] + [float(np.float32(2.0 ** -(k / 2))) for k in (1, 3, 5, 7)]
    assert np.allclose(got, want, rtol=1e-7, atol=0), (got, want)
    ids, want_logits = long_case["prompt_ids"], long_case["prefill_logits"][-1]
    original = modeling_bloom._get_alibi_slopes
    modeling_bloom._get_alibi_slopes = lambda n, device: torch.zeros(n)
    try:
        alibi = changed_by(d, ids, want_logits)
    finally:
        modeling_bloom._get_alibi_slopes = original
    m = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    heads, hd = 12, 8
    with torch.no_grad():
        for block in m.transformer.h:
            lin = block.self_attention.query_key_value
            w = lin.weight.view(3, heads, hd, -1).transpose(0, 1).reshape(lin.weight.shape).clone()
            bias = lin.bias.view(3, heads, hd).transpose(0, 1).reshape(-1).clone()
            lin.weight.copy_(w)
            lin.bias.copy_(bias)
        got_logits = m(input_ids=torch.tensor([ids])).logits[0, -1]
    layout = float((got_logits - torch.tensor(want_logits)).abs().max())
    assert min(alibi, layout) > 1e-2, (alibi, layout)
    return (
        f"slopes {[round(s, 6) for s in got]}; max |dlogit| without ALiBi {alibi:.3f}, "
        f"with query_key_value read as [3, heads, head_dim] {layout:.3f}"
    )


def cfg_attention(cfg):
    import math

    f = cfg["max_position_embeddings"] / cfg["original_max_position_embeddings"]
    return math.sqrt(1 + math.log(f) / math.log(cfg["original_max_position_embeddings"]))


# name -> (model class, config builder, init options, legacy config keys, GGUF writer,
#          checks that the fixture exercises what the family adds)
FAMILIES = {
    "gemma2": (
        transformers.Gemma2ForCausalLM,
        gemma2_config,
        {"gemma_norm": True, "embed_std": 0.1, "post_norm_mean": 3.0},
        {"rope_theta": 10000.0, "rope_scaling": None},
        gemma2_gguf,
        gemma2_checks,
    ),
    "olmo2": (
        transformers.Olmo2ForCausalLM,
        olmo2_config,
        {"gemma_norm": False},
        {"rope_theta": 500000.0, "rope_scaling": None},
        olmo2_gguf,
        olmo2_checks,
    ),
    "qwen2_moe": (
        transformers.Qwen2MoeForCausalLM,
        qwen2_moe_config,
        {"gemma_norm": False},
        {"rope_theta": 10000.0, "rope_scaling": None},
        qwen2_moe_gguf,
        qwen2_moe_checks,
    ),
    "smollm3": (
        transformers.SmolLM3ForCausalLM,
        smollm3_config,
        {"gemma_norm": False},
        {"rope_theta": 10000.0, "rope_scaling": None},
        smollm3_gguf,
        smollm3_checks,
    ),
    "phi3": (
        transformers.Phi3ForCausalLM,
        phi3_config,
        {"gemma_norm": False},
        {"rope_theta": 10000.0, "rope_scaling": None, "partial_rotary_factor": 0.5},
        phi3_gguf,
        phi3_checks,
    ),
    "phi3_longrope": (
        transformers.Phi3ForCausalLM,
        phi3_longrope_config,
        {"gemma_norm": False},
        {
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": LONGROPE_SHORT,
                "long_factor": LONGROPE_LONG,
            },
        },
        None,
        phi3_longrope_checks,
    ),
    "gpt_oss": (
        transformers.GptOssForCausalLM,
        gpt_oss_config,
        gpt_oss_init,
        {"rope_theta": 150000.0},
        None,
        gpt_oss_checks,
    ),
    "mpt": (
        transformers.MptForCausalLM,
        mpt_config,
        mpt_init,
        {},
        mpt_gguf,
        mpt_checks,
    ),
    "bloom": (
        transformers.BloomForCausalLM,
        bloom_config,
        bloom_init,
        {},
        bloom_gguf,
        bloom_checks,
    ),
}


def write_checkpoint(name, seed):
    cls, make_config, init, legacy, _, _ = FAMILIES[name]
    torch.manual_seed(seed)
    model = cls._from_config(make_config(), attn_implementation="eager", dtype=torch.float32).eval()
    if callable(init):
        init(model, seed)
    else:
        ckpt.interesting_init(model, seed, **init)
    out = RANDOM / name
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        f.unlink()
    model.save_pretrained(out)
    (out / "generation_config.json").unlink(missing_ok=True)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg.update(legacy)
    cfg["torch_dtype"] = "float32"
    cfg.pop("_name_or_path", None)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    again = transformers.AutoConfig.from_pretrained(out)
    rope = getattr(model.config, "rope_parameters", None)
    assert getattr(again, "rope_parameters", None) == rope, name


def write_reference(name, seed):
    d = RANDOM / name
    model = transformers.AutoModelForCausalLM.from_pretrained(
        d, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    rng = np.random.default_rng(seed)
    vocab = model.config.vocab_size
    prompt = rng.integers(0, vocab, size=refs.PROMPT_LEN).tolist()
    case, err = refs.decoder_case(model, prompt)
    long_prompt = rng.integers(0, vocab, size=LONG_PROMPT_LEN).tolist()
    long_case, err2 = refs.decoder_case(model, long_prompt)
    ref = {
        "model": name,
        "architecture": model.config.architectures[0],
        "reference": refs.reference_meta(),
        **case,
        "long": long_case,
    }
    (d / "reference.json").write_text(json.dumps(ref, separators=(",", ":")) + "\n")
    print(f"{name}: " + FAMILIES[name][5](d, long_case))
    print(
        f"{name}: decode={[x['input_id'] for x in case['decode']]} "
        f"long decode={[x['input_id'] for x in long_case['decode']]} "
        f"logit std={np.std(case['prefill_logits']):.3f} cache-check err={max(err, err2):.2e}"
    )


def main():
    print(refs.reference_meta())
    only = sys.argv[1:]
    for name, write in [("gpt_oss_gguf", gpt_oss_gguf_fixture), ("gpt_oss_mxfp4", gpt_oss_mxfp4_fixture)]:
        if name in only or not only:
            write()
    only = [n for n in only if n not in ("gpt_oss_gguf", "gpt_oss_mxfp4")]
    if not only and sys.argv[1:]:
        return
    unknown = set(only) - set(FAMILIES)
    if unknown:
        raise SystemExit(f"unknown fixture(s): {sorted(unknown)}")
    for i, name in enumerate(FAMILIES):
        if only and name not in only:
            continue
        write_checkpoint(name, 5000 + i)
        write_reference(name, 6000 + i)
        cfg = json.loads((RANDOM / name / "config.json").read_text())
        if FAMILIES[name][4] is not None:
            FAMILIES[name][4](cfg, load_file(RANDOM / name / "model.safetensors"))


if __name__ == "__main__":
    sys.exit(main())
