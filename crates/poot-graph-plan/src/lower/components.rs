//! Decoding component-format weights inside kernels (GPTQ and AWQ int4, FP8 E4M3 with scales,
//! E2M1 FP4 with E8M0 scales): the expression of one element `W[n, k]` of a weight stored as
//! several component tensors, so a contraction reads the stored words and never a decoded copy.
//!
//! Each component is a read-only u32-word parameter ([`ComponentParams`]), read through
//! `Load`, `LoadByte` and `LoadHalf`. [`decode_element`] mirrors `poot-formats`' decode of each
//! layout (`gptq.rs`, `awq.rs`, `fp8.rs`, `fp4.rs`) element by element: the same f32 operations on
//! the same operands in the same order. Each format's decode is one f32 multiply of exactly
//! representable operands (an f16 scale times a small integer, an E4M3 or E2M1 value times its
//! scale), so there is nothing for a fused multiply-add to change; integers and bit patterns are
//! exact.
//!
//! A GPTQ act-order weight reads the group of column `k` from `g_idx`. A group the checkpoint has
//! no scales for is a fault, as in the oracle: the decode returns the condition as a [`Check`]
//! for the caller to turn into a fault statement, and reads a clamped group meanwhile.

use poot_formats::{
    FP4_GROUP_ELEMS, FP8_BLOCK_ELEMS, Fp8Scaling, GptqZeros, GroupSize, INT4_PER_WORD, MatrixShape,
    PackedFormat, ScaleType,
};
use poot_graph_ir::ComponentFormat;

use poot_kernel::build::{
    KernelBuilder, cast, eq, ge, load, load_byte, load_half, min, select, u32c, un,
};
use poot_kernel::ir::{Access, BinOp, Expr, Half, ParamId, Ty, UnOp, Word};

/// The fault a GPTQ `g_idx` entry naming a group past the checkpoint's scales raises.
pub const GROUP_INDEX_FAULT: u32 = crate::lower::fault::GROUP_INDEX;

/// The parameter each component of a component-format weight is read from, by role.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentParams {
    params: Vec<(&'static str, ParamId)>,
}

impl ComponentParams {
    pub fn new() -> ComponentParams {
        ComponentParams::default()
    }

    /// Adds one read-only u32-word parameter per component of a `dims` weight of `format`,
    /// named for its role; upload each component's stored bytes into its parameter.
    pub fn declare(
        format: ComponentFormat,
        dims: &[usize],
        kernel: &mut KernelBuilder,
    ) -> Result<ComponentParams, ComponentDecodeError> {
        let mut params = ComponentParams::new();
        for c in format
            .components(dims)
            .map_err(|_| ComponentDecodeError::Shape {
                format,
                dims: dims.to_vec(),
            })?
        {
            let p = kernel.param(c.name, Word::U32, Access::Read);
            params.insert(c.name, p);
        }
        Ok(params)
    }

    /// Binds component `role` to `param` (a read-only u32-word parameter holding its bytes).
    pub fn insert(&mut self, role: &'static str, param: ParamId) {
        match self.params.iter_mut().find(|(r, _)| *r == role) {
            Some(entry) => entry.1 = param,
            None => self.params.push((role, param)),
        }
    }

    pub fn get(&self, role: &str) -> Option<ParamId> {
        self.params
            .iter()
            .find(|(r, _)| *r == role)
            .map(|&(_, p)| p)
    }

    /// The bound components and their parameters, in binding order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, ParamId)> + '_ {
        self.params.iter().copied()
    }
}

/// A condition the caller must check before using a decoded value: where `out_of_range` holds
/// (a bool expression), the kernel faults with `fault`.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    pub out_of_range: Expr,
    pub fault: u32,
}

/// One decoded element and the checks that guard it.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoded {
    /// The element as f32.
    pub value: Expr,
    /// Emit each as `if out_of_range { fault }` where the value is used.
    pub checks: Vec<Check>,
}

/// A decode the planner asked for that cannot be built (a planner bug, never user input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ComponentDecodeError {
    /// The format reads a component the [`ComponentParams`] do not bind: bind every component
    /// (as [`ComponentParams::declare`] does).
    #[error("{format} reads component `{component}`, which is not bound")]
    MissingComponent {
        format: ComponentFormat,
        component: &'static str,
    },
    /// The weight's shape is not one the format stores (type inference refuses such a graph).
    #[error("{format} cannot store a weight of shape {dims:?}")]
    Shape {
        format: ComponentFormat,
        dims: Vec<usize>,
    },
}

/// The f32 expression of element `W[n, k]` (`n`, `k` u32) of a `shape` weight of `format`
/// whose components are bound in `params`, with the checks that guard it. Bit-identical to
/// `poot_formats::PackedFormat::decode_row` (NaN where it is NaN). `n` and `k` are repeated in
/// the expression; pass variables or cheap expressions.
pub fn decode_element(
    format: ComponentFormat,
    shape: MatrixShape,
    params: &ComponentParams,
    n: Expr,
    k: Expr,
) -> Result<Decoded, ComponentDecodeError> {
    let component = |name: &'static str| {
        params
            .get(name)
            .ok_or(ComponentDecodeError::MissingComponent {
                format,
                component: name,
            })
    };
    let (n_rows, k_cols) = (shape.n_rows as u32, shape.k_cols as u32);
    let words_per_row = n_rows / INT4_PER_WORD as u32;
    Ok(match format.format() {
        PackedFormat::Gptq(g) => {
            let qweight = component("qweight")?;
            let word = load(qweight, (k.clone() >> u32c(3)) * u32c(n_rows) + n.clone());
            let q = (word >> ((k.clone() & u32c(7)) << u32c(2))) & u32c(15);
            let (group, checks) = if g.act_order {
                let g_idx = component("g_idx")?;
                let n_groups = g.group.n_groups(shape.k_cols) as u32;
                let stored = load(g_idx, k);
                (
                    min(stored.clone(), u32c(n_groups.saturating_sub(1))),
                    vec![Check {
                        // A negative i32 reads as a huge u32: out of range as well.
                        out_of_range: ge(stored, u32c(n_groups)),
                        fault: GROUP_INDEX_FAULT,
                    }],
                )
            } else {
                (group_of(g.group, k), Vec::new())
            };
            let zero_word = load(
                component("qzeros")?,
                group.clone() * u32c(words_per_row) + (n.clone() >> u32c(3)),
            );
            let stored_zero = (zero_word >> ((n.clone() & u32c(7)) << u32c(2))) & u32c(15);
            let zero = match g.zeros {
                GptqZeros::V1PlusOne => stored_zero + u32c(1),
                GptqZeros::V2Exact => stored_zero,
            };
            let scale = load_half(component("scales")?, group * u32c(n_rows) + n, Half::F16);
            Decoded {
                value: scale * int4_offset(q, zero),
                checks,
            }
        }
        PackedFormat::Awq(a) => {
            let shift = awq_nibble(n.clone() & u32c(7)) << u32c(2);
            let word_col = n.clone() >> u32c(3);
            let group = group_of(a.group, k.clone());
            let q = (load(
                component("qweight")?,
                k * u32c(words_per_row) + word_col.clone(),
            ) >> shift.clone())
                & u32c(15);
            let zero = (load(
                component("qzeros")?,
                group.clone() * u32c(words_per_row) + word_col,
            ) >> shift)
                & u32c(15);
            let scale = load_half(component("scales")?, group * u32c(n_rows) + n, Half::F16);
            Decoded {
                value: scale * int4_offset(q, zero),
                checks: Vec::new(),
            }
        }
        PackedFormat::Fp8(p) => {
            let byte = load_byte(component("weight")?, n.clone() * u32c(k_cols) + k.clone());
            let (scale_param, index) = match p.scaling {
                Fp8Scaling::PerChannel => (component("weight_scale")?, n),
                Fp8Scaling::PerTensor => (component("weight_scale")?, u32c(0)),
                Fp8Scaling::Block128 => {
                    let tiles_per_row = k_cols.div_ceil(FP8_BLOCK_ELEMS as u32);
                    let log2 = FP8_BLOCK_ELEMS.trailing_zeros();
                    (
                        component("weight_scale_inv")?,
                        (n >> u32c(log2)) * u32c(tiles_per_row) + (k >> u32c(log2)),
                    )
                }
            };
            let scale = match p.scale_type {
                ScaleType::BF16 => load_half(scale_param, index, Half::Bf16),
                ScaleType::F32 => un(UnOp::BitsToF32, load(scale_param, index)),
            };
            Decoded {
                value: e4m3(byte) * scale,
                checks: Vec::new(),
            }
        }
        PackedFormat::Fp4E2M1 => {
            let bytes_per_row = k_cols / 2;
            let scales_per_row = k_cols / FP4_GROUP_ELEMS as u32;
            let byte = load_byte(
                component("weight_packed")?,
                n.clone() * u32c(bytes_per_row) + (k.clone() >> u32c(1)),
            );
            let code = (byte >> ((k.clone() & u32c(1)) << u32c(2))) & u32c(15);
            let scale = load_byte(
                component("weight_scale")?,
                n * u32c(scales_per_row) + (k >> u32c(FP4_GROUP_ELEMS.trailing_zeros())),
            );
            Decoded {
                value: e2m1(code) * e8m0(scale),
                checks: Vec::new(),
            }
        }
        PackedFormat::Block(_) => {
            return Err(ComponentDecodeError::Shape {
                format,
                dims: vec![shape.n_rows, shape.k_cols],
            });
        }
    })
}

/// The scale group of input column `k` when no `g_idx` reorders them.
fn group_of(group: GroupSize, k: Expr) -> Expr {
    match group {
        GroupSize::Channel => u32c(0),
        GroupSize::Elems(g) if g.is_power_of_two() => k >> u32c(g.trailing_zeros()),
        GroupSize::Elems(g) => k / u32c(g.get()),
    }
}

/// The nibble AWQ stores row `j` (u32 in 0..8) of a packed group of 8 in:
/// `AWQ_NIBBLE_OF_ROW[j]`, which is `j / 2 + 4 * (j % 2)`.
fn awq_nibble(j: Expr) -> Expr {
    (j.clone() >> u32c(1)) | ((j & u32c(1)) << u32c(2))
}

/// `(q - zero)` of two 4-bit codes (u32) as f32, through i32 as the reference computes it.
fn int4_offset(q: Expr, zero: Expr) -> Expr {
    cast(Ty::F32, cast(Ty::I32, q) - cast(Ty::I32, zero))
}

/// An OCP E4M3 ("fn") byte (u32 in 0..=255) as f32: `poot_formats::scalar::e4m3_to_f32`.
fn e4m3(byte: Expr) -> Expr {
    let sign = (byte.clone() & u32c(0x80)) << u32c(24);
    let exp = (byte.clone() >> u32c(3)) & u32c(15);
    let man = byte & u32c(7);
    let normal = sign.clone() | ((exp.clone() + u32c(120)) << u32c(23)) | (man.clone() << u32c(20));
    // Subnormal: man * 2^-9, exact.
    let subnormal = sign.clone()
        | un(
            UnOp::BitsToU32,
            cast(Ty::F32, man.clone()) * Expr::F32(1.0 / 512.0),
        );
    let nan = sign | u32c(0x7fc0_0000);
    let is_nan = poot_kernel::build::bin(BinOp::And, eq(exp.clone(), u32c(15)), eq(man, u32c(7)));
    un(
        UnOp::BitsToF32,
        select(eq(exp, u32c(0)), subnormal, select(is_nan, nan, normal)),
    )
}

/// An E2M1 code (low 4 bits of a u32) as f32: `poot_formats::scalar::e2m1_to_f32`. Exponent
/// field `e` (bias 1) and mantissa bit `m`: `m * 0.5` when `e = 0`, else `2^(e - 1) (1 + m/2)`.
fn e2m1(code: Expr) -> Expr {
    let sign = (code.clone() & u32c(8)) << u32c(28);
    let e = (code.clone() >> u32c(1)) & u32c(3);
    let m = code & u32c(1);
    let normal = ((e.clone() + u32c(126)) << u32c(23)) | (m.clone() << u32c(22));
    let subnormal = select(eq(m, u32c(1)), u32c(0x3f00_0000), u32c(0));
    un(
        UnOp::BitsToF32,
        sign | select(eq(e, u32c(0)), subnormal, normal),
    )
}

/// An E8M0 scale byte (u32) as f32: `2^(e - 127)`, 0xff NaN, 0 the subnormal `2^-127`
/// (`poot_formats::scalar::e8m0_to_f32`).
fn e8m0(e: Expr) -> Expr {
    let bits = select(
        eq(e.clone(), u32c(0xff)),
        u32c(0x7fc0_0000),
        select(eq(e.clone(), u32c(0)), u32c(0x0040_0000), e << u32c(23)),
    );
    un(UnOp::BitsToF32, bits)
}

#[cfg(test)]
mod tests {
    use poot_formats::AWQ_NIBBLE_OF_ROW;

    use super::*;
    use poot_kernel::expr_eval::Env;

    #[test]
    fn the_awq_nibble_is_the_format_table() {
        let env = Env::new();
        for (j, &want) in AWQ_NIBBLE_OF_ROW.iter().enumerate() {
            let got = env
                .eval_u32(&awq_nibble(u32c(j as u32)))
                .expect("evaluates");
            assert_eq!(got, want, "row {j}");
        }
    }
}
