//! Elementwise unary ops.
//!
//! f32 semantics: `neg`, `abs`, `floor`, `ceil` are exact; `sqrt` is IEEE (correctly rounded);
//! `recip` is `1 / x` and `rsqrt` is `1 / sqrt(x)`, both in f32 (so `rsqrt` rounds twice).
//! `exp`, `log`, `tanh`, `erf`, `sin` and `cos` are evaluated in f64 with the `libm` crate (a
//! port of musl's, the same on every host) and rounded once to f32, so they are within about
//! half an ulp of the exact value and do not depend on the platform's math library.
//!
//! Integers: `neg` and `abs` wrap (`abs(i32::MIN) = i32::MIN`); `not` is bitwise on integers and
//! logical on bool.

use poot_graph_ir::UnaryOp;

use crate::error::Fault;
use crate::tensor::{HostTensor, TensorData};

/// The f32 meaning of `op`, or `None` when `op` is not defined on f32.
pub(crate) fn f32_fn(op: UnaryOp) -> Option<fn(f32) -> f32> {
    Some(match op {
        UnaryOp::Neg => |x: f32| -x,
        UnaryOp::Abs => f32::abs,
        UnaryOp::Exp => |x| libm::exp(f64::from(x)) as f32,
        UnaryOp::Log => |x| libm::log(f64::from(x)) as f32,
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Rsqrt => |x: f32| 1.0 / x.sqrt(),
        UnaryOp::Recip => |x: f32| 1.0 / x,
        UnaryOp::Tanh => |x| libm::tanh(f64::from(x)) as f32,
        UnaryOp::Erf => |x| libm::erf(f64::from(x)) as f32,
        UnaryOp::Floor => f32::floor,
        UnaryOp::Ceil => f32::ceil,
        UnaryOp::Round => f32::round_ties_even,
        UnaryOp::Sin => |x| libm::sin(f64::from(x)) as f32,
        UnaryOp::Cos => |x| libm::cos(f64::from(x)) as f32,
        UnaryOp::Not => return None,
    })
}

pub(crate) fn unary(op: UnaryOp, x: &HostTensor<'_>) -> Result<TensorData<'static>, Fault> {
    let unsupported = Fault::Unsupported {
        input: 0,
        dtype: x.dtype(),
    };
    Ok(match x.data() {
        TensorData::F32(v) => {
            let f = f32_fn(op).ok_or(unsupported)?;
            TensorData::F32(v.iter().map(|&a| f(a)).collect())
        }
        TensorData::I32(v) => {
            let f: fn(i32) -> i32 = match op {
                UnaryOp::Neg => i32::wrapping_neg,
                UnaryOp::Abs => i32::wrapping_abs,
                UnaryOp::Not => |a: i32| !a,
                _ => return Err(unsupported),
            };
            TensorData::I32(v.iter().map(|&a| f(a)).collect())
        }
        TensorData::U32(v) if op == UnaryOp::Not => {
            TensorData::U32(v.iter().map(|&a| !a).collect())
        }
        TensorData::Bool(v) if op == UnaryOp::Not => {
            TensorData::Bool(v.iter().map(|&a| !a).collect())
        }
        _ => return Err(unsupported),
    })
}
