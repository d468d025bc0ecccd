//! Hugging Face `quantization_config`: which packed method a checkpoint's linears use.
//!
//! Read from `config.json`'s `quantization_config` (or, for older AutoGPTQ exports, from
//! `quantize_config.json`). Only the methods and layouts poot has packed formats for are
//! admitted; anything else is refused at load by name, never read as dense weights.

use poot_formats::StoredType;
use serde_json::Value;

use crate::LoadError;

/// A packed linear-weight method.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantMethod {
    /// GPTQ: int32 words of `bits`-bit values packed along the input dimension
    /// (`qweight [in * bits / 32, out]`), per-group `scales` and packed `qzeros`, and `g_idx`.
    Gptq,
    /// AWQ (GEMM layout): packed along the output dimension (`qweight [in, out * bits / 32]`).
    Awq,
    /// FP8 E4M3 weights with a `weight_scale` or `weight_scale_inv` sibling (per tensor, per
    /// output channel or per block). Covers `fp8`, `fbgemm_fp8` and float-quantized
    /// `compressed-tensors` checkpoints.
    Fp8,
    /// E2M1 FP4 weights with one E8M0 scale per 32 input columns (`weight_packed` U8
    /// `[out, in / 2]`, `weight_scale` U8 `[out, in / 32]`): compressed-tensors'
    /// `mxfp4-pack-quantized` format.
    Mxfp4,
    /// transformers' `mxfp4` (gpt-oss as OpenAI released it): the routed experts' stacks stored
    /// as `{stack}_blocks` U8 `[experts, out, in / 32, 16]` (E2M1 codes two a byte, even element
    /// in the low nibble) and `{stack}_scales` U8 `[experts, out, in / 32]` (E8M0); every other
    /// linear is dense. The family that reads those stacks binds them; [`crate::linear`] reads
    /// the rest as dense weights.
    Mxfp4Experts,
}

/// A quantization config that poot cannot load, or a quantized linear whose tensors do not
/// have the layout the config describes.
#[derive(Debug, thiserror::Error)]
pub enum QuantError {
    /// `quant_method` names a method poot has no packed format for (bitsandbytes, hqq, ...).
    #[error(
        "quantization method `{method}` is not supported (gptq, awq, fp8, mxfp4 experts and compressed-tensors' float-quantized and mxfp4-pack-quantized are)"
    )]
    UnsupportedMethod { method: String },

    /// A supported method in a variant whose layout poot does not read.
    #[error("{method}: `{field}` = {value} is not supported")]
    UnsupportedVariant {
        method: &'static str,
        field: &'static str,
        value: String,
    },

    /// A bit width other than the method's supported one.
    #[error("{method}: {bits}-bit weights are not supported (only {supported}-bit)")]
    UnsupportedBits {
        method: &'static str,
        bits: u64,
        supported: u64,
    },

    /// A quantization config field is missing or has the wrong JSON type.
    #[error("quantization config: `{field}` is missing or not {expected}")]
    ConfigField {
        field: &'static str,
        expected: &'static str,
    },

    /// Packed components (`qweight`) exist but the checkpoint's config is not GPTQ or AWQ.
    #[error(
        "`{prefix}.qweight` is packed, but the checkpoint has no GPTQ or AWQ quantization config"
    )]
    ComponentsWithoutConfig { prefix: String },

    /// A component tensor a quantized linear needs is absent.
    #[error("quantized linear `{prefix}` has no `{component}` tensor")]
    MissingComponent {
        prefix: String,
        component: &'static str,
    },

    /// A component tensor has the wrong stored type.
    #[error("`{tensor}` is {}, expected {expected}", found.name())]
    ComponentType {
        tensor: String,
        expected: &'static str,
        found: StoredType,
    },

    /// A component tensor's shape disagrees with the others'.
    #[error("`{tensor}` has shape {found:?}, expected {expected:?}")]
    ComponentShape {
        tensor: String,
        expected: Vec<u64>,
        found: Vec<u64>,
    },

    /// An FP8 weight has no `weight_scale` or `weight_scale_inv` sibling. Reading it as
    /// unscaled dense weights would be wrong by the scale, so it is refused.
    #[error("FP8 tensor `{tensor}` has no `weight_scale` or `weight_scale_inv` sibling")]
    Fp8WithoutScale { tensor: String },

    /// A quantized linear whose layout the loader reads but poot has no component format to
    /// decode inside a contraction (a GPTQ or AWQ scale that is not F16, an FP8 scale in F16 or
    /// in blocks other than 128x128). It is refused when a family binds it, never decoded to
    /// dense weights.
    #[error("quantized linear `{prefix}`: {what} is not supported ({supported})")]
    UnsupportedLayout {
        prefix: String,
        what: String,
        supported: &'static str,
    },

    /// An FP8 weight's scale has a shape that is neither per tensor, per output channel nor
    /// per block of the configured block size.
    #[error(
        "FP8 scale `{tensor}` has shape {scale_shape:?}, which fits no scale layout of weight {weight_shape:?} (block {block:?})"
    )]
    Fp8ScaleShape {
        tensor: String,
        weight_shape: Vec<u64>,
        scale_shape: Vec<u64>,
        block: Option<[u64; 2]>,
    },
}

/// A checkpoint's quantization config, reduced to what identifies the stored layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantizationConfig {
    pub method: QuantMethod,
    /// `quant_method` as written (`gptq`, `awq`, `fp8`, `fbgemm_fp8`, `compressed-tensors`).
    pub method_name: String,
    pub bits: u32,
    /// Input rows per scale group; `None` for one group over the whole input (GPTQ's -1)
    /// and for FP8.
    pub group_size: Option<u64>,
    /// GPTQ `desc_act`: groups follow `g_idx` rather than input order.
    pub act_order: bool,
    /// GPTQ `sym`, when the config says.
    pub sym: Option<bool>,
    /// AWQ `zero_point`, when the config says.
    pub zero_point: Option<bool>,
    /// FP8 block size `[rows, cols]` of a block-scaled checkpoint.
    pub weight_block_size: Option<[u64; 2]>,
    /// Modules left unquantized (`modules_to_not_convert` / `ignore`), as listed.
    pub modules_not_quantized: Vec<String>,
}

const GPTQ_AWQ_BITS: u64 = 4;

impl QuantizationConfig {
    /// The quantization of a Hugging Face checkpoint: `config.json`'s `quantization_config`,
    /// else `quantize_config.json` (AutoGPTQ) when given; `None` for a dense checkpoint.
    pub fn from_hf(
        config: &Value,
        quantize_config: Option<&Value>,
    ) -> Result<Option<QuantizationConfig>, LoadError> {
        if let Some(q) = config.get("quantization_config").filter(|q| !q.is_null()) {
            return Self::parse(q).map(Some);
        }
        match quantize_config {
            // AutoGPTQ wrote its config without `quant_method`.
            Some(q) if q.get("quant_method").is_none() => Self::parse_gptq(q, "gptq").map(Some),
            Some(q) => Self::parse(q).map(Some),
            None => Ok(None),
        }
    }

    /// Parses one `quantization_config` object.
    pub fn parse(q: &Value) -> Result<QuantizationConfig, LoadError> {
        let method =
            q.get("quant_method")
                .and_then(Value::as_str)
                .ok_or(QuantError::ConfigField {
                    field: "quant_method",
                    expected: "a string",
                })?;
        match method {
            "gptq" => Self::parse_gptq(q, method),
            "awq" => Self::parse_awq(q, method),
            "fp8" | "fbgemm_fp8" => Self::parse_fp8(q, method),
            "compressed-tensors" => Self::parse_compressed_tensors(q, method),
            "mxfp4" => Ok(Self::mxfp4_experts(q, method)),
            other => Err(QuantError::UnsupportedMethod {
                method: other.to_owned(),
            }
            .into()),
        }
    }

    /// transformers' `Mxfp4Config`: nothing beside the modules it leaves dense changes the
    /// stored layout (`dequantize` is what transformers does after loading).
    fn mxfp4_experts(q: &Value, method_name: &str) -> QuantizationConfig {
        QuantizationConfig {
            method: QuantMethod::Mxfp4Experts,
            method_name: method_name.to_owned(),
            bits: 4,
            group_size: Some(MXFP4_GROUP),
            act_order: false,
            sym: None,
            zero_point: None,
            weight_block_size: None,
            modules_not_quantized: string_list(q, "modules_to_not_convert"),
        }
    }

    fn parse_gptq(q: &Value, method_name: &str) -> Result<QuantizationConfig, LoadError> {
        let bits = required_u64(q, &["bits"], "bits")?;
        check_bits("gptq", bits)?;
        if let Some(format) = q.get("checkpoint_format").and_then(Value::as_str)
            && format != "gptq"
        {
            return Err(variant("gptq", "checkpoint_format", format));
        }
        Ok(QuantizationConfig {
            method: QuantMethod::Gptq,
            method_name: method_name.to_owned(),
            bits: GPTQ_AWQ_BITS as u32,
            group_size: group_size(q, &["group_size"])?,
            act_order: optional_bool(q, "desc_act")?.unwrap_or(false),
            sym: optional_bool(q, "sym")?,
            zero_point: None,
            weight_block_size: None,
            modules_not_quantized: string_list(q, "modules_to_not_convert"),
        })
    }

    fn parse_awq(q: &Value, method_name: &str) -> Result<QuantizationConfig, LoadError> {
        let bits = required_u64(q, &["bits", "w_bit"], "bits")?;
        check_bits("awq", bits)?;
        if let Some(version) = q.get("version").and_then(Value::as_str)
            && !version.eq_ignore_ascii_case("gemm")
        {
            return Err(variant("awq", "version", version));
        }
        Ok(QuantizationConfig {
            method: QuantMethod::Awq,
            method_name: method_name.to_owned(),
            bits: GPTQ_AWQ_BITS as u32,
            group_size: group_size(q, &["group_size", "q_group_size"])?,
            act_order: false,
            sym: None,
            zero_point: optional_bool(q, "zero_point")?,
            weight_block_size: None,
            modules_not_quantized: string_list(q, "modules_to_not_convert"),
        })
    }

    fn parse_fp8(q: &Value, method_name: &str) -> Result<QuantizationConfig, LoadError> {
        if let Some(fmt) = q.get("fmt").and_then(Value::as_str)
            && fmt != "e4m3"
        {
            return Err(variant("fp8", "fmt", fmt));
        }
        let weight_block_size = match q.get("weight_block_size") {
            None | Some(Value::Null) => None,
            Some(v) => Some(block_pair(v, "weight_block_size")?),
        };
        Ok(Self::fp8(
            method_name,
            weight_block_size,
            string_list(q, "modules_to_not_convert"),
        ))
    }

    fn parse_compressed_tensors(
        q: &Value,
        method_name: &str,
    ) -> Result<QuantizationConfig, LoadError> {
        let format = compressed_tensors_format(q);
        if format == MXFP4_FORMAT {
            return Self::parse_mxfp4(q, method_name);
        }
        if format != "float-quantized" {
            return Err(variant("compressed-tensors", "format", format));
        }
        let groups =
            q.get("config_groups")
                .and_then(Value::as_object)
                .ok_or(QuantError::ConfigField {
                    field: "config_groups",
                    expected: "an object",
                })?;
        let mut block = None;
        for group in groups.values() {
            let w = group.get("weights").ok_or(QuantError::ConfigField {
                field: "config_groups.*.weights",
                expected: "an object",
            })?;
            let bits = required_u64(w, &["num_bits"], "config_groups.*.weights.num_bits")?;
            if bits != 8 {
                return Err(QuantError::UnsupportedBits {
                    method: "compressed-tensors",
                    bits,
                    supported: 8,
                }
                .into());
            }
            let kind = w.get("type").and_then(Value::as_str).unwrap_or("");
            if kind != "float" {
                return Err(variant("compressed-tensors", "weights.type", kind));
            }
            if let Some(b) = w.get("block_structure").filter(|b| !b.is_null()) {
                block = Some(block_pair(b, "config_groups.*.weights.block_structure")?);
            }
        }
        Ok(Self::fp8(method_name, block, string_list(q, "ignore")))
    }

    /// compressed-tensors `mxfp4-pack-quantized`: every config group's weights 4-bit floats in
    /// groups of 32 (the E8M0 scale granularity of the OCP MX layout).
    fn parse_mxfp4(q: &Value, method_name: &str) -> Result<QuantizationConfig, LoadError> {
        if let Some(groups) = q.get("config_groups").and_then(Value::as_object) {
            for group in groups.values() {
                let Some(w) = group.get("weights").filter(|w| !w.is_null()) else {
                    continue;
                };
                let bits = required_u64(w, &["num_bits"], "config_groups.*.weights.num_bits")?;
                if bits != 4 {
                    return Err(QuantError::UnsupportedBits {
                        method: MXFP4_FORMAT,
                        bits,
                        supported: 4,
                    }
                    .into());
                }
                if let Some(kind) = w.get("type").and_then(Value::as_str)
                    && kind != "float"
                {
                    return Err(variant(MXFP4_FORMAT, "weights.type", kind));
                }
                if let Some(g) = w.get("group_size").and_then(Value::as_u64)
                    && g != MXFP4_GROUP
                {
                    return Err(variant(MXFP4_FORMAT, "weights.group_size", &g.to_string()));
                }
            }
        }
        Ok(QuantizationConfig {
            method: QuantMethod::Mxfp4,
            method_name: method_name.to_owned(),
            bits: 4,
            group_size: Some(MXFP4_GROUP),
            act_order: false,
            sym: None,
            zero_point: None,
            weight_block_size: None,
            modules_not_quantized: string_list(q, "ignore"),
        })
    }

    fn fp8(
        method_name: &str,
        weight_block_size: Option<[u64; 2]>,
        ignored: Vec<String>,
    ) -> QuantizationConfig {
        QuantizationConfig {
            method: QuantMethod::Fp8,
            method_name: method_name.to_owned(),
            bits: 8,
            group_size: None,
            act_order: false,
            sym: None,
            zero_point: None,
            weight_block_size,
            modules_not_quantized: ignored,
        }
    }
}

/// compressed-tensors' name for E2M1 weights with per-32 E8M0 scales.
const MXFP4_FORMAT: &str = "mxfp4-pack-quantized";
/// Input columns per E8M0 scale in the MX layout.
const MXFP4_GROUP: u64 = 32;

/// compressed-tensors' `format`: at the top level, or (some exporters) inside the config groups.
fn compressed_tensors_format(q: &Value) -> &str {
    q.get("format").and_then(Value::as_str).unwrap_or_else(|| {
        q.get("config_groups")
            .and_then(Value::as_object)
            .and_then(|g| {
                g.values()
                    .find_map(|group| group.get("format").and_then(Value::as_str))
            })
            .unwrap_or("")
    })
}

fn variant(method: &'static str, field: &'static str, value: &str) -> LoadError {
    QuantError::UnsupportedVariant {
        method,
        field,
        value: format!("`{value}`"),
    }
    .into()
}

fn check_bits(method: &'static str, bits: u64) -> Result<(), LoadError> {
    if bits == GPTQ_AWQ_BITS {
        Ok(())
    } else {
        Err(QuantError::UnsupportedBits {
            method,
            bits,
            supported: GPTQ_AWQ_BITS,
        }
        .into())
    }
}

fn required_u64(q: &Value, keys: &[&str], field: &'static str) -> Result<u64, LoadError> {
    keys.iter()
        .find_map(|k| q.get(*k))
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            QuantError::ConfigField {
                field,
                expected: "a non-negative integer",
            }
            .into()
        })
}

/// A group size; -1 (or absent) means one group over the whole input.
fn group_size(q: &Value, keys: &[&str]) -> Result<Option<u64>, LoadError> {
    match keys.iter().find_map(|k| q.get(*k)) {
        None => Ok(None),
        Some(v) => match v.as_i64() {
            Some(-1) => Ok(None),
            Some(g) if g > 0 => Ok(Some(g as u64)),
            _ => Err(QuantError::ConfigField {
                field: "group_size",
                expected: "a positive integer or -1",
            }
            .into()),
        },
    }
}

fn optional_bool(q: &Value, key: &'static str) -> Result<Option<bool>, LoadError> {
    match q.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(QuantError::ConfigField {
            field: key,
            expected: "a boolean",
        }
        .into()),
    }
}

fn block_pair(v: &Value, field: &'static str) -> Result<[u64; 2], LoadError> {
    let pair = v
        .as_array()
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>());
    match pair.as_deref() {
        Some(&[r, c]) if r > 0 && c > 0 => Ok([r, c]),
        _ => Err(QuantError::ConfigField {
            field,
            expected: "two positive integers",
        }
        .into()),
    }
}

fn string_list(q: &Value, key: &str) -> Vec<String> {
    q.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
