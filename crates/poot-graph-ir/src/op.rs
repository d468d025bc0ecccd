//! The primitive op set. Each op is data (a variant with its parameters) and infers its output
//! type from its input types alone; nothing here touches tensor contents.

use std::fmt;

use crate::types::{DType, Shape, TensorType};

/// A scalar literal, materialized as a rank-0 value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    F32(f32),
    I32(i32),
    U32(u32),
    Bool(bool),
}

impl Scalar {
    pub fn dtype(self) -> DType {
        match self {
            Scalar::F32(_) => DType::F32,
            Scalar::I32(_) => DType::I32,
            Scalar::U32(_) => DType::U32,
            Scalar::Bool(_) => DType::Bool,
        }
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F32(v) => write!(f, "{v:?}"),
            Scalar::I32(v) => write!(f, "{v}"),
            Scalar::U32(v) => write!(f, "{v}u"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Recip,
    Tanh,
    Erf,
    Floor,
    Ceil,
    /// To the nearest integer, ties to even (IEEE roundTiesToEven, as `rintf` in the default
    /// rounding mode).
    Round,
    Sin,
    Cos,
    /// Logical not on bool, bitwise not on integers.
    Not,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Recip => "recip",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Erf => "erf",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Not => "not",
        }
    }

    fn accepts(self, d: DType) -> bool {
        match self {
            UnaryOp::Neg | UnaryOp::Abs => matches!(d, DType::F32 | DType::I32),
            UnaryOp::Not => matches!(d, DType::Bool | DType::I32 | DType::U32),
            UnaryOp::Exp
            | UnaryOp::Log
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Recip
            | UnaryOp::Tanh
            | UnaryOp::Erf
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sin
            | UnaryOp::Cos => d == DType::F32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// Float division; truncating division on integers (a zero divisor is an evaluation fault).
    Div,
    /// Remainder with the sign of the dividend (integers only).
    Rem,
    Max,
    Min,
    /// Float power.
    Pow,
    /// Logical on bool, bitwise on integers.
    And,
    Or,
    Xor,
    /// Integer shifts by the right operand modulo 32.
    Shl,
    Shr,
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Rem => "rem",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Pow => "pow",
            BinaryOp::And => "and",
            BinaryOp::Or => "or",
            BinaryOp::Xor => "xor",
            BinaryOp::Shl => "shl",
            BinaryOp::Shr => "shr",
        }
    }

    fn accepts(self, d: DType) -> bool {
        match self {
            BinaryOp::Add
            | BinaryOp::Sub
            | BinaryOp::Mul
            | BinaryOp::Div
            | BinaryOp::Max
            | BinaryOp::Min => d.is_arithmetic(),
            BinaryOp::Pow => d == DType::F32,
            BinaryOp::Rem | BinaryOp::Shl | BinaryOp::Shr => matches!(d, DType::I32 | DType::U32),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                matches!(d, DType::Bool | DType::I32 | DType::U32)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Max,
    Min,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
        }
    }
}

/// A primitive operation. Composite operations (norms, rotary embeddings, attention) are
/// helpers in [`crate::ops`] that emit these; none of them is an op.
#[derive(Clone, Debug, PartialEq)]
pub enum OpKind {
    /// A rank-0 constant.
    Literal(Scalar),
    /// Element indices along `axis` of a tensor of `shape`.
    Iota {
        shape: Shape,
        axis: usize,
        dtype: DType,
    },
    Unary(UnaryOp),
    /// Elementwise over two operands of one type and one shape.
    Binary(BinaryOp),
    /// Elementwise comparison to bool.
    Compare(CompareOp),
    /// `cond ? on_true : on_false`, elementwise; all three of one shape.
    Select,
    Cast {
        to: DType,
    },
    /// Same elements in row-major order, new shape.
    Reshape {
        shape: Shape,
    },
    /// NumPy-style broadcast: dims aligned from the right, each input dim equal or 1.
    Broadcast {
        shape: Shape,
    },
    /// `out.dims[i] = in.dims[perm[i]]`.
    Transpose {
        perm: Vec<usize>,
    },
    /// A static window `[starts[i], ends[i])` of every axis.
    Slice {
        starts: Vec<usize>,
        ends: Vec<usize>,
    },
    Concat {
        axis: usize,
    },
    /// `out = data.dims[..axis] ++ idx.dims ++ data.dims[axis+1..]`, NumPy's `take`. A packed
    /// table may be gathered along axis 0 (decoding only the gathered rows) to f32.
    Gather {
        axis: usize,
    },
    /// NumPy's `take_along_axis`: `idx` has the data's rank; the output has idx's shape.
    TakeAlong {
        axis: usize,
    },
    /// A window of `sizes` starting at one runtime scalar index per axis (inputs 1..).
    DynamicSlice {
        sizes: Vec<usize>,
    },
    /// Writes `update` into `operand` at one runtime scalar index per axis (inputs 2..).
    DynamicUpdateSlice,
    /// Writes `updates` slice `i` along `axis` to `operand` position `indices[i]`.
    ScatterUpdate {
        axis: usize,
    },
    /// Reduces `axis`, keeping it with size 1.
    Reduce {
        op: ReduceOp,
        axis: usize,
    },
    /// Index of the (first) maximum along `axis`, kept with size 1, as i32.
    ArgMax {
        axis: usize,
    },
    /// Indices of the `k` largest along the last axis, in descending order (ties: lower index
    /// first), as i32.
    ArgTopK {
        k: usize,
    },
    /// Batched contraction to f32. `lhs` is `[.., M, K]` f32; `rhs` is `[.., K, N]`, or `[.., N, K]`
    /// when `transpose_rhs` (a weight as checkpoints store it). `rhs` may be rank 2 (shared across
    /// the batch) and may be f16, bf16 or packed, read as stored.
    MatMul {
        transpose_rhs: bool,
    },
    /// Per-row expert contraction: `lhs [T, K]`, `rhs [E, N, K]`, `idx [T]` to `[T, N]`, row `t`
    /// against expert `idx[t]`.
    IndexedMatMul,
    /// The elementwise sum of one f32 value over the `ranks` graphs of a tensor-parallel group,
    /// each rank holding its own partial value; every rank gets the same sum. A collective, not
    /// a kernel: a group of one is the identity, and a graph evaluated or planned alone with
    /// `ranks > 1` is refused rather than silently summing nothing.
    AllReduceSum {
        ranks: usize,
    },
    /// Rank `root`'s value of one operand over the `ranks` graphs of a group (a layer
    /// pipeline's hand-over from one stage to the next): every rank gets root's value whatever
    /// its own operand holds (a placeholder of the same type). f32, i32 or u32 (moved as 32-bit
    /// words, never converted). A collective, not a kernel: a group of one is the identity, and
    /// a graph evaluated or planned alone with `ranks > 1` is refused.
    BroadcastFrom {
        root: usize,
        ranks: usize,
    },
}

/// What a collective op does, for the readers that treat collectives alike (the group oracle,
/// the planner's collective steps, the executor's commands).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CollectiveOp {
    /// [`OpKind::AllReduceSum`].
    AllReduceSum { ranks: usize },
    /// [`OpKind::BroadcastFrom`].
    Broadcast { root: usize, ranks: usize },
}

impl CollectiveOp {
    /// The group size the collective was traced for.
    pub fn ranks(self) -> usize {
        match self {
            CollectiveOp::AllReduceSum { ranks } | CollectiveOp::Broadcast { ranks, .. } => ranks,
        }
    }

    /// How refusals name it.
    pub fn what(self) -> &'static str {
        match self {
            CollectiveOp::AllReduceSum { .. } => "an all-reduce",
            CollectiveOp::Broadcast { .. } => "a broadcast",
        }
    }
}

impl OpKind {
    /// The collective this op is, if it is one.
    pub fn collective(&self) -> Option<CollectiveOp> {
        match *self {
            OpKind::AllReduceSum { ranks } => Some(CollectiveOp::AllReduceSum { ranks }),
            OpKind::BroadcastFrom { root, ranks } => Some(CollectiveOp::Broadcast { root, ranks }),
            _ => None,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Literal(_) => "literal",
            OpKind::Iota { .. } => "iota",
            OpKind::Unary(u) => u.name(),
            OpKind::Binary(b) => b.name(),
            OpKind::Compare(c) => c.name(),
            OpKind::Select => "select",
            OpKind::Cast { .. } => "cast",
            OpKind::Reshape { .. } => "reshape",
            OpKind::Broadcast { .. } => "broadcast",
            OpKind::Transpose { .. } => "transpose",
            OpKind::Slice { .. } => "slice",
            OpKind::Concat { .. } => "concat",
            OpKind::Gather { .. } => "gather",
            OpKind::TakeAlong { .. } => "take_along",
            OpKind::DynamicSlice { .. } => "dynamic_slice",
            OpKind::DynamicUpdateSlice => "dynamic_update_slice",
            OpKind::ScatterUpdate { .. } => "scatter_update",
            OpKind::Reduce { op, .. } => op.name(),
            OpKind::ArgMax { .. } => "argmax",
            OpKind::ArgTopK { .. } => "arg_top_k",
            OpKind::MatMul { .. } => "matmul",
            OpKind::IndexedMatMul => "indexed_matmul",
            OpKind::AllReduceSum { .. } => "all_reduce_sum",
            OpKind::BroadcastFrom { .. } => "broadcast_from",
        }
    }

    /// True for ops that only reinterpret their input (no data moves or is computed).
    pub fn is_view(&self) -> bool {
        matches!(self, OpKind::Reshape { .. })
    }

    /// The output type from the input types alone.
    pub fn infer(&self, inputs: &[&TensorType]) -> Result<TensorType, InferError> {
        let op = self.name();
        match self {
            OpKind::Literal(s) => {
                arity(op, inputs, 0)?;
                Ok(TensorType::new(s.dtype(), Shape::scalar()))
            }
            OpKind::Iota { shape, axis, dtype } => {
                arity(op, inputs, 0)?;
                check_axis(op, *axis, shape.rank())?;
                if !matches!(dtype, DType::I32 | DType::U32 | DType::F32) {
                    return Err(InferError::DType {
                        op,
                        input: 0,
                        found: *dtype,
                        expected: "i32, u32 or f32",
                    });
                }
                checked_elems(op, shape)?;
                Ok(TensorType::new(*dtype, shape.clone()))
            }
            OpKind::Unary(u) => {
                arity(op, inputs, 1)?;
                let x = inputs[0];
                if !u.accepts(x.dtype) {
                    return Err(dtype_err(op, 0, x.dtype, "a type the op is defined on"));
                }
                Ok(x.clone())
            }
            OpKind::Binary(b) => {
                arity(op, inputs, 2)?;
                same_type(op, inputs[0], inputs[1])?;
                if !b.accepts(inputs[0].dtype) {
                    return Err(dtype_err(
                        op,
                        0,
                        inputs[0].dtype,
                        "a type the op is defined on",
                    ));
                }
                Ok(inputs[0].clone())
            }
            OpKind::Compare(_) => {
                arity(op, inputs, 2)?;
                same_type(op, inputs[0], inputs[1])?;
                if !inputs[0].dtype.is_arithmetic() && inputs[0].dtype != DType::Bool {
                    return Err(dtype_err(op, 0, inputs[0].dtype, "f32, i32, u32 or bool"));
                }
                Ok(TensorType::new(DType::Bool, inputs[0].shape.clone()))
            }
            OpKind::Select => {
                arity(op, inputs, 3)?;
                if inputs[0].dtype != DType::Bool {
                    return Err(dtype_err(op, 0, inputs[0].dtype, "bool"));
                }
                same_shape(op, &inputs[0].shape, &inputs[1].shape)?;
                same_type(op, inputs[1], inputs[2])?;
                dense(op, 1, inputs[1])?;
                Ok(inputs[1].clone())
            }
            OpKind::Cast { to } => {
                arity(op, inputs, 1)?;
                dense(op, 0, inputs[0])?;
                if to.is_packed() {
                    return Err(dtype_err(op, 0, *to, "a dense target type"));
                }
                Ok(TensorType::new(*to, inputs[0].shape.clone()))
            }
            OpKind::Reshape { shape } => {
                arity(op, inputs, 1)?;
                dense(op, 0, inputs[0])?;
                let from = checked_elems(op, &inputs[0].shape)?;
                let to = checked_elems(op, shape)?;
                if from != to {
                    return Err(InferError::Reshape {
                        from: inputs[0].shape.clone(),
                        to: shape.clone(),
                    });
                }
                Ok(TensorType::new(inputs[0].dtype, shape.clone()))
            }
            OpKind::Broadcast { shape } => {
                arity(op, inputs, 1)?;
                dense(op, 0, inputs[0])?;
                let from = &inputs[0].shape;
                checked_elems(op, shape)?;
                let ok = from.rank() <= shape.rank()
                    && from
                        .dims()
                        .iter()
                        .rev()
                        .zip(shape.dims().iter().rev())
                        .all(|(&f, &t)| f == t || f == 1);
                if !ok {
                    return Err(InferError::Broadcast {
                        from: from.clone(),
                        to: shape.clone(),
                    });
                }
                Ok(TensorType::new(inputs[0].dtype, shape.clone()))
            }
            OpKind::Transpose { perm } => {
                arity(op, inputs, 1)?;
                dense(op, 0, inputs[0])?;
                let dims = inputs[0].dims();
                let mut seen = vec![false; dims.len()];
                let valid = perm.len() == dims.len()
                    && perm
                        .iter()
                        .all(|&p| p < dims.len() && !std::mem::replace(&mut seen[p], true));
                if !valid {
                    return Err(InferError::Permutation {
                        perm: perm.clone(),
                        rank: dims.len(),
                    });
                }
                let out: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
                Ok(TensorType::new(inputs[0].dtype, out))
            }
            OpKind::Slice { starts, ends } => {
                arity(op, inputs, 1)?;
                dense(op, 0, inputs[0])?;
                let dims = inputs[0].dims();
                if starts.len() != dims.len() || ends.len() != dims.len() {
                    return Err(InferError::ParamRank {
                        op,
                        param: "starts/ends",
                        len: starts.len().max(ends.len()),
                        rank: dims.len(),
                    });
                }
                let mut out = Vec::with_capacity(dims.len());
                for (axis, ((&s, &e), &d)) in starts.iter().zip(ends).zip(dims).enumerate() {
                    if s > e || e > d {
                        return Err(InferError::SliceBounds {
                            axis,
                            start: s,
                            end: e,
                            dim: d,
                        });
                    }
                    out.push(e - s);
                }
                Ok(TensorType::new(inputs[0].dtype, out))
            }
            OpKind::Concat { axis } => {
                if inputs.is_empty() {
                    return Err(InferError::Arity {
                        op,
                        expected: 1,
                        found: 0,
                    });
                }
                let first = inputs[0];
                dense(op, 0, first)?;
                check_axis(op, *axis, first.rank())?;
                let mut total = 0usize;
                for (i, t) in inputs.iter().enumerate() {
                    if t.dtype != first.dtype {
                        return Err(dtype_err(op, i, t.dtype, "the first input's type"));
                    }
                    let same_rest = t.rank() == first.rank()
                        && t.dims()
                            .iter()
                            .zip(first.dims())
                            .enumerate()
                            .all(|(a, (x, y))| a == *axis || x == y);
                    if !same_rest {
                        return Err(InferError::ShapeMismatch {
                            op,
                            lhs: first.shape.clone(),
                            rhs: t.shape.clone(),
                        });
                    }
                    total = total
                        .checked_add(t.dims()[*axis])
                        .ok_or(InferError::Overflow { op })?;
                }
                let mut out = first.dims().to_vec();
                out[*axis] = total;
                Ok(TensorType::new(first.dtype, out))
            }
            OpKind::Gather { axis } => {
                arity(op, inputs, 2)?;
                let (data, idx) = (inputs[0], inputs[1]);
                check_axis(op, *axis, data.rank())?;
                index_type(op, 1, idx)?;
                let dtype = match data.dtype {
                    // Rows of a table, or whole experts of a `[experts, rows, k]` stack.
                    DType::Packed(_) if *axis == 0 && (2..=3).contains(&data.rank()) => {
                        weight_type(op, 0, data)?;
                        DType::F32
                    }
                    DType::Packed(_) => {
                        return Err(dtype_err(
                            op,
                            0,
                            data.dtype,
                            "a dense type (packed tables gather along the first axis of a rank-2 table or rank-3 stack)",
                        ));
                    }
                    // The Hugging Face packed layouts quantize linear layers, never embedding
                    // tables, so no gather decodes them.
                    DType::Components(_) => {
                        return Err(dtype_err(
                            op,
                            0,
                            data.dtype,
                            "a dense type or GGUF blocks (component formats are read only by contractions)",
                        ));
                    }
                    d => d,
                };
                let mut out = data.dims()[..*axis].to_vec();
                out.extend_from_slice(idx.dims());
                out.extend_from_slice(&data.dims()[*axis + 1..]);
                let out = Shape::new(out);
                checked_elems(op, &out)?;
                Ok(TensorType::new(dtype, out))
            }
            OpKind::TakeAlong { axis } => {
                arity(op, inputs, 2)?;
                let (data, idx) = (inputs[0], inputs[1]);
                dense(op, 0, data)?;
                check_axis(op, *axis, data.rank())?;
                index_type(op, 1, idx)?;
                let ok = idx.rank() == data.rank()
                    && idx
                        .dims()
                        .iter()
                        .zip(data.dims())
                        .enumerate()
                        .all(|(a, (i, d))| a == *axis || i == d);
                if !ok {
                    return Err(InferError::ShapeMismatch {
                        op,
                        lhs: data.shape.clone(),
                        rhs: idx.shape.clone(),
                    });
                }
                Ok(TensorType::new(data.dtype, idx.shape.clone()))
            }
            OpKind::DynamicSlice { sizes } => {
                let data = *inputs.first().ok_or(InferError::Arity {
                    op,
                    expected: 1,
                    found: 0,
                })?;
                dense(op, 0, data)?;
                arity(op, inputs, 1 + data.rank())?;
                scalar_indices(op, &inputs[1..], 1)?;
                if sizes.len() != data.rank() {
                    return Err(InferError::ParamRank {
                        op,
                        param: "sizes",
                        len: sizes.len(),
                        rank: data.rank(),
                    });
                }
                for (axis, (&s, &d)) in sizes.iter().zip(data.dims()).enumerate() {
                    if s > d {
                        return Err(InferError::SliceBounds {
                            axis,
                            start: 0,
                            end: s,
                            dim: d,
                        });
                    }
                }
                Ok(TensorType::new(data.dtype, sizes.clone()))
            }
            OpKind::DynamicUpdateSlice => {
                if inputs.len() < 2 {
                    return Err(InferError::Arity {
                        op,
                        expected: 2,
                        found: inputs.len(),
                    });
                }
                let (operand, update) = (inputs[0], inputs[1]);
                dense(op, 0, operand)?;
                arity(op, inputs, 2 + operand.rank())?;
                if update.dtype != operand.dtype {
                    return Err(dtype_err(op, 1, update.dtype, "the operand's type"));
                }
                let fits = update.rank() == operand.rank()
                    && update
                        .dims()
                        .iter()
                        .zip(operand.dims())
                        .all(|(u, o)| u <= o);
                if !fits {
                    return Err(InferError::ShapeMismatch {
                        op,
                        lhs: operand.shape.clone(),
                        rhs: update.shape.clone(),
                    });
                }
                scalar_indices(op, &inputs[2..], 2)?;
                Ok(operand.clone())
            }
            OpKind::ScatterUpdate { axis } => {
                arity(op, inputs, 3)?;
                let (operand, idx, updates) = (inputs[0], inputs[1], inputs[2]);
                dense(op, 0, operand)?;
                check_axis(op, *axis, operand.rank())?;
                index_type(op, 1, idx)?;
                if idx.rank() != 1 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 1,
                        rank: idx.rank(),
                        expected: 1,
                    });
                }
                if updates.dtype != operand.dtype {
                    return Err(dtype_err(op, 2, updates.dtype, "the operand's type"));
                }
                let mut want = operand.dims().to_vec();
                want[*axis] = idx.dims()[0];
                if updates.dims() != want.as_slice() {
                    return Err(InferError::ShapeMismatch {
                        op,
                        lhs: Shape::new(want),
                        rhs: updates.shape.clone(),
                    });
                }
                Ok(operand.clone())
            }
            OpKind::Reduce { op: r, axis } => {
                arity(op, inputs, 1)?;
                let x = inputs[0];
                check_axis(op, *axis, x.rank())?;
                let ok = match r {
                    ReduceOp::Sum => x.dtype.is_arithmetic(),
                    ReduceOp::Max | ReduceOp::Min => x.dtype.is_arithmetic(),
                };
                if !ok {
                    return Err(dtype_err(op, 0, x.dtype, "f32, i32 or u32"));
                }
                Ok(TensorType::new(x.dtype, keep_axis(x.dims(), *axis)))
            }
            OpKind::ArgMax { axis } => {
                arity(op, inputs, 1)?;
                let x = inputs[0];
                check_axis(op, *axis, x.rank())?;
                if !x.dtype.is_arithmetic() {
                    return Err(dtype_err(op, 0, x.dtype, "f32, i32 or u32"));
                }
                Ok(TensorType::new(DType::I32, keep_axis(x.dims(), *axis)))
            }
            OpKind::ArgTopK { k } => {
                arity(op, inputs, 1)?;
                let x = inputs[0];
                if !x.dtype.is_arithmetic() {
                    return Err(dtype_err(op, 0, x.dtype, "f32, i32 or u32"));
                }
                let last = x.rank().checked_sub(1).ok_or(InferError::Axis {
                    op,
                    axis: 0,
                    rank: 0,
                })?;
                let n = x.dims()[last];
                if *k == 0 || *k > n {
                    return Err(InferError::TopK { k: *k, dim: n });
                }
                let mut out = x.dims().to_vec();
                out[last] = *k;
                Ok(TensorType::new(DType::I32, out))
            }
            OpKind::MatMul { transpose_rhs } => {
                arity(op, inputs, 2)?;
                let (lhs, rhs) = (inputs[0], inputs[1]);
                if lhs.dtype != DType::F32 {
                    return Err(dtype_err(op, 0, lhs.dtype, "f32"));
                }
                weight_type(op, 1, rhs)?;
                if lhs.rank() < 2 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 0,
                        rank: lhs.rank(),
                        expected: 2,
                    });
                }
                if rhs.rank() < 2 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 1,
                        rank: rhs.rank(),
                        expected: 2,
                    });
                }
                if rhs.dtype.is_packed() && (!transpose_rhs || rhs.rank() != 2) {
                    return Err(dtype_err(
                        op,
                        1,
                        rhs.dtype,
                        "a rank-2 [N, K] weight when packed",
                    ));
                }
                let (lb, lm) = lhs.dims().split_at(lhs.rank() - 2);
                let (rb, rm) = rhs.dims().split_at(rhs.rank() - 2);
                let (m, k) = (lm[0], lm[1]);
                let (rk, n) = if *transpose_rhs {
                    (rm[1], rm[0])
                } else {
                    (rm[0], rm[1])
                };
                let batch_ok = rb.is_empty() || rb == lb;
                if k != rk || !batch_ok {
                    return Err(InferError::Contraction {
                        op,
                        lhs: lhs.shape.clone(),
                        rhs: rhs.shape.clone(),
                        transpose_rhs: *transpose_rhs,
                    });
                }
                let mut out = lb.to_vec();
                out.extend([m, n]);
                Ok(TensorType::new(DType::F32, out))
            }
            OpKind::IndexedMatMul => {
                arity(op, inputs, 3)?;
                let (lhs, rhs, idx) = (inputs[0], inputs[1], inputs[2]);
                if lhs.dtype != DType::F32 {
                    return Err(dtype_err(op, 0, lhs.dtype, "f32"));
                }
                weight_type(op, 1, rhs)?;
                index_type(op, 2, idx)?;
                if lhs.rank() != 2 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 0,
                        rank: lhs.rank(),
                        expected: 2,
                    });
                }
                if rhs.rank() != 3 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 1,
                        rank: rhs.rank(),
                        expected: 3,
                    });
                }
                if idx.rank() != 1 {
                    return Err(InferError::IndexRank {
                        op,
                        input: 2,
                        rank: idx.rank(),
                        expected: 1,
                    });
                }
                let (t, k) = (lhs.dims()[0], lhs.dims()[1]);
                let (n, rk) = (rhs.dims()[1], rhs.dims()[2]);
                if k != rk || idx.dims()[0] != t {
                    return Err(InferError::Contraction {
                        op,
                        lhs: lhs.shape.clone(),
                        rhs: rhs.shape.clone(),
                        transpose_rhs: true,
                    });
                }
                Ok(TensorType::new(DType::F32, vec![t, n]))
            }
            OpKind::AllReduceSum { ranks } => {
                arity(op, inputs, 1)?;
                if *ranks == 0 {
                    return Err(InferError::GroupSize { op, ranks: *ranks });
                }
                if inputs[0].dtype != DType::F32 {
                    return Err(dtype_err(op, 0, inputs[0].dtype, "f32"));
                }
                checked_elems(op, &inputs[0].shape)?;
                Ok(inputs[0].clone())
            }
            OpKind::BroadcastFrom { root, ranks } => {
                arity(op, inputs, 1)?;
                if *ranks == 0 {
                    return Err(InferError::GroupSize { op, ranks: *ranks });
                }
                if root >= ranks {
                    return Err(InferError::GroupRoot {
                        root: *root,
                        ranks: *ranks,
                    });
                }
                if !matches!(inputs[0].dtype, DType::F32 | DType::I32 | DType::U32) {
                    return Err(dtype_err(op, 0, inputs[0].dtype, "f32, i32 or u32"));
                }
                checked_elems(op, &inputs[0].shape)?;
                Ok(inputs[0].clone())
            }
        }
    }
}

/// Why an op cannot take the given input types.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InferError {
    /// The op was given the wrong number of inputs.
    #[error("{op}: expects {expected} inputs, got {found}")]
    Arity {
        op: &'static str,
        expected: usize,
        found: usize,
    },
    /// An input has an element type the op is not defined on.
    #[error("{op}: input {input} is {found}, expected {expected}")]
    DType {
        op: &'static str,
        input: usize,
        found: DType,
        expected: &'static str,
    },
    /// Two inputs that must agree in shape do not.
    #[error("{op}: shapes {lhs} and {rhs} do not agree")]
    ShapeMismatch {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
    },
    /// An axis parameter is outside the input's rank.
    #[error("{op}: axis {axis} out of range for rank {rank}")]
    Axis {
        op: &'static str,
        axis: usize,
        rank: usize,
    },
    /// A reshape to a different element count.
    #[error("reshape: {from} and {to} hold different element counts")]
    Reshape { from: Shape, to: Shape },
    /// A broadcast whose source dims are neither equal to the target's nor 1.
    #[error("broadcast: {from} cannot broadcast to {to}")]
    Broadcast { from: Shape, to: Shape },
    /// A transpose permutation that is not a permutation of the input's axes.
    #[error("transpose: {perm:?} is not a permutation of {rank} axes")]
    Permutation { perm: Vec<usize>, rank: usize },
    /// A per-axis parameter list whose length is not the input's rank.
    #[error("{op}: {param} has {len} entries for rank {rank}")]
    ParamRank {
        op: &'static str,
        param: &'static str,
        len: usize,
        rank: usize,
    },
    /// A static window outside its axis.
    #[error("slice: axis {axis} window [{start}, {end}) outside dim {dim}")]
    SliceBounds {
        axis: usize,
        start: usize,
        end: usize,
        dim: usize,
    },
    /// An input with the wrong rank for its role.
    #[error("{op}: input {input} has rank {rank}, expected {expected}")]
    IndexRank {
        op: &'static str,
        input: usize,
        rank: usize,
        expected: usize,
    },
    /// Contraction dims or batch dims that do not line up.
    #[error("{op}: cannot contract {lhs} with {rhs} (transpose_rhs={transpose_rhs})")]
    Contraction {
        op: &'static str,
        lhs: Shape,
        rhs: Shape,
        transpose_rhs: bool,
    },
    /// `k` is zero or larger than the axis it selects from.
    #[error("arg_top_k: k={k} out of range for an axis of {dim}")]
    TopK { k: usize, dim: usize },
    /// A shape whose element count does not fit in memory addressing.
    #[error("{op}: shape element count overflows")]
    Overflow { op: &'static str },
    /// A collective over a group of no ranks.
    #[error("{op}: a group of {ranks} ranks (at least 1)")]
    GroupSize { op: &'static str, ranks: usize },
    /// A broadcast from a rank outside its group.
    #[error("broadcast_from: root rank {root} is outside a group of {ranks} ranks")]
    GroupRoot { root: usize, ranks: usize },
    /// A packed value whose last axis is not a whole number of blocks.
    #[error("{op}: packed {dtype} shape {shape} is not whole blocks along its last axis")]
    PackedBlocks {
        op: &'static str,
        dtype: DType,
        shape: Shape,
    },
    /// A component-format value whose shape the format cannot store: not rank 2 `[N, K]`, or N
    /// or K not a multiple of what the format packs together (8 for GPTQ and AWQ, 32 columns for
    /// FP4).
    #[error("{op}: {dtype} cannot store shape {shape}: {source}")]
    ComponentShape {
        op: &'static str,
        dtype: DType,
        shape: Shape,
        source: Box<poot_formats::FormatError>,
    },
}

fn arity(op: &'static str, inputs: &[&TensorType], n: usize) -> Result<(), InferError> {
    if inputs.len() == n {
        Ok(())
    } else {
        Err(InferError::Arity {
            op,
            expected: n,
            found: inputs.len(),
        })
    }
}

fn dtype_err(op: &'static str, input: usize, found: DType, expected: &'static str) -> InferError {
    InferError::DType {
        op,
        input,
        found,
        expected,
    }
}

fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<(), InferError> {
    if axis < rank {
        Ok(())
    } else {
        Err(InferError::Axis { op, axis, rank })
    }
}

fn same_shape(op: &'static str, a: &Shape, b: &Shape) -> Result<(), InferError> {
    if a == b {
        Ok(())
    } else {
        Err(InferError::ShapeMismatch {
            op,
            lhs: a.clone(),
            rhs: b.clone(),
        })
    }
}

fn same_type(op: &'static str, a: &TensorType, b: &TensorType) -> Result<(), InferError> {
    same_shape(op, &a.shape, &b.shape)?;
    if a.dtype != b.dtype {
        return Err(dtype_err(op, 1, b.dtype, "the same type as input 0"));
    }
    Ok(())
}

fn dense(op: &'static str, input: usize, t: &TensorType) -> Result<(), InferError> {
    if t.dtype.is_packed() {
        Err(dtype_err(op, input, t.dtype, "a dense type"))
    } else {
        Ok(())
    }
}

fn index_type(op: &'static str, input: usize, t: &TensorType) -> Result<(), InferError> {
    if t.dtype.is_index() {
        Ok(())
    } else {
        Err(dtype_err(op, input, t.dtype, "i32 or u32"))
    }
}

fn scalar_indices(op: &'static str, idx: &[&TensorType], first: usize) -> Result<(), InferError> {
    for (i, t) in idx.iter().enumerate() {
        index_type(op, first + i, t)?;
        if t.rank() != 0 {
            return Err(InferError::IndexRank {
                op,
                input: first + i,
                rank: t.rank(),
                expected: 0,
            });
        }
    }
    Ok(())
}

fn weight_type(op: &'static str, input: usize, t: &TensorType) -> Result<(), InferError> {
    match t.dtype {
        DType::F32 | DType::F16 | DType::BF16 => Ok(()),
        DType::Packed(g) => {
            let k = t.dims().last().copied().unwrap_or(0);
            if k % g.block_elems() == 0 {
                Ok(())
            } else {
                Err(InferError::PackedBlocks {
                    op,
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                })
            }
        }
        DType::Components(_) => check_components(op, t),
        d => Err(dtype_err(op, input, d, "f32, f16, bf16 or packed")),
    }
}

/// Checks that a component-format value's shape is one its format stores.
pub(crate) fn check_components(op: &'static str, t: &TensorType) -> Result<(), InferError> {
    match t.dtype {
        DType::Components(c) => {
            c.components(t.dims())
                .map(|_| ())
                .map_err(|source| InferError::ComponentShape {
                    op,
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                    source: Box::new(source),
                })
        }
        _ => Ok(()),
    }
}

fn checked_elems(op: &'static str, shape: &Shape) -> Result<usize, InferError> {
    shape.n_elems().ok_or(InferError::Overflow { op })
}

fn keep_axis(dims: &[usize], axis: usize) -> Vec<usize> {
    let mut out = dims.to_vec();
    out[axis] = 1;
    out
}
