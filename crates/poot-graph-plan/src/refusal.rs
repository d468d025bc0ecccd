//! Why a graph cannot be planned for a target. A refusal is a normal outcome: it names the op or
//! constant, what was asked, and what the target allows.

use poot_graph_ir::{DType, ValidationError};

use crate::kernel::KernelError;
use crate::target::Backend;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A constant too large for one buffer of the target.
    #[error(
        "{backend}: constant `{name}` needs a buffer of {needed_bytes} bytes (the device's single-buffer limit is {limit_bytes})"
    )]
    ConstantTooLarge {
        backend: Backend,
        name: String,
        needed_bytes: u64,
        limit_bytes: u64,
    },
    /// An intermediate, slot or state too large for one buffer of the target.
    #[error(
        "{backend}: value `{label}` needs a buffer of {needed_bytes} bytes (the device's single-buffer limit is {limit_bytes})"
    )]
    ValueTooLarge {
        backend: Backend,
        label: String,
        needed_bytes: u64,
        limit_bytes: u64,
    },
    /// A kernel would bind more buffers than the target allows.
    #[error("{backend}: kernel `{kernel}` binds {needed} buffers (the device allows {limit})")]
    TooManyBindings {
        backend: Backend,
        kernel: String,
        needed: u32,
        limit: u32,
    },
    /// An op reads a stored type the target has no lowering for.
    #[error("{backend}: `{op}` at `{label}` cannot read {dtype}")]
    UnsupportedType {
        backend: Backend,
        op: &'static str,
        label: String,
        dtype: DType,
    },
    /// A value's element count does not fit 32-bit kernel indexing.
    #[error("value `{label}` has {n_elems} elements; kernels index with 32 bits")]
    IndexOverflow { label: String, n_elems: u64 },
    /// A value the planner neither buffered nor can compute in place (a planner bug).
    #[error("value `{label}` has no placement the planner can lower")]
    Unplaced { label: String },
    /// The graph failed validation (it was edited into a bad state).
    #[error(transparent)]
    Graph(#[from] ValidationError),
    /// A packed decode was built without its codebook tables (a planner bug).
    #[error(transparent)]
    Dequant(#[from] crate::lower::dequant::DequantError),
    /// The planner built a malformed kernel (a planner bug).
    #[error(transparent)]
    Kernel(#[from] KernelError),
}
