//! poot's CPU oracle: the meaning of every primitive op.
//!
//! [`eval`] walks a [`poot_graph_ir::Graph`] equation by equation on the host and returns its
//! outputs, its carried state and (optionally) every intermediate value. Devices are checked
//! against it; generation never calls it.
//!
//! # Semantics
//!
//! The rules every device is compared against. Each op's module (under `ops/`) repeats its own.
//!
//! **Floats.** f32 arithmetic is IEEE single: `add`, `sub`, `mul`, `div`, `sqrt` round once;
//! `recip` is `1 / x`; `rsqrt` is `1 / sqrt(x)` in f32 (two roundings). `exp`, `log`, `tanh`,
//! `erf`, `sin`, `cos` and `pow` are computed in f64 with the `libm` crate and rounded once, so
//! they are within about half an ulp of exact and identical on every host. No product is fused
//! into an FMA.
//!
//! **Accumulation.** Reduce sums and contractions accumulate in f32 in a fixed order (eight
//! interleaved partial sums for a contiguous reduction or dot product, left to right along a
//! strided axis or over `k` for an untransposed rhs), or in f64 with one final rounding when
//! [`EvalOptions::accumulate_f64`] is set. Results never depend on the thread count.
//!
//! **NaN and zeros.** Binary and reduce `max`/`min` propagate NaN and order `-0 < +0`.
//! Comparisons are IEEE (NaN is unequal to everything). `ArgMax` returns the first maximum and
//! `ArgTopK` sorts descending with ties to the lower index; both rank NaN above every number, so
//! they point where `max` would return NaN.
//!
//! **Integers.** `add`, `sub`, `mul`, `neg`, `abs` and integer sums wrap. `div` truncates toward
//! zero and `rem` takes the dividend's sign; a zero divisor is [`Fault::DivisionByZero`], and
//! `i32::MIN / -1` wraps. Shifts take the right operand modulo 32; `shr` is arithmetic on i32 and
//! logical on u32.
//!
//! **Casts.** F16 and BF16 are storage types, read through `Cast` or as a contraction's weight.
//! Into f16/bf16: round to nearest even (via `half`), integers through their f32 value. Float to
//! integer: truncate toward zero, saturate, NaN to 0. Integer to integer: wrap to the target
//! width. To bool: `x != 0` (NaN is true). Same type: unchanged.
//!
//! **Weights.** `MatMul`/`IndexedMatMul` read an f16, bf16 or packed rhs as stored, converting or
//! decoding (through `poot-formats`) one weight row at a time, once per call, and contracting it
//! with every lhs row that needs it. A component-format weight (GPTQ, AWQ, FP8, FP4) is decoded a
//! whole row at a time from its components, exactly as `PackedFormat::decode_row` does. `Gather` of a packed rank-2 table decodes only the gathered
//! rows, to f32.
//!
//! **Collectives.** `AllReduceSum` sums one value over the graphs of a tensor-parallel group;
//! `BroadcastFrom` hands every rank the root rank's value (a layer pipeline's hand-over between
//! stages). Alone, a group of one is the identity for both; [`eval_group`] runs a group's graphs
//! in lockstep, summing in rank order and copying the root's value (see its module).
//!
//! **Indices.** Runtime indices (gather, take-along, scatter, expert ids) and dynamic window
//! starts are never wrapped or clamped: one outside its axis is [`Fault::IndexOutOfRange`] or
//! [`Fault::WindowOutOfRange`], naming the equation. With repeated scatter indices the last
//! update wins. Reductions keep the reduced axis with size 1; an empty sum is 0, an empty max or
//! min its identity, an empty arg-max a fault.

mod error;
mod eval;
mod evaluation;
mod group;
mod inputs;
mod ops;
mod options;
mod packed;
mod tensor;

pub use error::{EvalError, Fault, InputKind};
pub use eval::eval;
pub use evaluation::Evaluation;
pub use group::eval_group;
pub use inputs::Inputs;
pub use options::EvalOptions;
pub use packed::DecodeError;
pub use tensor::{Component, HostTensor, TensorData, TensorError};
