//! A Hugging Face linear layer's weight as stored: dense, or the component tensors of a packed
//! method, checked against each other. Decoding belongs to `poot-formats`.

use poot_formats::{DenseType, StoredType};

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

/// The weight of the linear at `prefix`: packed components when `{prefix}.qweight` exists,
/// an FP8 weight with its scale, or the dense `{prefix}.weight`.
pub fn linear<'a>(
    store: &'a WeightStore,
    quantization: Option<&QuantizationConfig>,
    prefix: &str,
) -> Result<LinearWeight<'a>, LoadError> {
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
    let scale_layout = match (scale.shape(), block) {
        ([] | [1] | [1, 1], _) => Fp8ScaleLayout::PerTensor,
        ([o] | [o, 1], _) if *o == out_features => Fp8ScaleLayout::PerChannel,
        ([r, c], Some([br, bc]))
            if *r == out_features.div_ceil(br) && *c == in_features.div_ceil(bc) =>
        {
            Fp8ScaleLayout::Block { rows: br, cols: bc }
        }
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

/// Checks every packed linear and FP8 tensor of a Hugging Face checkpoint at load, so a
/// layout problem is reported before any family binds weights: each `X.qweight` must form a
/// valid quantized linear `X`, and each FP8 tensor must be an `X.weight` with a scale sibling.
pub(crate) fn check_all(
    store: &WeightStore,
    quantization: Option<&QuantizationConfig>,
) -> Result<(), LoadError> {
    for view in store.iter() {
        let name = view.name();
        if let Some(prefix) = name.strip_suffix(".qweight") {
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
