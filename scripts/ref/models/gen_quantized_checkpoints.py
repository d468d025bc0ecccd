#!/usr/bin/env python3
"""Writes tiny random-weight Llama checkpoints quantized in each Hugging Face packed layout, and
the transformers reference each is checked against.

Usage: python gen_quantized_checkpoints.py [--tp] OUT_DIR

--tp writes the same layouts at dimensions whose halves are whole 128x128 FP8 tiles (hidden 256,
intermediate 512, head_dim 64), for splitting over a tensor-parallel group of two.

For each layout below, OUT_DIR/<name>/ gets
  config.json         a Llama config with the layout's quantization_config
  model.safetensors   every projection (q, k, v, o, gate, up, down of both layers) as the
                      layout's packed component tensors; embedding, norms and lm_head float32
  reference.json      transformers float32 (eager attention) run on the *dequantized* dense
                      weights: {"prompt_ids", "greedy_ids", "margins", "logits"}, where
                      logits[0] is the prefill's last position and logits[i] the i-th greedy
                      decode step's, greedy_ids[i] = argmax(logits[i]), margins the top-two gaps

The packed tensors are written here in numpy from each layout's published description, and
dequantized back from those stored tensors with each library's own dequantization formula
(written out below), independently of poot:

  gptq, gptq_act_order  AutoGPTQ / GPTQModel "gptq" (v1) checkpoint format: qweight I32
                        [K/8, N] (input column 8r+i of output row n in bits 4i of word (r, n)),
                        qzeros I32 [G, N/8] holding zero - 1, scales F16 [G, N], g_idx I32 [K];
                        W = scales[g_idx[k], n] * (q - (stored_zero + 1)). act-order
                        (desc_act) visits columns in a permuted order, so g_idx is not k / 32.
  awq                   AutoAWQ GEMM: qweight I32 [K, N/8] packing 8 output rows in the order
                        [0, 2, 4, 6, 1, 3, 5, 7], qzeros I32 [G, N/8] likewise, scales F16
                        [G, N]; W = scales[g, n] * (q - zero), g = k / 64.
  fp8_channel           compressed-tensors float-quantized, channel strategy: weight F8_E4M3
                        [N, K], weight_scale BF16 [N, 1]; W = f32(w) * f32(scale).
  fp8_tensor            compressed-tensors float-quantized, tensor strategy: weight F8_E4M3
                        [N, K], weight_scale F32 [1]; W = f32(w) * scale.
  fp8_block             DeepSeek-V3 / Qwen "fp8" with weight_block_size [128, 128]: weight
                        F8_E4M3 [N, K], weight_scale_inv F32 [ceil(N/128), ceil(K/128)];
                        W = f32(w) * scale_inv[n / 128, k / 128].
  mxfp4                 compressed-tensors mxfp4-pack-quantized: weight_packed U8 [N, K/2]
                        (the even column in the low nibble), weight_scale U8 [N, K/32] E8M0;
                        W = e2m1(code) * 2^(scale - 127).

K = 128 (attention and gate/up inputs) and 320 (down: 2.5 tiles of 128, 5 groups of 64); with
--tp, 256 and 512.
Everything is seeded: the same versions write the same bytes.
"""

import json
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

torch.set_num_threads(2)

CONFIG = dict(
    model_type="llama",
    architectures=["LlamaForCausalLM"],
    hidden_size=128,
    intermediate_size=320,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    vocab_size=256,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
    hidden_act="silu",
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    bos_token_id=1,
    eos_token_id=2,
    torch_dtype="float32",
)
PROMPT = [1, 17, 200, 45, 3, 99, 128, 7, 64]
DECODE_STEPS = 8
PROJECTIONS = [
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
]


def dense_weights(rng):
    d, ff, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]
    hd = CONFIG["head_dim"]
    q_out, kv_out = CONFIG["num_attention_heads"] * hd, CONFIG["num_key_value_heads"] * hd
    shapes = {
        "self_attn.q_proj": (q_out, d),
        "self_attn.k_proj": (kv_out, d),
        "self_attn.v_proj": (kv_out, d),
        "self_attn.o_proj": (d, q_out),
        "mlp.gate_proj": (ff, d),
        "mlp.up_proj": (ff, d),
        "mlp.down_proj": (d, ff),
    }
    f32 = np.float32
    w = {
        "model.embed_tokens.weight": rng.normal(0, 0.5, (v, d)).astype(f32),
        "model.norm.weight": rng.normal(1, 0.1, (d,)).astype(f32),
        "lm_head.weight": rng.normal(0, 0.25, (v, d)).astype(f32),
    }
    for layer in range(CONFIG["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        w[f"{p}.input_layernorm.weight"] = rng.normal(1, 0.1, (d,)).astype(f32)
        w[f"{p}.post_attention_layernorm.weight"] = rng.normal(1, 0.1, (d,)).astype(f32)
        for proj, (n, k) in shapes.items():
            gain = 2.0 if proj in ("self_attn.o_proj", "mlp.down_proj") else 1.0
            w[f"{p}.{proj}.weight"] = rng.normal(0, gain / np.sqrt(k), (n, k)).astype(f32)
    return w


# ---- int4 (GPTQ, AWQ) ------------------------------------------------------------------------


def int4_groups(w, g_idx, n_groups):
    """Asymmetric 4-bit scales (f16) and zeros per (group, output row), GPTQ's min-max rule."""
    n = w.shape[0]
    scales = np.zeros((n_groups, n), np.float16)
    zeros = np.zeros((n_groups, n), np.int64)
    for g in range(n_groups):
        cols = w[:, g_idx == g]
        lo = np.minimum(cols.min(axis=1), 0)
        hi = np.maximum(cols.max(axis=1), 0)
        scale = ((hi - lo) / 15).astype(np.float16)
        scale[scale == 0] = 1
        scales[g] = scale
        # A zero of 0 would be stored as -1 by the v1 format; keep zeros in 1..15.
        zeros[g] = np.clip(np.round(-lo / scale.astype(np.float32)), 1, 15)
    s = scales[g_idx].T.astype(np.float32)
    z = zeros[g_idx].T
    q = np.clip(np.round(w / s) + z, 0, 15).astype(np.uint32)
    return q, scales, zeros


def pack_int4(cols):
    """Eight 4-bit values along the last axis into one word, value i in bits 4i."""
    cols = cols.astype(np.uint32)
    word = np.zeros(cols.shape[:-1], np.uint32)
    for i in range(8):
        word |= cols[..., i] << np.uint32(4 * i)
    return word.view(np.int32)


def unpack_int4(words):
    """The inverse of pack_int4: [..., W] words to [..., 8 W] values."""
    w = words.view(np.uint32)[..., None] >> (np.arange(8, dtype=np.uint32) * 4)
    return (w & 0xF).reshape(*words.shape[:-1], words.shape[-1] * 8).astype(np.int64)


def gptq(w, rng, group=32, act_order=False):
    n, k = w.shape
    n_groups = -(-k // group)
    if act_order:
        perm = rng.permutation(k)
        g_idx = np.empty(k, np.int32)
        g_idx[perm] = np.arange(k) // group
    else:
        g_idx = (np.arange(k) // group).astype(np.int32)
    q, scales, zeros = int4_groups(w, g_idx, n_groups)
    qweight = pack_int4(q.T.reshape(k // 8, 8, n).transpose(0, 2, 1))  # [K/8, N]
    qzeros = pack_int4(((zeros - 1) & 0xF).reshape(n_groups, n // 8, 8))  # [G, N/8]
    tensors = {"qweight": qweight, "qzeros": qzeros, "scales": scales, "g_idx": g_idx}
    return tensors, gptq_dequant(tensors)


def gptq_dequant(t):
    """AutoGPTQ's dequantization of a "gptq" (v1) checkpoint: zeros + 1, scales[g_idx]."""
    q = unpack_int4(np.ascontiguousarray(t["qweight"].T)).T  # [K, N]
    zeros = unpack_int4(t["qzeros"]) + 1  # [G, N]
    g = t["g_idx"].astype(np.int64)
    scales = t["scales"].astype(np.float32)
    return (scales[g] * (q - zeros[g]).astype(np.float32)).T.astype(np.float32)


AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]


def awq(w, rng, group=64):
    n, k = w.shape
    n_groups = -(-k // group)
    g_idx = (np.arange(k) // group).astype(np.int32)
    q, scales, zeros = int4_groups(w, g_idx, n_groups)

    def pack_rows(vals):  # [rows, N] -> [rows, N/8] in AWQ's order
        v = vals.reshape(vals.shape[0], n // 8, 8)[:, :, AWQ_ORDER]
        return pack_int4(v)

    tensors = {"qweight": pack_rows(q.T), "qzeros": pack_rows(zeros), "scales": scales}
    return tensors, awq_dequant(tensors, group)


def awq_dequant(t, group):
    """AutoAWQ's dequantization: unpack nibbles, undo the packing order, (q - z) * s."""

    def unpack_rows(words):
        v = unpack_int4(words)
        return v.reshape(v.shape[0], -1, 8)[:, :, AWQ_REVERSE_ORDER].reshape(v.shape[0], -1)

    q = unpack_rows(t["qweight"])  # [K, N]
    z = unpack_rows(t["qzeros"])  # [G, N]
    g = np.arange(q.shape[0]) // group
    s = t["scales"].astype(np.float32)
    return (s[g] * (q - z[g]).astype(np.float32)).T.astype(np.float32)


# ---- FP8 E4M3 --------------------------------------------------------------------------------

E4M3_MAX = 448.0


def fp8_channel(w, rng):
    amax = np.abs(w).max(axis=1)
    scale = torch.from_numpy(np.maximum(amax, 1e-12) / E4M3_MAX).to(torch.bfloat16)
    s = scale.to(torch.float32)[:, None]
    q = (torch.from_numpy(w) / s).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    tensors = {"weight": q, "weight_scale": scale[:, None].contiguous()}
    return tensors, fp8_channel_dequant(tensors)


def fp8_channel_dequant(t):
    w = t["weight"].to(torch.float32)
    return (w * t["weight_scale"].to(torch.float32)).numpy()


def fp8_tensor(w, rng):
    scale = np.float32(max(np.abs(w).max(), 1e-12) / E4M3_MAX)
    q = (torch.from_numpy(w / scale)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    tensors = {"weight": q, "weight_scale": torch.tensor([scale], dtype=torch.float32)}
    return tensors, fp8_tensor_dequant(tensors)


def fp8_tensor_dequant(t):
    return (t["weight"].to(torch.float32) * t["weight_scale"][0]).numpy()


def fp8_block(w, rng, block=128):
    n, k = w.shape
    tn, tk = -(-n // block), -(-k // block)
    scale = np.zeros((tn, tk), np.float32)
    for i in range(tn):
        for j in range(tk):
            tile = w[i * block : (i + 1) * block, j * block : (j + 1) * block]
            scale[i, j] = max(np.abs(tile).max(), 1e-12) / E4M3_MAX
    s = np.repeat(np.repeat(scale, block, 0), block, 1)[:n, :k]
    q = (torch.from_numpy(w / s)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    tensors = {"weight": q, "weight_scale_inv": torch.from_numpy(scale)}
    return tensors, fp8_block_dequant(tensors, block)


def fp8_block_dequant(t, block):
    w = t["weight"].to(torch.float32).numpy()
    s = t["weight_scale_inv"].numpy()
    n, k = w.shape
    s = np.repeat(np.repeat(s, block, 0), block, 1)[:n, :k]
    return (w * s).astype(np.float32)


# ---- E2M1 FP4 with E8M0 scales -----------------------------------------------------------------

E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], np.float32)


def mxfp4(w, rng, group=32):
    n, k = w.shape
    g = w.reshape(n, k // group, group)
    amax = np.abs(g).max(axis=2)
    # OCP MX: the shared exponent is floor(log2(amax)) minus E2M1's largest exponent (2).
    e = np.floor(np.log2(np.maximum(amax, 2.0**-126))).astype(np.int64) - 2
    e = np.clip(e, -127, 127)
    scale_byte = (e + 127).astype(np.uint8)
    v = g / np.ldexp(np.float32(1), e)[:, :, None]
    mags = E2M1[:8]
    idx = np.abs(np.abs(v)[..., None] - mags).argmin(axis=-1)
    code = (idx | np.where(v < 0, 8, 0)).astype(np.uint8).reshape(n, k)
    packed = (code[:, 0::2] | (code[:, 1::2] << 4)).astype(np.uint8)
    tensors = {"weight_packed": packed, "weight_scale": scale_byte}
    return tensors, mxfp4_dequant(tensors, group)


def mxfp4_dequant(t, group):
    """The MX dequantization: e2m1(code) * 2^(e - 127), the even column in the low nibble."""
    p = t["weight_packed"]
    codes = np.stack([p & 0xF, p >> 4], axis=-1).reshape(p.shape[0], -1)
    scale = np.repeat(t["weight_scale"].astype(np.int64) - 127, group, axis=1)
    return np.ldexp(E2M1[codes], scale).astype(np.float32)


# ---- Checkpoints -------------------------------------------------------------------------------

LAYOUTS = {
    "gptq": (
        lambda w, r: gptq(w, r, 32, False),
        {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": False,
         "checkpoint_format": "gptq"},
    ),
    "gptq_act_order": (
        lambda w, r: gptq(w, r, 32, True),
        {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True, "sym": False,
         "checkpoint_format": "gptq"},
    ),
    "awq": (
        awq,
        {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True,
         "version": "gemm"},
    ),
    "fp8_channel": (
        fp8_channel,
        {"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
             "num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}}},
         "ignore": ["lm_head"]},
    ),
    "fp8_tensor": (
        fp8_tensor,
        {"quant_method": "compressed-tensors", "format": "float-quantized",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
             "num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": True}}},
         "ignore": ["lm_head"]},
    ),
    "fp8_block": (
        fp8_block,
        {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
         "weight_block_size": [128, 128]},
    ),
    "mxfp4": (
        mxfp4,
        {"quant_method": "compressed-tensors", "format": "mxfp4-pack-quantized",
         "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
             "num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}}},
         "ignore": ["lm_head"]},
    ),
}


def as_torch(x):
    return x if isinstance(x, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(x))


def reference(dense):
    skip = ("model_type", "architectures", "torch_dtype", "rope_theta")
    cfg = {k: v for k, v in CONFIG.items() if k not in skip}
    config = LlamaConfig(**cfg)
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in dense.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in m for m in missing), (missing, unexpected)
    ids = torch.tensor([PROMPT])
    logits, greedy, margins = [], [], []
    with torch.no_grad():
        out = model(ids, use_cache=True)
        past = out.past_key_values
        last = out.logits[0, -1]
        for step in range(DECODE_STEPS + 1):
            top2 = torch.topk(last, 2).values
            logits.append([float(x) for x in last])
            greedy.append(int(torch.argmax(last)))
            margins.append(float(top2[0] - top2[1]))
            if step == DECODE_STEPS:
                break
            out = model(torch.tensor([[greedy[-1]]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1]
    return {"prompt_ids": PROMPT, "greedy_ids": greedy, "margins": margins, "logits": logits}


def main(out):
    out = pathlib.Path(out)
    for i, (name, (quantize, qconfig)) in enumerate(LAYOUTS.items()):
        rng = np.random.default_rng(1000 + i)
        dense = dense_weights(rng)
        stored, dequantized = {}, {}
        for key, w in dense.items():
            prefix = key.removesuffix(".weight")
            if any(prefix.endswith(p) for p in PROJECTIONS):
                tensors, deq = quantize(w, rng)
                for suffix, t in tensors.items():
                    stored[f"{prefix}.{suffix}"] = as_torch(t)
                dequantized[key] = deq
            else:
                stored[key] = as_torch(w)
                dequantized[key] = w
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        config = dict(CONFIG, quantization_config=qconfig)
        (d / "config.json").write_text(json.dumps(config, indent=1))
        save_file({k: v.contiguous() for k, v in stored.items()}, str(d / "model.safetensors"))
        (d / "reference.json").write_text(json.dumps(reference(dequantized)))
        err = max(
            float(np.abs(dequantized[k] - dense[k]).max() / np.abs(dense[k]).max())
            for k in dense
        )
        print(f"{name}: written, worst dequantization error {err:.3f} of the largest weight")


TP_DIMS = dict(hidden_size=256, intermediate_size=512, head_dim=64)

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--tp"]:
        CONFIG.update(TP_DIMS)
        args = args[1:]
    if len(args) != 1:
        sys.exit(__doc__)
    main(args[0])
