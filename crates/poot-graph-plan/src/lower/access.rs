//! Expressions for graph values at a multi-index, inside the kernel being built: a buffered
//! value is a load in its storage layout; an inlined value is its op applied to its inputs'
//! expressions, with movement ops as index maps.

use poot_formats::MatrixShape;
use poot_graph_ir::{BinaryOp, CompareOp, DType, OpKind, Scalar, Storage, UnaryOp, ValueId};

use super::classify::Placement;
use super::components::{self, ComponentParams};
use super::context::KernelCtx;
use super::dequant::{self, FormatTables};
use super::{Lowering, fault};
use crate::refusal::PlanError;
use poot_kernel::build::{
    bin, cast, cmp, eq, ge, load, load_byte, load_half, lt, min, select, u32c, un,
};
use poot_kernel::{BinOp, CmpOp, Expr, Half, Ty, UnOp, Word};

/// The kernel type a graph dtype computes in (f16/bf16 values are held as rounded f32).
pub fn kty(d: DType) -> Ty {
    match d {
        DType::F32 | DType::F16 | DType::BF16 | DType::Packed(_) | DType::Components(_) => Ty::F32,
        DType::I32 => Ty::I32,
        DType::U32 | DType::U8 => Ty::U32,
        DType::Bool => Ty::Bool,
    }
}

/// The word type of a computed (non-constant) value's buffer.
pub fn device_word(d: DType) -> Word {
    match kty(d) {
        Ty::F32 => Word::F32,
        Ty::I32 => Word::I32,
        Ty::U32 | Ty::Bool => Word::U32,
    }
}

/// `e` as the word a buffer of `dtype` stores.
pub fn to_word(e: Expr, d: DType) -> Expr {
    match kty(d) {
        Ty::Bool => select(e, u32c(1), u32c(0)),
        Ty::F32 | Ty::I32 | Ty::U32 => e,
    }
}

/// The bits of `x` rounded to the nearest f16 (ties to even), in the low 16 bits of a u32:
/// what a buffer of halves stores. Integer operations only, so every backend rounds alike.
pub fn f16_bits(cx: &mut KernelCtx, x: Expr) -> Expr {
    let r = cx.kb.let_(Ty::F32, un(UnOp::RoundF16, x));
    let u = cx.kb.let_(Ty::U32, un(UnOp::BitsToU32, r.clone()));
    let sign = (u.clone() >> u32c(16)) & u32c(0x8000);
    let exp = cx.kb.let_(Ty::U32, (u.clone() >> u32c(23)) & u32c(0xff));
    // A normal f16 (biased f32 exponent 113..=142): the exponent rebiased, 10 mantissa bits
    // kept (the rounding left the 13 dropped ones zero).
    let normal = ((exp.clone() - u32c(112)) << u32c(10)) | ((u.clone() >> u32c(13)) & u32c(0x3ff));
    // Zero or subnormal: the value is a whole number of 2^-24.
    let small = cast(Ty::U32, un(UnOp::Abs, r) * Expr::F32(16_777_216.0));
    // Infinity (the rounding's overflow) or NaN (kept quiet).
    let special = select(
        cmp(CmpOp::Ne, u & u32c(0x7f_ffff), u32c(0)),
        u32c(0x7e00),
        u32c(0x7c00),
    );
    let magnitude = select(
        eq(exp.clone(), u32c(0xff)),
        special,
        select(ge(exp, u32c(113)), normal, small),
    );
    sign | magnitude
}

/// Row-major flat index of `idx` in `dims`.
pub fn flatten(idx: &[Expr], dims: &[usize]) -> Expr {
    let mut flat: Option<Expr> = None;
    let mut stride = 1usize;
    for (i, d) in idx.iter().zip(dims).rev() {
        let term = if stride == 1 {
            i.clone()
        } else {
            i.clone() * u32c(stride as u32)
        };
        flat = Some(match flat {
            None => term,
            Some(f) => term + f,
        });
        stride *= d;
    }
    flat.unwrap_or(u32c(0))
}

/// The index into a reshape's input of `idx` into its output. Leading and trailing axes the
/// two shapes share pass through unchanged (a head split keeps the feature axis, so a loop over
/// it does no division); only the axes between are flattened and split again.
pub fn reshape_index(
    cx: &mut KernelCtx,
    idx: &[Expr],
    out_dims: &[usize],
    in_dims: &[usize],
) -> Vec<Expr> {
    let common = out_dims.len().min(in_dims.len());
    let mut prefix = 0;
    while prefix < common && out_dims[prefix] == in_dims[prefix] {
        prefix += 1;
    }
    let mut suffix = 0;
    while suffix < common - prefix
        && out_dims[out_dims.len() - 1 - suffix] == in_dims[in_dims.len() - 1 - suffix]
    {
        suffix += 1;
    }
    let (out_mid, in_mid) = (
        &out_dims[prefix..out_dims.len() - suffix],
        &in_dims[prefix..in_dims.len() - suffix],
    );
    let mut in_idx = idx[..prefix].to_vec();
    if !in_mid.is_empty() {
        let flat = flatten(&idx[prefix..idx.len() - suffix], out_mid);
        in_idx.extend(unflatten(cx, flat, in_mid));
    }
    in_idx.extend_from_slice(&idx[idx.len() - suffix..]);
    in_idx
}

/// The multi-index of flat index `flat` in `dims`, as variables (the same ones for the same
/// index in the same block: [`KernelBuilder::let_reused`](poot_kernel::build::KernelBuilder::let_reused)).
pub fn unflatten(cx: &mut KernelCtx, flat: Expr, dims: &[usize]) -> Vec<Expr> {
    let mut out = vec![u32c(0); dims.len()];
    let mut rest = flat;
    for (i, &d) in dims.iter().enumerate().rev() {
        if i == 0 {
            out[0] = cx.kb.let_reused(Ty::U32, rest.clone()).0;
            break;
        }
        if d == 1 {
            continue;
        }
        out[i] = cx.kb.let_reused(Ty::U32, rest.clone() % u32c(d as u32)).0;
        rest = cx.kb.let_reused(Ty::U32, rest / u32c(d as u32)).0;
    }
    out
}

impl Lowering<'_> {
    /// `v` at `idx`: a load when `v` has a buffer, its computation otherwise.
    pub(super) fn value_at(
        &mut self,
        cx: &mut KernelCtx,
        v: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        match self.cls.placement[v.index()] {
            Placement::Inline => self.compute(cx, v, idx),
            Placement::RowReduce => self.row_reduce_at(cx, v, idx),
            // Only the kernel that absorbed the contraction reads it, at its own index.
            Placement::Absorbed => cx.known(v, idx).ok_or_else(|| PlanError::Unplaced {
                label: self.label(v),
            }),
            Placement::Input | Placement::Materialized | Placement::View => {
                self.load_value(cx, v, idx)
            }
        }
    }

    /// Whether reading `v` element by element loads halves from a buffer of f16 pairs: `v`'s
    /// own buffer holds them, or `v` is computed in place from such a buffer through movement
    /// and widening (an f16 cache as attention reads it).
    pub(super) fn reads_halves(&self, mut v: ValueId) -> bool {
        loop {
            match self.cls.placement[v.index()] {
                Placement::Input | Placement::Materialized | Placement::View => {
                    return self.lbuf[v.index()].is_some_and(|b| self.halves(b));
                }
                Placement::Inline => {
                    let Some(e) = self.cls.producer[v.index()].map(|i| &self.g.eqns()[i]) else {
                        return false;
                    };
                    match e.op {
                        OpKind::Reshape { .. }
                        | OpKind::Broadcast { .. }
                        | OpKind::Transpose { .. }
                        | OpKind::Slice { .. }
                        | OpKind::Cast { .. }
                        | OpKind::Gather { .. } => v = e.inputs[0],
                        _ => return false,
                    }
                }
                Placement::RowReduce | Placement::Absorbed => return false,
            }
        }
    }

    /// Loads element `idx` of a buffered value in its storage layout.
    pub(super) fn load_value(
        &mut self,
        cx: &mut KernelCtx,
        v: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        let info = &self.g.values()[v.index()];
        let dims = info.ty.dims().to_vec();
        let dtype = info.ty.dtype;
        let is_const = matches!(info.storage, Storage::Const(_));
        let buf = self.buffer_of(v)?;
        if let DType::Packed(format) = dtype {
            let k = dims.last().copied().unwrap_or(1);
            let row = flatten(
                &idx[..idx.len().saturating_sub(1)],
                &dims[..dims.len().saturating_sub(1)],
            );
            let block = self.block_format(format, v)?;
            let p = cx.param(buf, Word::U32, false);
            let tables = self.tables_for(cx, block);
            let row_bytes = dequant::row_bytes(block, k)
                .ok_or_else(|| self.unsupported("decode", v, dtype))?
                as u32;
            let kk = idx.last().cloned().unwrap_or(u32c(0));
            return Ok(dequant::decode_element(
                block,
                p,
                &tables,
                row * u32c(row_bytes),
                kk,
            )?);
        }
        if let DType::Components(format) = dtype {
            let (&[n, k], [ni, ki]) = (dims.as_slice(), idx) else {
                return Err(self.unsupported("decode", v, dtype));
            };
            let mut params = ComponentParams::new();
            for (role, buf) in self.component_buffers(v)? {
                params.insert(role, cx.param(buf, Word::U32, false));
            }
            let decoded = components::decode_element(
                format,
                MatrixShape::new(n, k),
                &params,
                ni.clone(),
                ki.clone(),
            )?;
            for c in decoded.checks {
                cx.kb.if_(c.out_of_range, |kb| kb.fault(c.fault));
            }
            return Ok(decoded.value);
        }
        let flat = flatten(idx, &dims);
        if is_const {
            return Ok(match dtype {
                DType::F32 => load(cx.param(buf, Word::F32, false), flat),
                DType::I32 => load(cx.param(buf, Word::I32, false), flat),
                DType::U32 => load(cx.param(buf, Word::U32, false), flat),
                DType::F16 => load_half(cx.param(buf, Word::U32, false), flat, Half::F16),
                DType::BF16 => load_half(cx.param(buf, Word::U32, false), flat, Half::Bf16),
                DType::U8 => load_byte(cx.param(buf, Word::U32, false), flat),
                DType::Bool => cmp(
                    CmpOp::Ne,
                    load_byte(cx.param(buf, Word::U32, false), flat),
                    u32c(0),
                ),
                DType::Packed(_) | DType::Components(_) => {
                    return Err(self.unsupported("load", v, dtype));
                }
            });
        }
        if self.halves(buf) {
            return Ok(load_half(cx.param(buf, Word::U32, false), flat, Half::F16));
        }
        let word = device_word(dtype);
        let x = load(cx.param(buf, word, false), flat);
        Ok(if dtype == DType::Bool {
            cmp(CmpOp::Ne, x, u32c(0))
        } else {
            x
        })
    }

    pub(super) fn tables_for(
        &mut self,
        cx: &mut KernelCtx,
        block: poot_formats::BlockFormat,
    ) -> FormatTables {
        let mut tables = FormatTables::new();
        for &t in dequant::tables_of(block) {
            let buf = self.table_buffer(t);
            tables.insert(t, cx.param(buf, Word::U32, false));
        }
        tables
    }

    /// The equation producing `v`, applied at `idx`.
    pub(super) fn compute(
        &mut self,
        cx: &mut KernelCtx,
        v: ValueId,
        idx: &[Expr],
    ) -> Result<Expr, PlanError> {
        let eqn = self.producer_of(v)?;
        let op = eqn.op.clone();
        let inputs = eqn.inputs.clone();
        let in_ty = |i: usize| self.g.values()[inputs[i].index()].ty.clone();
        let out_ty = self.g.values()[v.index()].ty.clone();
        Ok(match op {
            OpKind::Literal(s) => match s {
                Scalar::F32(x) => Expr::F32(x),
                Scalar::I32(x) => Expr::I32(x),
                Scalar::U32(x) => Expr::U32(x),
                Scalar::Bool(x) => Expr::Bool(x),
            },
            OpKind::Iota { axis, dtype, .. } => cast(kty(dtype), idx[axis].clone()),
            OpKind::Unary(u) => {
                let x = self.value_at(cx, inputs[0], idx)?;
                un(unary(u), x)
            }
            OpKind::Binary(b) => {
                let x = self.value_at(cx, inputs[0], idx)?;
                let y = self.value_at(cx, inputs[1], idx)?;
                let ty = kty(in_ty(0).dtype);
                match b {
                    BinaryOp::Div | BinaryOp::Rem if ty != Ty::F32 => {
                        let y = cx.kb.let_(ty, y);
                        let zero = if ty == Ty::I32 { Expr::I32(0) } else { u32c(0) };
                        cx.kb
                            .if_(eq(y.clone(), zero), |k| k.fault(fault::DIVIDE_BY_ZERO));
                        let one = if ty == Ty::I32 { Expr::I32(1) } else { u32c(1) };
                        // The faulting lane divides by one so the division itself is defined.
                        let safe = select(
                            eq(
                                y.clone(),
                                if ty == Ty::I32 { Expr::I32(0) } else { u32c(0) },
                            ),
                            one,
                            y,
                        );
                        bin(binary(b), x, safe)
                    }
                    BinaryOp::Shl | BinaryOp::Shr if ty == Ty::I32 => {
                        bin(binary(b), x, cast(Ty::U32, y))
                    }
                    _ => bin(binary(b), x, y),
                }
            }
            OpKind::Compare(c) => {
                let x = self.value_at(cx, inputs[0], idx)?;
                let y = self.value_at(cx, inputs[1], idx)?;
                cmp(compare(c), x, y)
            }
            OpKind::Select => {
                let c = self.value_at(cx, inputs[0], idx)?;
                let x = self.value_at(cx, inputs[1], idx)?;
                let y = self.value_at(cx, inputs[2], idx)?;
                select(c, x, y)
            }
            OpKind::Cast { to } => {
                let from = in_ty(0).dtype;
                let x = self.value_at(cx, inputs[0], idx)?;
                convert(x, from, to)
            }
            OpKind::Reshape { .. } => {
                let in_dims = in_ty(0).dims().to_vec();
                let in_idx = reshape_index(cx, idx, out_ty.dims(), &in_dims);
                self.value_at(cx, inputs[0], &in_idx)?
            }
            OpKind::Broadcast { .. } => {
                let in_dims = in_ty(0).dims().to_vec();
                let offset = idx.len() - in_dims.len();
                let in_idx: Vec<Expr> = in_dims
                    .iter()
                    .enumerate()
                    .map(|(j, &d)| {
                        if d == 1 {
                            u32c(0)
                        } else {
                            idx[j + offset].clone()
                        }
                    })
                    .collect();
                self.value_at(cx, inputs[0], &in_idx)?
            }
            OpKind::Transpose { perm } => {
                let mut in_idx = vec![u32c(0); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    in_idx[p] = idx[i].clone();
                }
                self.value_at(cx, inputs[0], &in_idx)?
            }
            OpKind::Slice { starts, .. } => {
                let in_idx: Vec<Expr> = idx
                    .iter()
                    .zip(&starts)
                    .map(|(i, &s)| {
                        if s == 0 {
                            i.clone()
                        } else {
                            i.clone() + u32c(s as u32)
                        }
                    })
                    .collect();
                self.value_at(cx, inputs[0], &in_idx)?
            }
            OpKind::Concat { axis } => {
                // Every branch loads at a clamped index (in bounds); a select picks the one whose
                // range holds the output index.
                let mut branches = Vec::with_capacity(inputs.len());
                let mut offset = 0usize;
                for (j, &inp) in inputs.iter().enumerate() {
                    let size = in_ty(j).dims()[axis];
                    let mut sub = idx.to_vec();
                    let shifted = select(
                        ge(idx[axis].clone(), u32c(offset as u32)),
                        idx[axis].clone() - u32c(offset as u32),
                        u32c(0),
                    );
                    sub[axis] = min(shifted, u32c(size.saturating_sub(1) as u32));
                    let e = self.value_at(cx, inp, &sub)?;
                    offset += size;
                    branches.push((offset, e));
                }
                let mut acc = branches.pop().map(|(_, e)| e).unwrap_or(u32c(0));
                while let Some((end, e)) = branches.pop() {
                    acc = select(lt(idx[axis].clone(), u32c(end as u32)), e, acc);
                }
                acc
            }
            OpKind::Gather { axis } => {
                let data_dims = in_ty(0).dims().to_vec();
                let ind_rank = in_ty(1).rank();
                let row = self.value_at(cx, inputs[1], &idx[axis..axis + ind_rank])?;
                let row = self.checked_index(cx, row, data_dims[axis], fault::GATHER_INDEX);
                let mut data_idx = idx[..axis].to_vec();
                data_idx.push(row);
                data_idx.extend_from_slice(&idx[axis + ind_rank..]);
                self.value_at(cx, inputs[0], &data_idx)?
            }
            OpKind::TakeAlong { axis } => {
                let dim = in_ty(0).dims()[axis];
                let at = self.value_at(cx, inputs[1], idx)?;
                let at = self.checked_index(cx, at, dim, fault::TAKE_ALONG_INDEX);
                let mut data_idx = idx.to_vec();
                data_idx[axis] = at;
                self.value_at(cx, inputs[0], &data_idx)?
            }
            OpKind::DynamicSlice { sizes } => {
                let dims = in_ty(0).dims().to_vec();
                let mut in_idx = Vec::with_capacity(dims.len());
                for (i, (&d, &s)) in dims.iter().zip(&sizes).enumerate() {
                    let start = self.value_at(cx, inputs[1 + i], &[])?;
                    let start =
                        self.checked_index(cx, start, d - s + 1, fault::DYNAMIC_SLICE_START);
                    in_idx.push(idx[i].clone() + start);
                }
                self.value_at(cx, inputs[0], &in_idx)?
            }
            OpKind::DynamicUpdateSlice
            | OpKind::ScatterUpdate { .. }
            | OpKind::Reduce { .. }
            | OpKind::ArgMax { .. }
            | OpKind::ArgTopK { .. }
            | OpKind::MatMul { .. }
            | OpKind::IndexedMatMul
            | OpKind::AllReduceSum { .. }
            | OpKind::BroadcastFrom { .. } => {
                return Err(PlanError::Unplaced {
                    label: self.label(v),
                });
            }
        })
    }

    /// `index` (i32 or u32) as a u32 below `bound`: an index at or past the bound faults with
    /// `code`, and the returned value is clamped so the faulting lane still loads in bounds.
    /// The same index checked again in the same block is the same variable, read and checked
    /// once: a paged cache's block-table entry serves every feature of a position.
    pub(super) fn checked_index(
        &mut self,
        cx: &mut KernelCtx,
        index: Expr,
        bound: usize,
        code: u32,
    ) -> Expr {
        let (i, fresh) = cx.kb.let_reused(Ty::U32, cast_index(index));
        let bound = u32c(bound as u32);
        if fresh {
            cx.kb.if_(ge(i.clone(), bound.clone()), |k| k.fault(code));
        }
        min(i, bound - u32c(1))
    }
}

/// An i32 or u32 index as u32 (a negative i32 becomes a huge u32, which bounds checks catch).
fn cast_index(e: Expr) -> Expr {
    cast(Ty::U32, e)
}

/// The device computation of a graph cast, following the oracle's rules: floats to integers
/// truncate and saturate, integers wrap, narrowing floats round to nearest even.
pub fn convert(x: Expr, from: DType, to: DType) -> Expr {
    let (src, dst) = (kty(from), kty(to));
    let widened = match (src, dst) {
        _ if src == dst => x,
        (_, t) => cast(t, x),
    };
    match to {
        DType::F16 => un(UnOp::RoundF16, widened),
        DType::BF16 => un(UnOp::RoundBf16, widened),
        DType::U8 if src == Ty::F32 => min(widened, u32c(255)),
        DType::U8 => widened & u32c(255),
        DType::F32
        | DType::I32
        | DType::U32
        | DType::Bool
        | DType::Packed(_)
        | DType::Components(_) => widened,
    }
}

fn unary(u: UnaryOp) -> UnOp {
    match u {
        UnaryOp::Neg => UnOp::Neg,
        UnaryOp::Abs => UnOp::Abs,
        UnaryOp::Exp => UnOp::Exp,
        UnaryOp::Log => UnOp::Log,
        UnaryOp::Sqrt => UnOp::Sqrt,
        UnaryOp::Rsqrt => UnOp::Rsqrt,
        UnaryOp::Recip => UnOp::Recip,
        UnaryOp::Tanh => UnOp::Tanh,
        UnaryOp::Erf => UnOp::Erf,
        UnaryOp::Floor => UnOp::Floor,
        UnaryOp::Ceil => UnOp::Ceil,
        UnaryOp::Round => UnOp::Round,
        UnaryOp::Sin => UnOp::Sin,
        UnaryOp::Cos => UnOp::Cos,
        UnaryOp::Not => UnOp::Not,
    }
}

fn binary(b: BinaryOp) -> BinOp {
    match b {
        BinaryOp::Add => BinOp::Add,
        BinaryOp::Sub => BinOp::Sub,
        BinaryOp::Mul => BinOp::Mul,
        BinaryOp::Div => BinOp::Div,
        BinaryOp::Rem => BinOp::Rem,
        BinaryOp::Max => BinOp::Max,
        BinaryOp::Min => BinOp::Min,
        BinaryOp::Pow => BinOp::Pow,
        BinaryOp::And => BinOp::And,
        BinaryOp::Or => BinOp::Or,
        BinaryOp::Xor => BinOp::Xor,
        BinaryOp::Shl => BinOp::Shl,
        BinaryOp::Shr => BinOp::Shr,
    }
}

fn compare(c: CompareOp) -> CmpOp {
    match c {
        CompareOp::Eq => CmpOp::Eq,
        CompareOp::Ne => CmpOp::Ne,
        CompareOp::Lt => CmpOp::Lt,
        CompareOp::Le => CmpOp::Le,
        CompareOp::Gt => CmpOp::Gt,
        CompareOp::Ge => CmpOp::Ge,
    }
}
