//! The meaning of each primitive, one concept per file. [`crate::eval`] dispatches here.

pub(crate) mod binary;
pub(crate) mod cast;
pub(crate) mod compare;
pub(crate) mod dot;
pub(crate) mod elem;
pub(crate) mod indexing;
pub(crate) mod matmul;
pub(crate) mod movement;
pub(crate) mod reduce;
pub(crate) mod source;
pub(crate) mod strided;
pub(crate) mod topk;
pub(crate) mod unary;
pub(crate) mod weights;
