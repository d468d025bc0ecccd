//! Typed access to tensor data: one generic element trait so movement and indexing ops are
//! written once for every dense type.

use std::borrow::Cow;

use half::{bf16, f16};

use crate::error::Fault;
use crate::tensor::{HostTensor, TensorData};

/// A dense element type as the evaluator holds it.
pub(crate) trait Elem: Copy + Send + Sync + 'static {
    /// The elements of `d` when it holds this type.
    fn slice<'t>(d: &'t TensorData<'_>) -> Option<&'t [Self]>;
    /// Owned elements of `d` when it holds this type (copies only if borrowed).
    fn take(d: TensorData<'_>) -> Option<Vec<Self>>;
    fn wrap(v: Vec<Self>) -> TensorData<'static>;
}

macro_rules! elem {
    ($t:ty, $variant:ident) => {
        impl Elem for $t {
            fn slice<'t>(d: &'t TensorData<'_>) -> Option<&'t [$t]> {
                match d {
                    TensorData::$variant(v) => Some(v),
                    _ => None,
                }
            }

            fn take(d: TensorData<'_>) -> Option<Vec<$t>> {
                match d {
                    TensorData::$variant(v) => Some(v.into_owned()),
                    _ => None,
                }
            }

            fn wrap(v: Vec<$t>) -> TensorData<'static> {
                TensorData::$variant(Cow::Owned(v))
            }
        }
    };
}

elem!(f32, F32);
elem!(f16, F16);
elem!(bf16, BF16);
elem!(i32, I32);
elem!(u32, U32);
elem!(u8, U8);
elem!(bool, Bool);

/// The elements of input `input` as `T`, or the fault naming its actual type.
pub(crate) fn typed<'t, T: Elem>(t: &'t HostTensor<'_>, input: usize) -> Result<&'t [T], Fault> {
    T::slice(t.data()).ok_or(Fault::Unsupported {
        input,
        dtype: t.dtype(),
    })
}

/// Calls `$f::<T>($args)` for the dense element type `T` of dtype `$dtype` (the type of input
/// `$input`); a packed dtype is a fault.
macro_rules! dispatch_dense {
    ($dtype:expr, $input:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $dtype {
            poot_graph_ir::DType::F32 => $f::<f32>($($arg),*),
            poot_graph_ir::DType::F16 => $f::<half::f16>($($arg),*),
            poot_graph_ir::DType::BF16 => $f::<half::bf16>($($arg),*),
            poot_graph_ir::DType::I32 => $f::<i32>($($arg),*),
            poot_graph_ir::DType::U32 => $f::<u32>($($arg),*),
            poot_graph_ir::DType::U8 => $f::<u8>($($arg),*),
            poot_graph_ir::DType::Bool => $f::<bool>($($arg),*),
            dtype @ (poot_graph_ir::DType::Packed(_) | poot_graph_ir::DType::Components(_)) => {
                Err($crate::error::Fault::Unsupported { input: $input, dtype })
            }
        }
    };
}
pub(crate) use dispatch_dense;

/// Runtime indices (i32 or u32) widened to i64.
pub(crate) enum Indices<'t> {
    I32(&'t [i32]),
    U32(&'t [u32]),
}

impl<'t> Indices<'t> {
    pub(crate) fn of(t: &'t HostTensor<'_>, input: usize) -> Result<Indices<'t>, Fault> {
        match t.data() {
            TensorData::I32(v) => Ok(Indices::I32(v)),
            TensorData::U32(v) => Ok(Indices::U32(v)),
            _ => Err(Fault::Unsupported {
                input,
                dtype: t.dtype(),
            }),
        }
    }

    fn get(&self, i: usize) -> Option<i64> {
        match self {
            Indices::I32(v) => v.get(i).map(|&x| i64::from(x)),
            Indices::U32(v) => v.get(i).map(|&x| i64::from(x)),
        }
    }

    /// Every index, checked to lie in `[0, bound)`; the first that does not is the fault,
    /// naming its operand `input` and its flat position.
    pub(crate) fn checked(&self, input: usize, bound: usize) -> Result<Vec<usize>, Fault> {
        let check = |(element, index): (usize, i64)| {
            usize::try_from(index)
                .ok()
                .filter(|&i| i < bound)
                .ok_or(Fault::IndexOutOfRange {
                    input,
                    element,
                    index,
                    bound,
                })
        };
        match self {
            Indices::I32(v) => v
                .iter()
                .map(|&x| i64::from(x))
                .enumerate()
                .map(check)
                .collect(),
            Indices::U32(v) => v
                .iter()
                .map(|&x| i64::from(x))
                .enumerate()
                .map(check)
                .collect(),
        }
    }
}

/// A rank-0 index operand's value.
pub(crate) fn scalar_index(t: &HostTensor<'_>, input: usize) -> Result<i64, Fault> {
    let idx = Indices::of(t, input)?;
    idx.get(0).ok_or(Fault::Unsupported {
        input,
        dtype: t.dtype(),
    })
}

/// The product of `dims`. Shapes in a validated graph never overflow, so this saturates rather
/// than failing.
pub(crate) fn product(dims: &[usize]) -> usize {
    dims.iter().fold(1usize, |a, &d| a.saturating_mul(d))
}

/// `(outer, dim, inner)` around `axis` of `dims`: the products of the dims before it, the axis
/// itself, and the dims after it. Total for any axis (a validated graph keeps it in range).
pub(crate) fn around(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = product(dims.get(..axis).unwrap_or(dims));
    let dim = dims.get(axis).copied().unwrap_or(1);
    let inner = product(dims.get(axis + 1..).unwrap_or(&[]));
    (outer, dim, inner)
}
