//! `Cast`: converts between every pair of dense types.
//!
//! - To f32: f16/bf16 widen exactly; integers round to nearest even; bool is 0 or 1.
//! - To f16/bf16: round to nearest even (via `half`), from f32 directly and from any other type
//!   through its f32 value (integers first round to f32, so a large integer to bf16 rounds twice);
//!   NaN stays NaN, overflow goes to infinity.
//! - Float to integer: truncate toward zero and saturate at the target's bounds; NaN is 0.
//! - Integer to integer: two's-complement wrap to the target width (the low bits), u8 and u32
//!   zero-extend, i32 sign-extends.
//! - To bool: `x != 0` (so NaN is true, `-0` false).
//! - To the same type: the elements unchanged, bit for bit.

use half::{bf16, f16};
use poot_graph_ir::DType;

use crate::error::Fault;
use crate::tensor::{HostTensor, TensorData};

/// One source element, widened without loss.
#[derive(Clone, Copy)]
enum Num {
    Float(f32),
    Int(i64),
    Bool(bool),
}

impl Num {
    fn f32(self) -> f32 {
        match self {
            Num::Float(x) => x,
            Num::Int(i) => i as f32,
            Num::Bool(b) => f32::from(u8::from(b)),
        }
    }
}

/// Converts a number to an integer type: floats truncate and saturate (NaN is 0), integers wrap.
macro_rules! to_int {
    ($n:expr, $t:ty) => {
        match $n {
            Num::Float(x) => x as $t,
            Num::Int(i) => i as $t,
            Num::Bool(b) => <$t>::from(b),
        }
    };
}

fn source<'t>(x: &'t HostTensor<'_>) -> Result<Box<dyn Iterator<Item = Num> + 't>, Fault> {
    Ok(match x.data() {
        TensorData::F32(v) => Box::new(v.iter().map(|&a| Num::Float(a))),
        TensorData::F16(v) => Box::new(v.iter().map(|a| Num::Float(a.to_f32()))),
        TensorData::BF16(v) => Box::new(v.iter().map(|a| Num::Float(a.to_f32()))),
        TensorData::I32(v) => Box::new(v.iter().map(|&a| Num::Int(i64::from(a)))),
        TensorData::U32(v) => Box::new(v.iter().map(|&a| Num::Int(i64::from(a)))),
        TensorData::U8(v) => Box::new(v.iter().map(|&a| Num::Int(i64::from(a)))),
        TensorData::Bool(v) => Box::new(v.iter().map(|&a| Num::Bool(a))),
        TensorData::Packed(_) | TensorData::Components(_) => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: x.dtype(),
            });
        }
    })
}

pub(crate) fn cast(x: &HostTensor<'_>, to: DType) -> Result<TensorData<'static>, Fault> {
    if x.dtype() == to {
        return Ok(x.data().clone().into_owned());
    }
    // The common storage reads are direct.
    match (x.data(), to) {
        (TensorData::F16(v), DType::F32) => {
            return Ok(TensorData::F32(v.iter().map(|a| a.to_f32()).collect()));
        }
        (TensorData::BF16(v), DType::F32) => {
            return Ok(TensorData::F32(v.iter().map(|a| a.to_f32()).collect()));
        }
        (TensorData::F32(v), DType::F16) => {
            return Ok(TensorData::F16(
                v.iter().map(|&a| f16::from_f32(a)).collect(),
            ));
        }
        (TensorData::F32(v), DType::BF16) => {
            return Ok(TensorData::BF16(
                v.iter().map(|&a| bf16::from_f32(a)).collect(),
            ));
        }
        _ => {}
    }
    let src = source(x)?;
    Ok(match to {
        DType::F32 => TensorData::F32(src.map(Num::f32).collect()),
        DType::F16 => TensorData::F16(src.map(|n| f16::from_f32(n.f32())).collect()),
        DType::BF16 => TensorData::BF16(src.map(|n| bf16::from_f32(n.f32())).collect()),
        DType::I32 => TensorData::I32(src.map(|n| to_int!(n, i32)).collect()),
        DType::U32 => TensorData::U32(src.map(|n| to_int!(n, u32)).collect()),
        DType::U8 => TensorData::U8(src.map(|n| to_int!(n, u8)).collect()),
        DType::Bool => TensorData::Bool(
            src.map(|n| match n {
                Num::Float(a) => a != 0.0,
                Num::Int(i) => i != 0,
                Num::Bool(b) => b,
            })
            .collect(),
        ),
        DType::Packed(_) | DType::Components(_) => {
            return Err(Fault::Unsupported {
                input: 0,
                dtype: to,
            });
        }
    })
}
