//! poot's graph IR.
//!
//! A model is an ordinary function over a [`Builder`]: it declares constants (weights), slots
//! (per-step inputs) and state (the KV cache), and records primitive equations through
//! [`Traced`] handles that carry types but no data. [`Builder::finish`] returns a validated
//! [`Graph`], which the CPU oracle (`poot-eval`) evaluates and the planner lowers. Composite
//! operations (norms, rotary embeddings, attention) are helpers in [`ops`] that emit
//! primitives; none of them is an op.

pub mod analysis;
mod builder;
mod component_format;
mod graph;
mod limits;
mod op;
pub mod ops;
mod storage;
pub mod text;
mod types;

pub use builder::{Builder, BuilderError, Extension, Outputs, Traced};
pub use component_format::{ComponentFormat, component_const_name};
pub use graph::{Eqn, Graph, GraphEdit, OutputIds, ValidationError, ValueInfo};
pub use limits::{Resource, TraceLimits, Usage};
pub use op::{BinaryOp, CollectiveOp, CompareOp, InferError, OpKind, ReduceOp, Scalar, UnaryOp};
pub use poot_formats::{GgmlType, PackedFormat};
pub use storage::{Slot, Storage};
pub use types::{DType, Shape, TensorType, ValueId};
