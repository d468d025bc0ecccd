//! Elementwise binary ops over two operands of one type and one shape.
//!
//! f32: `add`, `sub`, `mul`, `div` are IEEE single; `max` and `min` propagate NaN and order
//! `-0 < +0` (IEEE 754-2019 `maximum`/`minimum`); `pow` is evaluated in f64 with `libm` and
//! rounded once.
//!
//! Integers: `add`, `sub`, `mul` wrap; `div` truncates toward zero and `rem` takes the
//! dividend's sign, both a [`Fault::DivisionByZero`] on a zero divisor, and `i32::MIN / -1`
//! wraps to `i32::MIN` (`i32::MIN % -1 = 0`). `shl`/`shr` shift by the right operand modulo 32;
//! `shr` is arithmetic on i32 and logical on u32. `and`/`or`/`xor` are bitwise on integers and
//! logical on bool.

use poot_graph_ir::BinaryOp;

use crate::error::Fault;
use crate::tensor::{HostTensor, TensorData};

/// IEEE 754-2019 `maximum`: NaN if either is NaN, and `+0` over `-0`.
pub(crate) fn max_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        f32::from_bits(a.to_bits() & b.to_bits())
    } else if a > b {
        a
    } else {
        b
    }
}

/// IEEE 754-2019 `minimum`: NaN if either is NaN, and `-0` under `+0`.
pub(crate) fn min_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a == b {
        f32::from_bits(a.to_bits() | b.to_bits())
    } else if a < b {
        a
    } else {
        b
    }
}

fn zip<T: Copy, U>(a: &[T], b: &[T], f: impl Fn(T, T) -> U) -> Vec<U> {
    a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
}

/// `f` over the pairs, failing at the first element where it fails.
fn try_zip<T: Copy, U>(
    a: &[T],
    b: &[T],
    f: impl Fn(T, T) -> Option<U>,
    fault: impl Fn(usize) -> Fault,
) -> Result<Vec<U>, Fault> {
    a.iter()
        .zip(b)
        .enumerate()
        .map(|(i, (&x, &y))| f(x, y).ok_or_else(|| fault(i)))
        .collect()
}

/// Integer division and remainder: `None` on a zero divisor, wrapping otherwise.
trait IntDiv: Copy {
    fn div(self, rhs: Self) -> Option<Self>;
    fn rem(self, rhs: Self) -> Option<Self>;
}

impl IntDiv for i32 {
    fn div(self, rhs: i32) -> Option<i32> {
        (rhs != 0).then(|| self.wrapping_div(rhs))
    }
    fn rem(self, rhs: i32) -> Option<i32> {
        (rhs != 0).then(|| self.wrapping_rem(rhs))
    }
}

impl IntDiv for u32 {
    fn div(self, rhs: u32) -> Option<u32> {
        self.checked_div(rhs)
    }
    fn rem(self, rhs: u32) -> Option<u32> {
        self.checked_rem(rhs)
    }
}

fn int_div<T: IntDiv>(op: BinaryOp, a: &[T], b: &[T]) -> Result<Vec<T>, Fault> {
    match op {
        BinaryOp::Rem => try_zip(a, b, T::rem, |element| Fault::DivisionByZero {
            op: "rem",
            element,
        }),
        _ => try_zip(a, b, T::div, |element| Fault::DivisionByZero {
            op: "div",
            element,
        }),
    }
}

pub(crate) fn binary(
    op: BinaryOp,
    x: &HostTensor<'_>,
    y: &HostTensor<'_>,
) -> Result<TensorData<'static>, Fault> {
    let unsupported = Fault::Unsupported {
        input: 0,
        dtype: x.dtype(),
    };
    Ok(match (x.data(), y.data()) {
        (TensorData::F32(a), TensorData::F32(b)) => TensorData::F32(
            match op {
                BinaryOp::Add => zip(a, b, |p, q| p + q),
                BinaryOp::Sub => zip(a, b, |p, q| p - q),
                BinaryOp::Mul => zip(a, b, |p, q| p * q),
                BinaryOp::Div => zip(a, b, |p, q| p / q),
                BinaryOp::Max => zip(a, b, max_f32),
                BinaryOp::Min => zip(a, b, min_f32),
                BinaryOp::Pow => zip(a, b, |p, q| libm::pow(f64::from(p), f64::from(q)) as f32),
                BinaryOp::Rem
                | BinaryOp::And
                | BinaryOp::Or
                | BinaryOp::Xor
                | BinaryOp::Shl
                | BinaryOp::Shr => {
                    return Err(unsupported);
                }
            }
            .into(),
        ),
        (TensorData::I32(a), TensorData::I32(b)) => TensorData::I32(
            match op {
                BinaryOp::Add => zip(a, b, i32::wrapping_add),
                BinaryOp::Sub => zip(a, b, i32::wrapping_sub),
                BinaryOp::Mul => zip(a, b, i32::wrapping_mul),
                BinaryOp::Div | BinaryOp::Rem => int_div(op, a, b)?,
                BinaryOp::Max => zip(a, b, i32::max),
                BinaryOp::Min => zip(a, b, i32::min),
                BinaryOp::And => zip(a, b, |p, q| p & q),
                BinaryOp::Or => zip(a, b, |p, q| p | q),
                BinaryOp::Xor => zip(a, b, |p, q| p ^ q),
                BinaryOp::Shl => zip(a, b, |p, q| p.wrapping_shl(q as u32)),
                BinaryOp::Shr => zip(a, b, |p, q| p.wrapping_shr(q as u32)),
                BinaryOp::Pow => return Err(unsupported),
            }
            .into(),
        ),
        (TensorData::U32(a), TensorData::U32(b)) => TensorData::U32(
            match op {
                BinaryOp::Add => zip(a, b, u32::wrapping_add),
                BinaryOp::Sub => zip(a, b, u32::wrapping_sub),
                BinaryOp::Mul => zip(a, b, u32::wrapping_mul),
                BinaryOp::Div | BinaryOp::Rem => int_div(op, a, b)?,
                BinaryOp::Max => zip(a, b, u32::max),
                BinaryOp::Min => zip(a, b, u32::min),
                BinaryOp::And => zip(a, b, |p, q| p & q),
                BinaryOp::Or => zip(a, b, |p, q| p | q),
                BinaryOp::Xor => zip(a, b, |p, q| p ^ q),
                BinaryOp::Shl => zip(a, b, u32::wrapping_shl),
                BinaryOp::Shr => zip(a, b, u32::wrapping_shr),
                BinaryOp::Pow => return Err(unsupported),
            }
            .into(),
        ),
        (TensorData::Bool(a), TensorData::Bool(b)) => TensorData::Bool(
            match op {
                BinaryOp::And => zip(a, b, |p, q| p & q),
                BinaryOp::Or => zip(a, b, |p, q| p | q),
                BinaryOp::Xor => zip(a, b, |p, q| p ^ q),
                BinaryOp::Add
                | BinaryOp::Sub
                | BinaryOp::Mul
                | BinaryOp::Div
                | BinaryOp::Rem
                | BinaryOp::Max
                | BinaryOp::Min
                | BinaryOp::Pow
                | BinaryOp::Shl
                | BinaryOp::Shr => return Err(unsupported),
            }
            .into(),
        ),
        _ => return Err(unsupported),
    })
}
