//! A Hugging Face linear layer's weight as stored: dense, or the component tensors of a packed
//! method, checked against each other. Decoding belongs to `poot-formats`.

use std::num::NonZeroU32;

use poot_formats::{
    AwqFormat, DenseType, FP4_GROUP_ELEMS, FP8_BLOCK_ELEMS, Fp8Format, Fp8Scaling, GptqFormat,
    GptqZeros, GroupSize, MatrixShape, PackedFormat, ScaleType, StoredType,
};

use crate::LoadError;
use crate::quantization::{QuantError, QuantMethod, QuantizationConfig};
use crate::store::WeightStore;
use crate::tensor_view::TensorView;

/// A linear layer's weight, found by its prefix (`model.layers.0.self_attn.q_proj`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinearWeight<'a> {
    /// `{prefix}.weight`, a dense `[out, in]` tensor (BF16/F16/F32 words as stored).
    Dense(TensorView<'a>),
    /// The packed components of a quantized linear (boxed: it holds several views).
    Quantized(Box<QuantizedLinear<'a>>),
}

/// A quantized linear's component tensors as stored, with the layout facts the decoder needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantizedLinear<'a> {
    pub prefix: String,
    pub method: QuantMethod,
    pub bits: u32,
    /// Input rows per scale group; `None` for one group over the whole input, and for FP8.
    pub group_size: Option<u64>,
    /// GPTQ act-order (`desc_act`): the group of input row `i` is `g_idx[i]`.
    pub act_order: bool,
    pub in_features: u64,
    pub out_features: u64,
    pub components: QuantComponents<'a>,
}

/// The component tensors of each method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantComponents<'a> {
    /// `qweight` I32 `[in / 8, out]`, `qzeros` I32 `[groups, out / 8]`, `scales`
    /// `[groups, out]`, and `g_idx` I32 `[in]` when the checkpoint has it.
    Gptq {
        qweight: TensorView<'a>,
        qzeros: TensorView<'a>,
        scales: TensorView<'a>,
        g_idx: Option<TensorView<'a>>,
    },
    /// `qweight` I32 `[in, out / 8]`, `qzeros` I32 `[groups, out / 8]`, `scales` `[groups, out]`.
    Awq {
        qweight: TensorView<'a>,
        qzeros: TensorView<'a>,
        scales: TensorView<'a>,
    },
    /// `weight` F8_E4M3 `[out, in]` and its scale sibling.
    Fp8 {
        weight: TensorView<'a>,
        scale: TensorView<'a>,
        scale_name: Fp8ScaleName,
        scale_layout: Fp8ScaleLayout,
    },
    /// `weight_packed` U8 `[out, in / 2]` (two E2M1 codes a byte, the even column in the low
    /// nibble) and `weight_scale` U8 `[out, in / 32]` (E8M0 exponents).
    Fp4 {
        weight_packed: TensorView<'a>,
        weight_scale: TensorView<'a>,
    },
}

/// A quantized linear as one component-format weight: the format poot decodes it in, its
/// logical `[out, in]` shape, and the stored tensor of each component the format reads, by role
/// and in the format's order (`poot_formats::PackedFormat::components`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedLinear<'a> {
    pub format: PackedFormat,
    pub shape: MatrixShape,
    pub components: Vec<(&'static str, TensorView<'a>)>,
}

/// Which sibling holds an FP8 weight's scale. In the checkpoints that use either name the
/// stored value multiplies the E4M3 value (`weight_scale_inv` is the inverse of the
/// quantization scale, so it too is the dequantization multiplier).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8ScaleName {
    WeightScale,
    WeightScaleInv,
}

/// How an FP8 scale tensor covers its weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8ScaleLayout {
    /// One scale for the whole tensor.
    PerTensor,
    /// One scale per output row.
    PerChannel,
    /// One scale per `[rows, cols]` block, edge blocks partial.
    Block { rows: u64, cols: u64 },
}

/// Packed int4 values per int32 word.
const INT4_PER_WORD: u64 = 8;

/// The weight of the linear at `prefix`: packed components when `{prefix}.qweight` (GPTQ,
/// AWQ) or `{prefix}.weight_packed` (MXFP4) exists, an FP8 weight with its scale, or the dense
/// `{prefix}.weight`.
pub fn linear<'a>(
    store: &'a WeightStore,
    quantization: Option<&QuantizationConfig>,
    prefix: &str,
) -> Result<LinearWeight<'a>, LoadError> {
    if store.contains(&format!("{prefix}.weight_packed")) {
        return match quantization {
            Some(q) if q.method == QuantMethod::Mxfp4 => {
                fp4(store, q, prefix).map(|l| LinearWeight::Quantized(Box::new(l)))
            }
            _ => Err(QuantError::ComponentsWithoutConfig {
                prefix: prefix.to_owned(),
            }
            .into()),
        };
    }
    if store.contains(&format!("{prefix}.qweight")) {
        return match quantization {
            Some(q) if q.method == QuantMethod::Gptq => {
                gptq(store, q, prefix).map(|l| LinearWeight::Quantized(Box::new(l)))
            }
            Some(q) if q.method == QuantMethod::Awq => {
                awq(store, q, prefix).map(|l| LinearWeight::Quantized(Box::new(l)))
            }
            _ => Err(QuantError::ComponentsWithoutConfig {
                prefix: prefix.to_owned(),
            }
            .into()),
        };
    }
    let weight = store.tensor(&format!("{prefix}.weight"))?;
    if is_fp8(weight.stored_type()) {
        return fp8(store, quantization, prefix, weight)
            .map(|l| LinearWeight::Quantized(Box::new(l)));
    }
    Ok(LinearWeight::Dense(weight))
}

pub(crate) fn is_fp8(t: StoredType) -> bool {
    matches!(t, StoredType::Dense(DenseType::F8E4M3 | DenseType::F8E5M2))
}

fn component<'a>(
    store: &'a WeightStore,
    prefix: &str,
    component: &'static str,
) -> Result<TensorView<'a>, LoadError> {
    store.get(&format!("{prefix}.{component}")).ok_or_else(|| {
        QuantError::MissingComponent {
            prefix: prefix.to_owned(),
            component,
        }
        .into()
    })
}

fn expect_type(
    view: &TensorView<'_>,
    allowed: &[DenseType],
    expected: &'static str,
) -> Result<(), LoadError> {
    match view.stored_type() {
        StoredType::Dense(d) if allowed.contains(&d) => Ok(()),
        found => Err(QuantError::ComponentType {
            tensor: view.name().to_owned(),
            expected,
            found,
        }
        .into()),
    }
}

fn expect_shape(view: &TensorView<'_>, expected: &[u64]) -> Result<(), LoadError> {
    if view.shape() == expected {
        Ok(())
    } else {
        Err(QuantError::ComponentShape {
            tensor: view.name().to_owned(),
            expected: expected.to_vec(),
            found: view.shape().to_vec(),
        }
        .into())
    }
}

/// `[rows, cols]` of a rank-2 component.
fn matrix(view: &TensorView<'_>) -> Result<(u64, u64), LoadError> {
    match *view.shape() {
        [rows, cols] => Ok((rows, cols)),
        _ => Err(QuantError::ComponentShape {
            tensor: view.name().to_owned(),
            expected: vec![],
            found: view.shape().to_vec(),
        }
        .into()),
    }
}

const SCALE_TYPES: &[DenseType] = &[DenseType::F16, DenseType::BF16, DenseType::F32];

fn n_groups(in_features: u64, group_size: Option<u64>) -> u64 {
    group_size.map_or(1, |g| in_features.div_ceil(g))
}

fn gptq<'a>(
    store: &'a WeightStore,
    q: &QuantizationConfig,
    prefix: &str,
) -> Result<QuantizedLinear<'a>, LoadError> {
    let qweight = component(store, prefix, "qweight")?;
    let qzeros = component(store, prefix, "qzeros")?;
    let scales = component(store, prefix, "scales")?;
    let g_idx = store.get(&format!("{prefix}.g_idx"));
    expect_type(&qweight, &[DenseType::I32], "I32")?;
    expect_type(&qzeros, &[DenseType::I32], "I32")?;
    expect_type(&scales, SCALE_TYPES, "F16, BF16 or F32")?;
    let (packed_rows, out_features) = matrix(&qweight)?;
    let in_features = packed_rows * INT4_PER_WORD;
    let groups = n_groups(in_features, q.group_size);
    expect_shape(&scales, &[groups, out_features])?;
    expect_shape(&qzeros, &[groups, out_features.div_ceil(INT4_PER_WORD)])?;
    match &g_idx {
        Some(g) => {
            expect_type(g, &[DenseType::I32], "I32")?;
            expect_shape(g, &[in_features])?;
        }
        None if q.act_order => {
            return Err(QuantError::MissingComponent {
                prefix: prefix.to_owned(),
                component: "g_idx",
            }
            .into());
        }
        None => {}
    }
    Ok(QuantizedLinear {
        prefix: prefix.to_owned(),
        method: QuantMethod::Gptq,
        bits: q.bits,
        group_size: q.group_size,
        act_order: q.act_order,
        in_features,
        out_features,
        components: QuantComponents::Gptq {
            qweight,
            qzeros,
            scales,
            g_idx,
        },
    })
}

fn awq<'a>(
    store: &'a WeightStore,
    q: &QuantizationConfig,
    prefix: &str,
) -> Result<QuantizedLinear<'a>, LoadError> {
    let qweight = component(store, prefix, "qweight")?;
    let qzeros = component(store, prefix, "qzeros")?;
    let scales = component(store, prefix, "scales")?;
    expect_type(&qweight, &[DenseType::I32], "I32")?;
    expect_type(&qzeros, &[DenseType::I32], "I32")?;
    expect_type(&scales, SCALE_TYPES, "F16, BF16 or F32")?;
    let (in_features, packed_cols) = matrix(&qweight)?;
    let out_features = packed_cols * INT4_PER_WORD;
    let groups = n_groups(in_features, q.group_size);
    expect_shape(&scales, &[groups, out_features])?;
    expect_shape(&qzeros, &[groups, packed_cols])?;
    Ok(QuantizedLinear {
        prefix: prefix.to_owned(),
        method: QuantMethod::Awq,
        bits: q.bits,
        group_size: q.group_size,
        act_order: false,
        in_features,
        out_features,
        components: QuantComponents::Awq {
            qweight,
            qzeros,
            scales,
        },
    })
}

fn fp8<'a>(
    store: &'a WeightStore,
    q: Option<&QuantizationConfig>,
    prefix: &str,
    weight: TensorView<'a>,
) -> Result<QuantizedLinear<'a>, LoadError> {
    let (scale, scale_name) = match (
        store.get(&format!("{prefix}.weight_scale_inv")),
        store.get(&format!("{prefix}.weight_scale")),
    ) {
        (Some(s), _) => (s, Fp8ScaleName::WeightScaleInv),
        (None, Some(s)) => (s, Fp8ScaleName::WeightScale),
        (None, None) => {
            return Err(QuantError::Fp8WithoutScale {
                tensor: weight.name().to_owned(),
            }
            .into());
        }
    };
    expect_type(&weight, &[DenseType::F8E4M3], "F8_E4M3")?;
    expect_type(&scale, SCALE_TYPES, "F16, BF16 or F32")?;
    let (out_features, in_features) = matrix(&weight)?;
    let block = q.and_then(|q| q.weight_block_size);
    // With a block size configured, a scale that fits the block layout is per block, even a
    // [1, 1] one (a weight no larger than one block).
    let scale_layout = match (scale.shape(), block) {
        ([r, c], Some([br, bc]))
            if *r == out_features.div_ceil(br) && *c == in_features.div_ceil(bc) =>
        {
            Fp8ScaleLayout::Block { rows: br, cols: bc }
        }
        ([] | [1] | [1, 1], _) => Fp8ScaleLayout::PerTensor,
        ([o] | [o, 1], _) if *o == out_features => Fp8ScaleLayout::PerChannel,
        _ => {
            return Err(QuantError::Fp8ScaleShape {
                tensor: scale.name().to_owned(),
                weight_shape: weight.shape().to_vec(),
                scale_shape: scale.shape().to_vec(),
                block,
            }
            .into());
        }
    };
    Ok(QuantizedLinear {
        prefix: prefix.to_owned(),
        method: QuantMethod::Fp8,
        bits: 8,
        group_size: None,
        act_order: false,
        in_features,
        out_features,
        components: QuantComponents::Fp8 {
            weight,
            scale,
            scale_name,
            scale_layout,
        },
    })
}

fn fp4<'a>(
    store: &'a WeightStore,
    q: &QuantizationConfig,
    prefix: &str,
) -> Result<QuantizedLinear<'a>, LoadError> {
    let weight_packed = component(store, prefix, "weight_packed")?;
    let weight_scale = component(store, prefix, "weight_scale")?;
    expect_type(&weight_packed, &[DenseType::U8], "U8")?;
    expect_type(&weight_scale, &[DenseType::U8], "U8 (E8M0 exponents)")?;
    let (out_features, packed_cols) = matrix(&weight_packed)?;
    let in_features = packed_cols * 2;
    expect_shape(
        &weight_scale,
        &[out_features, in_features.div_ceil(FP4_GROUP_ELEMS as u64)],
    )?;
    Ok(QuantizedLinear {
        prefix: prefix.to_owned(),
        method: QuantMethod::Mxfp4,
        bits: 4,
        group_size: q.group_size,
        act_order: false,
        in_features,
        out_features,
        components: QuantComponents::Fp4 {
            weight_packed,
            weight_scale,
        },
    })
}

impl<'a> QuantizedLinear<'a> {
    /// This linear as one component-format weight, its components as stored. GPTQ without
    /// act-order leaves `g_idx` out when it is the default grouping (`k / group`) and reads it
    /// otherwise, so the decode always follows the stored groups.
    pub fn packed(&self) -> Result<PackedLinear<'a>, QuantError> {
        let unsupported = |what: String, supported| QuantError::UnsupportedLayout {
            prefix: self.prefix.clone(),
            what,
            supported,
        };
        let dims = |v: &TensorView<'_>| -> Result<usize, QuantError> {
            usize::try_from(v.shape().iter().product::<u64>()).map_err(|_| {
                unsupported(
                    format!("`{}`'s size", v.name()),
                    "a size this host addresses",
                )
            })
        };
        let group = || match self.group_size {
            None => Ok(GroupSize::Channel),
            Some(g) => u32::try_from(g)
                .ok()
                .and_then(NonZeroU32::new)
                .map(GroupSize::Elems)
                .ok_or_else(|| unsupported(format!("group size {g}"), "a group size below 2^32")),
        };
        let f16_scales = |scales: &TensorView<'_>| match scales.stored_type() {
            StoredType::Dense(DenseType::F16) => Ok(()),
            other => Err(unsupported(
                format!("{} scales", other.name()),
                "GPTQ and AWQ scales in F16",
            )),
        };
        let (n, k) = (
            usize::try_from(self.out_features),
            usize::try_from(self.in_features),
        );
        let (Ok(n_rows), Ok(k_cols)) = (n, k) else {
            return Err(unsupported(
                "its shape".into(),
                "a size this host addresses",
            ));
        };
        let shape = MatrixShape::new(n_rows, k_cols);
        let (format, components) = match &self.components {
            QuantComponents::Gptq {
                qweight,
                qzeros,
                scales,
                g_idx,
            } => {
                f16_scales(scales)?;
                let group = group()?;
                let reads_g_idx = match g_idx {
                    Some(g) => self.act_order || !default_groups(g, group, dims(g)?),
                    None => false,
                };
                let format = PackedFormat::Gptq(GptqFormat {
                    group,
                    act_order: reads_g_idx,
                    zeros: GptqZeros::V1PlusOne,
                });
                let mut c = vec![
                    ("qweight", qweight.clone()),
                    ("qzeros", qzeros.clone()),
                    ("scales", scales.clone()),
                ];
                if let (true, Some(g)) = (reads_g_idx, g_idx) {
                    c.push(("g_idx", g.clone()));
                }
                (format, c)
            }
            QuantComponents::Awq {
                qweight,
                qzeros,
                scales,
            } => {
                f16_scales(scales)?;
                let format = PackedFormat::Awq(AwqFormat { group: group()? });
                (
                    format,
                    vec![
                        ("qweight", qweight.clone()),
                        ("qzeros", qzeros.clone()),
                        ("scales", scales.clone()),
                    ],
                )
            }
            QuantComponents::Fp8 {
                weight,
                scale,
                scale_layout,
                ..
            } => {
                let scale_type = match scale.stored_type() {
                    StoredType::Dense(DenseType::BF16) => ScaleType::BF16,
                    StoredType::Dense(DenseType::F32) => ScaleType::F32,
                    other => {
                        return Err(unsupported(
                            format!("{} FP8 scales", other.name()),
                            "FP8 scales in BF16 or F32",
                        ));
                    }
                };
                let block = FP8_BLOCK_ELEMS as u64;
                let (scaling, role) = match *scale_layout {
                    Fp8ScaleLayout::PerChannel => (Fp8Scaling::PerChannel, "weight_scale"),
                    Fp8ScaleLayout::Block { rows, cols } if rows == block && cols == block => {
                        (Fp8Scaling::Block128, "weight_scale_inv")
                    }
                    Fp8ScaleLayout::Block { rows, cols } => {
                        return Err(unsupported(
                            format!("FP8 scale blocks of {rows}x{cols}"),
                            "FP8 scales per tensor, per output channel or per 128x128 block",
                        ));
                    }
                    Fp8ScaleLayout::PerTensor => (Fp8Scaling::PerTensor, "weight_scale"),
                };
                (
                    PackedFormat::Fp8(Fp8Format {
                        scaling,
                        scale_type,
                    }),
                    vec![("weight", weight.clone()), (role, scale.clone())],
                )
            }
            QuantComponents::Fp4 {
                weight_packed,
                weight_scale,
            } => {
                if self.group_size != Some(FP4_GROUP_ELEMS as u64) {
                    return Err(unsupported(
                        format!("E2M1 scale groups of {:?}", self.group_size),
                        "one E8M0 scale per 32 input columns",
                    ));
                }
                (
                    PackedFormat::Fp4E2M1,
                    vec![
                        ("weight_packed", weight_packed.clone()),
                        ("weight_scale", weight_scale.clone()),
                    ],
                )
            }
        };
        // The component shapes the loader checked are the ones the format decodes.
        format
            .components(shape)
            .map_err(|e| unsupported(e.to_string(), "shapes the component format stores"))?;
        Ok(PackedLinear {
            format,
            shape,
            components,
        })
    }
}

/// Whether a GPTQ `g_idx` (`k_cols` i32 entries) puts column `k` in group `k / group`, the
/// grouping the decode assumes without it.
fn default_groups(g_idx: &TensorView<'_>, group: GroupSize, k_cols: usize) -> bool {
    let bytes = g_idx.bytes();
    bytes.len() == 4 * k_cols
        && bytes.chunks_exact(4).enumerate().all(|(k, w)| {
            i64::from(i32::from_le_bytes([w[0], w[1], w[2], w[3]])) == group.group_of(k) as i64
        })
}

/// Checks every packed linear and FP8 tensor of a Hugging Face checkpoint at load, so a
/// layout problem is reported before any family binds weights: each `X.qweight` or
/// `X.weight_packed` must form a valid quantized linear `X`, and each FP8 tensor must be an
/// `X.weight` with a scale sibling.
pub(crate) fn check_all(
    store: &WeightStore,
    quantization: Option<&QuantizationConfig>,
) -> Result<(), LoadError> {
    for view in store.iter() {
        let name = view.name();
        if let Some(prefix) = name
            .strip_suffix(".qweight")
            .or_else(|| name.strip_suffix(".weight_packed"))
        {
            linear(store, quantization, prefix)?;
        } else if is_fp8(view.stored_type()) {
            match name.strip_suffix(".weight") {
                Some(prefix) => {
                    linear(store, quantization, prefix)?;
                }
                None => {
                    return Err(QuantError::Fp8WithoutScale {
                        tensor: name.to_owned(),
                    }
                    .into());
                }
            }
        }
    }
    Ok(())
}
