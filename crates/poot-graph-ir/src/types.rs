//! Element types, shapes and tensor types: what the tracer knows about a value.

use std::fmt;

use poot_formats::GgmlType;

use crate::component_format::ComponentFormat;

/// The element type of a graph value.
///
/// Arithmetic is defined on `F32`, `I32` and `U32`; `F16` and `BF16` are storage types that the
/// graph reads through an explicit [`crate::OpKind::Cast`] (or as a contraction's weight). A
/// `Packed` value is a constant stored in a block format and a `Components` value a constant
/// stored as several component tensors; only ops that read weights accept them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    I32,
    U32,
    U8,
    Bool,
    /// A constant stored as rows of ggml blocks along its last axis.
    Packed(GgmlType),
    /// A rank-2 `[N, K]` constant stored as the component tensors of a Hugging Face packed
    /// layout (GPTQ, AWQ, FP8, FP4), bound by role; see [`ComponentFormat`].
    Components(ComponentFormat),
}

impl DType {
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32 | DType::U8)
    }

    /// Types an elementwise op computes in (storage-only types must be cast first).
    pub fn is_arithmetic(self) -> bool {
        matches!(self, DType::F32 | DType::I32 | DType::U32)
    }

    /// Types that may index (gather, scatter, dynamic slices).
    pub fn is_index(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    /// Bytes per element of a dense type; `None` for a packed type (whose size is per block).
    pub fn size_bytes(self) -> Option<usize> {
        match self {
            DType::F32 | DType::I32 | DType::U32 => Some(4),
            DType::F16 | DType::BF16 => Some(2),
            DType::U8 | DType::Bool => Some(1),
            DType::Packed(_) | DType::Components(_) => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::U8 => "u8",
            DType::Bool => "bool",
            DType::Packed(g) => g.name(),
            DType::Components(c) => c.name(),
        }
    }

    /// Whether values of this type are stored weights only contractions (and, for ggml blocks,
    /// row gathers) read: `Packed` and `Components`.
    pub fn is_packed(self) -> bool {
        matches!(self, DType::Packed(_) | DType::Components(_))
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DType::Components(c) => c.fmt(f),
            d => f.write_str(d.name()),
        }
    }
}

/// A static shape, outermost axis first (row-major).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<usize>);

impl Shape {
    pub fn new(dims: impl Into<Vec<usize>>) -> Shape {
        Shape(dims.into())
    }

    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// The number of elements, or `None` on overflow.
    pub fn n_elems(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Row-major strides in elements (the caller has checked `n_elems` does not overflow).
    pub fn strides(&self) -> Vec<usize> {
        let mut strides = vec![1; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.0[i + 1];
        }
        strides
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Shape {
        Shape(v)
    }
}

impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Shape {
        Shape(v.to_vec())
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Shape {
        Shape(v.to_vec())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// The type of a value: element type and static shape. Computed on the host at trace time.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<Shape>) -> TensorType {
        TensorType {
            dtype,
            shape: shape.into(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }

    /// Bytes the value occupies as stored (every component of a `Components` value together),
    /// or `None` on overflow or a packed shape that is not whole blocks along its last axis (not
    /// a valid shape of its component format).
    pub fn size_bytes(&self) -> Option<u64> {
        let n = self.shape.n_elems()? as u64;
        match self.dtype {
            DType::Components(c) => c.size_bytes(self.shape.dims()),
            DType::Packed(g) => {
                let row = *self.shape.dims().last()? as u64;
                let rows = n.checked_div(row).unwrap_or(0);
                g.bytes_for(row)?.checked_mul(rows)
            }
            d => n.checked_mul(d.size_bytes()? as u64),
        }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}

/// Identifies a value within one graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}
