//! Every packed weight format poot reads, as data: GGUF block formats and the Hugging Face packed
//! layouts (GPTQ, AWQ, FP8 E4M3 with scales, E2M1 FP4 with E8M0 scales), with the component
//! tensors each is stored as.

use std::fmt;
use std::num::NonZeroU32;

use crate::components::{ComponentInfo, ComponentSpec, MatrixShape, Presence};
use crate::error::MatrixDim;
use crate::{BlockFormat, DenseType, FormatError, GgmlType};

/// A packed weight format. A packed weight is a logical `[N, K]` matrix (see [`MatrixShape`])
/// stored as one or more component tensors ([`PackedFormat::components`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PackedFormat {
    /// A GGUF block format: each row is `K / block_elems` whole blocks. One component, `weight`,
    /// the rows' bytes.
    Block(BlockFormat),
    /// GPTQ int4 (AutoGPTQ / GPTQModel / optimum layout).
    ///
    /// - `qweight` I32 `[K/8, N]`: word `(r, n)` packs input columns `k = 8r + i` of output row
    ///   `n`, column `8r + i` in bits `4i..4i+4` (low nibble first along K).
    /// - `qzeros` I32 `[G, N/8]`: word `(g, c)` packs the zero points of rows `n = 8c + j` in bits
    ///   `4j..4j+4`.
    /// - `scales` F16 `[G, N]`.
    /// - `g_idx` I32 `[K]`: the group of each input column (required with act-order, where the
    ///   quantizer visited columns in a permuted order; otherwise optional, default `k / group`).
    ///
    /// `G = ceil(K / group)` (1 for a per-channel group). The weight is
    /// `W[n, k] = scales[g, n] * (q - zero)` with `g = g_idx[k]`, computed as `f32(scale) *
    /// f32(q - zero)` (exact: an f16 times an integer of at most 5 bits fits f32's significand).
    /// See [`GptqZeros`] for what `zero` is.
    Gptq(GptqFormat),
    /// AWQ int4 (AutoAWQ `GEMM` layout).
    ///
    /// - `qweight` I32 `[K, N/8]`: word `(k, c)` packs output rows `n = 8c + j` of input column
    ///   `k`, row `8c + j` in nibble `AWQ_NIBBLE_OF_ROW[j]` (AWQ packs the 8 values in the order
    ///   `[0, 2, 4, 6, 1, 3, 5, 7]`, so row `j` sits in nibble `[0, 4, 1, 5, 2, 6, 3, 7][j]`).
    /// - `qzeros` I32 `[G, N/8]`, packed the same way.
    /// - `scales` F16 `[G, N]`.
    ///
    /// `G = ceil(K / group)`; `W[n, k] = scales[k / group, n] * (q - zero)` with the stored zero
    /// (no offset), computed as for GPTQ.
    Awq(AwqFormat),
    /// FP8 E4M3 (OCP "fn") weights with f32 or bf16 scales; see [`Fp8Scaling`].
    /// `W[n, k] = f32(weight[n, k]) * f32(scale)`, one f32 multiply.
    Fp8(Fp8Format),
    /// E2M1 FP4 with one E8M0 scale per 32 consecutive input columns (OCP MX layout, as
    /// compressed-tensors stores MXFP4):
    ///
    /// - `weight_packed` U8 `[N, K/2]`: two codes per byte, column `2i` in the low nibble and
    ///   `2i + 1` in the high nibble.
    /// - `weight_scale` U8 `[N, K/32]`: E8M0 exponents, `2^(e - 127)` (0xff is NaN).
    ///
    /// `W[n, k] = e2m1(code) * e8m0(scale[n, k / 32])`, exact in f32. (GGUF's MXFP4 block is the
    /// same arithmetic in another layout: `PackedFormat::Block(BlockFormat::MXFP4)`.)
    Fp4E2M1,
}

/// GPTQ's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GptqFormat {
    /// Input columns per scale/zero group (`group_size` in `quantize_config.json`).
    pub group: GroupSize,
    /// `desc_act`: the checkpoint's `g_idx` permutes columns into groups, so it must be present.
    pub act_order: bool,
    /// How the stored zero points relate to the ones the decode subtracts.
    pub zeros: GptqZeros,
}

/// AWQ's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AwqFormat {
    /// Input columns per scale/zero group (`q_group_size` / `group_size`).
    pub group: GroupSize,
}

/// How many input columns share one scale and zero point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupSize {
    /// One group spans all K columns (GPTQ's `group_size: -1`).
    Channel,
    /// Groups of this many consecutive columns (the last may be shorter).
    Elems(NonZeroU32),
}

impl GroupSize {
    /// Groups along K for `k_cols` input columns: `ceil(K / group)`, or 1 per channel.
    pub fn n_groups(self, k_cols: usize) -> usize {
        match self {
            GroupSize::Channel => 1,
            GroupSize::Elems(g) => k_cols.div_ceil(g.get() as usize),
        }
    }

    /// The group of input column `k_col` when no `g_idx` reorders them.
    pub fn group_of(self, k_col: usize) -> usize {
        match self {
            GroupSize::Channel => 0,
            GroupSize::Elems(g) => k_col / g.get() as usize,
        }
    }
}

/// The zero-point convention of a GPTQ checkpoint (`checkpoint_format` in its quantization
/// config).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GptqZeros {
    /// `"gptq"` (v1, what AutoGPTQ and most published checkpoints store): the quantizer saved
    /// `zero - 1`, so the decode adds 1 to the stored nibble (a zero in 1..=16, no wrap), as
    /// AutoGPTQ's reference dequantization does. A symmetric 4-bit checkpoint stores 7 and
    /// decodes with zero 8.
    V1PlusOne,
    /// `"gptq_v2"` (GPTQModel): the stored nibble is the zero point.
    V2Exact,
}

/// FP8 scale granularity and component names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Scaling {
    /// `weight` F8_E4M3 `[N, K]` and `weight_scale` `[N, 1]` (compressed-tensors "channel"
    /// strategy): one scale per output row. A stored `[N]` is accepted as the same bytes.
    PerChannel,
    /// `weight` F8_E4M3 `[N, K]` and `weight_scale` `[1]` (compressed-tensors "tensor"
    /// strategy): one scale for the whole weight. A stored `[]` or `[1, 1]` is the same bytes.
    PerTensor,
    /// `weight` F8_E4M3 `[N, K]` and `weight_scale_inv` `[ceil(N/128), ceil(K/128)]` (DeepSeek-V3
    /// / Qwen FP8 `weight_block_size: [128, 128]`): one scale per 128x128 tile. Despite its name
    /// the stored value multiplies the weight.
    Block128,
}

/// The dtype an FP8 checkpoint stores its scales in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleType {
    BF16,
    F32,
}

impl ScaleType {
    pub fn dense_type(self) -> DenseType {
        match self {
            ScaleType::BF16 => DenseType::BF16,
            ScaleType::F32 => DenseType::F32,
        }
    }
}

/// FP8 E4M3's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8Format {
    pub scaling: Fp8Scaling,
    pub scale_type: ScaleType,
}

/// Rows and columns of one FP8 block-scale tile.
pub const FP8_BLOCK_ELEMS: usize = 128;
/// Input columns sharing one E8M0 scale in [`PackedFormat::Fp4E2M1`].
pub const FP4_GROUP_ELEMS: usize = 32;
/// Int4 values per packed I32 word (GPTQ, AWQ).
pub const INT4_PER_WORD: usize = 8;
/// AWQ's nibble for row `j` of a group of 8 packed output rows (the inverse of its packing order
/// `[0, 2, 4, 6, 1, 3, 5, 7]`).
pub const AWQ_NIBBLE_OF_ROW: [u32; 8] = [0, 4, 1, 5, 2, 6, 3, 7];

impl fmt::Display for PackedFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = |g: GroupSize| match g {
            GroupSize::Channel => "per-channel".to_string(),
            GroupSize::Elems(n) => format!("group {n}"),
        };
        match self {
            PackedFormat::Block(b) => write!(f, "GGUF {}", b.name()),
            PackedFormat::Gptq(g) => write!(
                f,
                "GPTQ int4{} ({}, {} zeros)",
                if g.act_order { ", act-order" } else { "" },
                group(g.group),
                match g.zeros {
                    GptqZeros::V1PlusOne => "v1",
                    GptqZeros::V2Exact => "v2",
                }
            ),
            PackedFormat::Awq(a) => write!(f, "AWQ int4 ({})", group(a.group)),
            PackedFormat::Fp8(p) => write!(
                f,
                "FP8 E4M3, {} {} scale",
                match p.scaling {
                    Fp8Scaling::PerChannel => "per-channel",
                    Fp8Scaling::PerTensor => "per-tensor",
                    Fp8Scaling::Block128 => "128x128 block",
                },
                p.scale_type.dense_type().name()
            ),
            PackedFormat::Fp4E2M1 => f.write_str("E2M1 (FP4), per-32 E8M0 scale"),
        }
    }
}

impl GgmlType {
    /// The packed format of a GGUF tensor type: `Ok(None)` for the dense types (F32, F16, BF16,
    /// F64 and the integers), `Ok(Some(..))` for a block format poot decodes, and
    /// [`FormatError::Unsupported`] for the rest, so a reader names the type it refuses.
    pub fn packed_format(self) -> Result<Option<PackedFormat>, FormatError> {
        let block = match self {
            GgmlType::F32
            | GgmlType::F16
            | GgmlType::BF16
            | GgmlType::F64
            | GgmlType::I8
            | GgmlType::I16
            | GgmlType::I32
            | GgmlType::I64 => return Ok(None),
            GgmlType::Q8_1
            | GgmlType::Q8_K
            | GgmlType::IQ2_XXS
            | GgmlType::IQ2_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
            | GgmlType::NVFP4
            | GgmlType::Q1_0 => {
                return Err(FormatError::Unsupported {
                    ggml_type: self,
                    id: self.id(),
                });
            }
            GgmlType::Q4_0 => BlockFormat::Q4_0,
            GgmlType::Q4_1 => BlockFormat::Q4_1,
            GgmlType::Q5_0 => BlockFormat::Q5_0,
            GgmlType::Q5_1 => BlockFormat::Q5_1,
            GgmlType::Q8_0 => BlockFormat::Q8_0,
            GgmlType::Q2_K => BlockFormat::Q2_K,
            GgmlType::Q3_K => BlockFormat::Q3_K,
            GgmlType::Q4_K => BlockFormat::Q4_K,
            GgmlType::Q5_K => BlockFormat::Q5_K,
            GgmlType::Q6_K => BlockFormat::Q6_K,
            GgmlType::IQ2_XS => BlockFormat::IQ2_XS,
            GgmlType::IQ3_XXS => BlockFormat::IQ3_XXS,
            GgmlType::IQ3_S => BlockFormat::IQ3_S,
            GgmlType::IQ4_NL => BlockFormat::IQ4_NL,
            GgmlType::IQ4_XS => BlockFormat::IQ4_XS,
            GgmlType::MXFP4 => BlockFormat::MXFP4,
        };
        Ok(Some(PackedFormat::Block(block)))
    }
}

impl PackedFormat {
    /// The component tensors a `shape` weight of this format is stored as. Fails when the shape
    /// is not a multiple of what the format packs together.
    pub fn components(&self, shape: MatrixShape) -> Result<Vec<ComponentSpec>, FormatError> {
        let MatrixShape {
            n_rows: n,
            k_cols: k,
        } = shape;
        let spec = |name, dtype, dims: Vec<usize>| ComponentSpec {
            name,
            dtype,
            dims,
            presence: Presence::Required,
        };
        let specs = match *self {
            PackedFormat::Block(b) => {
                self.require_multiple(MatrixDim::Cols, k, b.block_elems())?;
                let row_bytes = b.row_bytes(k).ok_or(FormatError::SizeOverflow {
                    format: *self,
                    n_rows: n,
                    k_cols: k,
                })?;
                vec![spec("weight", DenseType::U8, vec![n, row_bytes])]
            }
            PackedFormat::Gptq(g) => {
                self.require_multiple(MatrixDim::Cols, k, INT4_PER_WORD)?;
                self.require_multiple(MatrixDim::Rows, n, INT4_PER_WORD)?;
                let groups = g.group.n_groups(k);
                let presence = if g.act_order {
                    Presence::Required
                } else {
                    Presence::Optional
                };
                vec![
                    spec("qweight", DenseType::I32, vec![k / INT4_PER_WORD, n]),
                    spec("qzeros", DenseType::I32, vec![groups, n / INT4_PER_WORD]),
                    spec("scales", DenseType::F16, vec![groups, n]),
                    ComponentSpec {
                        name: "g_idx",
                        dtype: DenseType::I32,
                        dims: vec![k],
                        presence,
                    },
                ]
            }
            PackedFormat::Awq(a) => {
                self.require_multiple(MatrixDim::Rows, n, INT4_PER_WORD)?;
                let groups = a.group.n_groups(k);
                vec![
                    spec("qweight", DenseType::I32, vec![k, n / INT4_PER_WORD]),
                    spec("qzeros", DenseType::I32, vec![groups, n / INT4_PER_WORD]),
                    spec("scales", DenseType::F16, vec![groups, n]),
                ]
            }
            PackedFormat::Fp8(p) => {
                let scale = match p.scaling {
                    Fp8Scaling::PerChannel => {
                        spec("weight_scale", p.scale_type.dense_type(), vec![n, 1])
                    }
                    Fp8Scaling::PerTensor => {
                        spec("weight_scale", p.scale_type.dense_type(), vec![1])
                    }
                    Fp8Scaling::Block128 => spec(
                        "weight_scale_inv",
                        p.scale_type.dense_type(),
                        vec![n.div_ceil(FP8_BLOCK_ELEMS), k.div_ceil(FP8_BLOCK_ELEMS)],
                    ),
                };
                vec![spec("weight", DenseType::F8E4M3, vec![n, k]), scale]
            }
            PackedFormat::Fp4E2M1 => {
                self.require_multiple(MatrixDim::Cols, k, FP4_GROUP_ELEMS)?;
                vec![
                    spec("weight_packed", DenseType::U8, vec![n, k / 2]),
                    spec("weight_scale", DenseType::U8, vec![n, k / FP4_GROUP_ELEMS]),
                ]
            }
        };
        for s in &specs {
            if s.n_bytes().is_none() {
                return Err(FormatError::SizeOverflow {
                    format: *self,
                    n_rows: n,
                    k_cols: k,
                });
            }
        }
        Ok(specs)
    }

    /// Checks the components a checkpoint holds against what a `shape` weight of this format
    /// needs: each required component is present, and each present one has the format's dtype and
    /// shape. Size-1 dimensions are ignored in the shape comparison (`[N, 1]` and `[N]` describe
    /// the same bytes). Components the format does not name are not looked at.
    pub fn check_components(
        &self,
        shape: MatrixShape,
        found: &[ComponentInfo<'_>],
    ) -> Result<(), FormatError> {
        for spec in self.components(shape)? {
            let Some(info) = found.iter().find(|c| c.name == spec.name) else {
                match spec.presence {
                    Presence::Required => {
                        return Err(FormatError::MissingComponent {
                            format: *self,
                            component: spec.name,
                        });
                    }
                    Presence::Optional => continue,
                }
            };
            if info.dtype != spec.dtype {
                return Err(FormatError::ComponentDtype {
                    format: *self,
                    component: spec.name,
                    expected: spec.dtype,
                    got: info.dtype,
                });
            }
            let squeeze =
                |dims: &[usize]| dims.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
            if squeeze(info.dims) != squeeze(&spec.dims) {
                return Err(FormatError::ComponentShape {
                    format: *self,
                    component: spec.name,
                    expected: spec.dims,
                    got: info.dims.to_vec(),
                });
            }
        }
        Ok(())
    }

    /// The logical shape a checkpoint's components describe, read from the main packed component
    /// (`weight`, `qweight` or `weight_packed`). Check the result with
    /// [`PackedFormat::check_components`].
    pub fn infer_shape(&self, found: &[ComponentInfo<'_>]) -> Result<MatrixShape, FormatError> {
        let main = match self {
            PackedFormat::Block(_) | PackedFormat::Fp8(_) => "weight",
            PackedFormat::Gptq(_) | PackedFormat::Awq(_) => "qweight",
            PackedFormat::Fp4E2M1 => "weight_packed",
        };
        let info = found
            .iter()
            .find(|c| c.name == main)
            .ok_or(FormatError::MissingComponent {
                format: *self,
                component: main,
            })?;
        let rank_error = || FormatError::ComponentRank {
            format: *self,
            component: main,
            dims: info.dims.to_vec(),
        };
        let &[d0, d1] = info.dims else {
            return Err(rank_error());
        };
        let shape = match self {
            PackedFormat::Block(b) => {
                if !d1.is_multiple_of(b.block_bytes()) {
                    return Err(rank_error());
                }
                MatrixShape::new(
                    d0,
                    (d1 / b.block_bytes())
                        .checked_mul(b.block_elems())
                        .ok_or_else(rank_error)?,
                )
            }
            PackedFormat::Gptq(_) => {
                MatrixShape::new(d1, d0.checked_mul(INT4_PER_WORD).ok_or_else(rank_error)?)
            }
            PackedFormat::Awq(_) => {
                MatrixShape::new(d1.checked_mul(INT4_PER_WORD).ok_or_else(rank_error)?, d0)
            }
            PackedFormat::Fp8(_) => MatrixShape::new(d0, d1),
            PackedFormat::Fp4E2M1 => {
                MatrixShape::new(d0, d1.checked_mul(2).ok_or_else(rank_error)?)
            }
        };
        Ok(shape)
    }

    fn require_multiple(
        &self,
        dim: MatrixDim,
        elems: usize,
        multiple: usize,
    ) -> Result<(), FormatError> {
        if elems.is_multiple_of(multiple) {
            Ok(())
        } else {
            Err(FormatError::ShapeNotDivisible {
                format: *self,
                dim,
                elems,
                multiple,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gptq(act_order: bool) -> PackedFormat {
        PackedFormat::Gptq(GptqFormat {
            group: GroupSize::Elems(NonZeroU32::new(128).expect("128 is nonzero")),
            act_order,
            zeros: GptqZeros::V1PlusOne,
        })
    }

    #[test]
    fn ggml_mapping_is_total_and_classified() {
        let mut packed = 0;
        for t in GgmlType::ALL {
            match t.packed_format() {
                Ok(Some(PackedFormat::Block(b))) => {
                    assert_eq!(b.ggml_type(), t);
                    packed += 1;
                }
                Ok(Some(other)) => panic!("{t:?} maps to non-block {other}"),
                Ok(None) => assert_eq!(t.block_elems(), 1, "{t:?} is dense"),
                Err(FormatError::Unsupported { ggml_type, id }) => {
                    assert_eq!((ggml_type, id), (t, t.id()));
                    assert!(t.block_elems() > 1);
                }
                Err(e) => panic!("{t:?}: {e}"),
            }
        }
        assert_eq!(packed, BlockFormat::ALL.len());
        for t in [
            GgmlType::Q8_1,
            GgmlType::Q8_K,
            GgmlType::IQ2_XXS,
            GgmlType::IQ2_S,
            GgmlType::IQ1_S,
            GgmlType::IQ1_M,
            GgmlType::TQ1_0,
            GgmlType::TQ2_0,
            GgmlType::NVFP4,
            GgmlType::Q1_0,
        ] {
            let e = t.packed_format().expect_err("unsupported type");
            assert!(e.to_string().contains(t.name()), "{e}");
        }
    }

    #[test]
    fn gptq_components_follow_the_shape() {
        let specs = gptq(true)
            .components(MatrixShape::new(64, 256))
            .expect("valid shape");
        let got: Vec<_> = specs
            .iter()
            .map(|s| (s.name, s.dtype, s.dims.clone(), s.presence))
            .collect();
        assert_eq!(
            got,
            vec![
                ("qweight", DenseType::I32, vec![32, 64], Presence::Required),
                ("qzeros", DenseType::I32, vec![2, 8], Presence::Required),
                ("scales", DenseType::F16, vec![2, 64], Presence::Required),
                ("g_idx", DenseType::I32, vec![256], Presence::Required),
            ]
        );
        let optional = gptq(false)
            .components(MatrixShape::new(64, 256))
            .expect("valid shape");
        assert_eq!(optional[3].presence, Presence::Optional);
        assert!(matches!(
            gptq(false).components(MatrixShape::new(60, 256)),
            Err(FormatError::ShapeNotDivisible {
                dim: MatrixDim::Rows,
                elems: 60,
                multiple: 8,
                ..
            })
        ));
    }

    #[test]
    fn fp8_block_scales_round_up() {
        let f = PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::Block128,
            scale_type: ScaleType::F32,
        });
        let specs = f.components(MatrixShape::new(130, 256)).expect("any shape");
        assert_eq!(specs[1].name, "weight_scale_inv");
        assert_eq!(specs[1].dims, vec![2, 2]);
        assert_eq!(f.to_string(), "FP8 E4M3, 128x128 block F32 scale");
    }

    #[test]
    fn check_and_infer_components() {
        let f = PackedFormat::Awq(AwqFormat {
            group: GroupSize::Elems(NonZeroU32::new(32).expect("32 is nonzero")),
        });
        let found = [
            ComponentInfo {
                name: "qweight",
                dtype: DenseType::I32,
                dims: &[64, 4],
            },
            ComponentInfo {
                name: "qzeros",
                dtype: DenseType::I32,
                dims: &[2, 4],
            },
            ComponentInfo {
                name: "scales",
                dtype: DenseType::F16,
                dims: &[2, 32],
            },
        ];
        let shape = f.infer_shape(&found).expect("qweight is present");
        assert_eq!(shape, MatrixShape::new(32, 64));
        f.check_components(shape, &found).expect("consistent");
        let wrong_dtype = [
            found[0],
            found[1],
            ComponentInfo {
                dtype: DenseType::BF16,
                ..found[2]
            },
        ];
        assert!(matches!(
            f.check_components(shape, &wrong_dtype),
            Err(FormatError::ComponentDtype {
                component: "scales",
                ..
            })
        ));
        let wrong_shape = [
            found[0],
            ComponentInfo {
                dims: &[4, 2],
                ..found[1]
            },
            found[2],
        ];
        assert!(matches!(
            f.check_components(shape, &wrong_shape),
            Err(FormatError::ComponentShape {
                component: "qzeros",
                ..
            })
        ));
        assert!(matches!(
            f.check_components(shape, &found[..2]),
            Err(FormatError::MissingComponent {
                component: "scales",
                ..
            })
        ));
        assert!(matches!(
            f.infer_shape(&[ComponentInfo {
                name: "qweight",
                dtype: DenseType::I32,
                dims: &[64]
            }]),
            Err(FormatError::ComponentRank { .. })
        ));
    }

    #[test]
    fn a_per_tensor_scale_multiplies_every_element() {
        let f = PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::PerTensor,
            scale_type: ScaleType::F32,
        });
        let shape = MatrixShape::new(2, 3);
        let specs = f.components(shape).expect("any shape");
        assert_eq!(
            (specs[1].name, specs[1].dims.clone()),
            ("weight_scale", vec![1])
        );
        // 1.0, 448, -2^-9 and NaN codes times 0.5.
        let weight = [0x38u8, 0x7e, 0x81, 0x7f, 0x00, 0x30];
        let scale = 0.5f32.to_le_bytes();
        let parts = [
            crate::ComponentBytes::new("weight", &weight),
            crate::ComponentBytes::new("weight_scale", &scale),
        ];
        let mut out = [0f32; 6];
        f.decode_matrix(shape, &parts, &mut out).expect("decodes");
        assert_eq!(out[..3], [0.5, 224.0, -(2f32.powi(-10))]);
        assert!(out[3].is_nan());
        assert_eq!(out[4..], [0.0, 0.25]);
        let found = [
            ComponentInfo {
                name: "weight",
                dtype: DenseType::F8E4M3,
                dims: &[2, 3],
            },
            ComponentInfo {
                name: "weight_scale",
                dtype: DenseType::F32,
                dims: &[],
            },
        ];
        f.check_components(shape, &found).expect("[] is [1]");
        assert_eq!(f.to_string(), "FP8 E4M3, per-tensor F32 scale");
    }

    #[test]
    fn per_channel_scale_accepts_a_flat_vector() {
        let f = PackedFormat::Fp8(Fp8Format {
            scaling: Fp8Scaling::PerChannel,
            scale_type: ScaleType::BF16,
        });
        let found = [
            ComponentInfo {
                name: "weight",
                dtype: DenseType::F8E4M3,
                dims: &[16, 48],
            },
            ComponentInfo {
                name: "weight_scale",
                dtype: DenseType::BF16,
                dims: &[16],
            },
        ];
        f.check_components(MatrixShape::new(16, 48), &found)
            .expect("[N] is [N, 1]");
    }
}
