//! A CPU evaluator of one kernel [`Expr`], for tests: what a single thread computes for an
//! expression, given the buffers, variables and built-ins it reads.
//!
//! The meaning follows the IR's documentation: f32 operations are IEEE binary32, each rounded on
//! its own (no fused multiply-add); integer arithmetic wraps; `LoadByte` and `LoadHalf` read
//! little-endian u32 words; F16 halves widen exactly (subnormals, infinities and NaNs included)
//! and BF16 halves are the top 16 bits of an f32. Casts follow [`Expr::Cast`]: float to integer
//! truncates toward zero and saturates (NaN to 0), integer to float rounds to nearest, i32 and
//! u32 convert into each other by their bits.
//!
//! Both arms of a `Select` are evaluated, as a device would, so an out-of-range load in the arm
//! not taken is still reported.
//!
//! What the IR leaves to the device is reported instead of guessed: a shift by 32 or more, an
//! integer division by zero. Transcendental functions (`Exp`, `Log`, `Tanh`, `Erf`, `Sin`, `Cos`,
//! `Pow`, `Rsqrt`) are computed in f64 and rounded to f32, which is closer than any device's
//! approximation, never bit-matched to one.

use std::collections::HashMap;

use poot_formats::scalar::f16_to_f32;

use super::ir::{BinOp, Builtin, CmpOp, Expr, Half, ParamId, SharedId, Ty, UnOp, Var, Word};

/// A kernel value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    F32(f32),
    I32(i32),
    U32(u32),
    Bool(bool),
}

impl Value {
    pub fn ty(self) -> Ty {
        match self {
            Value::F32(_) => Ty::F32,
            Value::I32(_) => Ty::I32,
            Value::U32(_) => Ty::U32,
            Value::Bool(_) => Ty::Bool,
        }
    }
}

/// Why an expression could not be evaluated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A buffer parameter the environment does not bind.
    #[error("parameter {0} is not bound")]
    UnboundParam(u32),
    /// A value read from another thread (a shuffle): one thread's environment has no answer.
    #[error("a shuffle reads another thread's value")]
    CrossThread,
    /// A shared array the environment does not bind.
    #[error("shared array {0} is not bound")]
    UnboundShared(u32),
    /// A variable the environment does not bind.
    #[error("variable {0} is not bound")]
    UnboundVar(u32),
    /// A built-in the environment does not set.
    #[error("built-in {0:?} is not set")]
    UnboundBuiltin(Builtin),
    /// A load past the end of a buffer: `index` in the load's unit (words, bytes or halves).
    #[error("{unit} {index} of parameter {param} is out of range ({len_words} words)")]
    OutOfRange {
        param: u32,
        unit: &'static str,
        index: u32,
        len_words: usize,
    },
    /// A load past the end of a shared array.
    #[error("element {index} of shared array {arr} is out of range ({len} elements)")]
    SharedOutOfRange { arr: u32, index: u32, len: usize },
    /// A byte or half load from a buffer whose words are not u32.
    #[error("sub-word load from parameter {param}, a {word:?} buffer")]
    SubWordLoad { param: u32, word: Word },
    /// An expression evaluated as an f32 that is of another type.
    #[error("value of type {0}, expected f32")]
    NotF32(Ty),
    /// An index (of a load, or an expression evaluated as a u32) that is not a u32.
    #[error("index of type {0}, expected u32")]
    IndexType(Ty),
    /// A unary operator applied to a type it does not take.
    #[error("{op:?} of {ty}")]
    UnaryType { op: UnOp, ty: Ty },
    /// A binary operator applied to types it does not take.
    #[error("{op:?} of {left} and {right}")]
    BinaryType { op: BinOp, left: Ty, right: Ty },
    /// A comparison of two different types.
    #[error("{op:?} of {left} and {right}")]
    CmpType { op: CmpOp, left: Ty, right: Ty },
    /// A select whose condition is not bool or whose arms differ in type.
    #[error("select on {cond} between {on_true} and {on_false}")]
    SelectType { cond: Ty, on_true: Ty, on_false: Ty },
    /// A shift by 32 bits or more, which backends define differently.
    #[error("shift by {amount} bits")]
    ShiftTooLarge { amount: u32 },
    /// An integer division or remainder by zero, which backends define differently.
    #[error("integer {op:?} by zero")]
    DivideByZero { op: BinOp },
}

/// A buffer as a kernel sees it: its word type and its words (f32 and i32 as their bits).
#[derive(Clone, Copy, Debug)]
pub struct Buffer<'a> {
    pub word: Word,
    pub words: &'a [u32],
}

/// What an expression reads: bound buffers, shared arrays, variables and built-ins.
#[derive(Clone, Debug, Default)]
pub struct Env<'a> {
    buffers: HashMap<ParamId, Buffer<'a>>,
    shared: HashMap<SharedId, &'a [Value]>,
    vars: HashMap<Var, Value>,
    builtins: HashMap<Builtin, u32>,
}

impl<'a> Env<'a> {
    pub fn new() -> Env<'a> {
        Env::default()
    }

    /// Binds buffer parameter `param` to `words` of type `word`.
    pub fn bind(&mut self, param: ParamId, word: Word, words: &'a [u32]) -> &mut Env<'a> {
        self.buffers.insert(param, Buffer { word, words });
        self
    }

    /// Binds shared array `arr` to `values`.
    pub fn bind_shared(&mut self, arr: SharedId, values: &'a [Value]) -> &mut Env<'a> {
        self.shared.insert(arr, values);
        self
    }

    /// Sets variable `var` to `value`.
    pub fn set_var(&mut self, var: Var, value: Value) -> &mut Env<'a> {
        self.vars.insert(var, value);
        self
    }

    /// Sets built-in `builtin` to `value`.
    pub fn set_builtin(&mut self, builtin: Builtin, value: u32) -> &mut Env<'a> {
        self.builtins.insert(builtin, value);
        self
    }

    /// The value of `e`.
    pub fn eval(&self, e: &Expr) -> Result<Value, EvalError> {
        Ok(match e {
            Expr::F32(v) => Value::F32(*v),
            Expr::I32(v) => Value::I32(*v),
            Expr::U32(v) => Value::U32(*v),
            Expr::Bool(v) => Value::Bool(*v),
            Expr::Var(v) => *self.vars.get(v).ok_or(EvalError::UnboundVar(v.0))?,
            Expr::Builtin(b) => {
                Value::U32(*self.builtins.get(b).ok_or(EvalError::UnboundBuiltin(*b))?)
            }
            Expr::Load { buf, index } => {
                let index = self.eval_index(index)?;
                let b = self.buffer(*buf)?;
                let w = word_at(*buf, b, "word", index, index)?;
                match b.word {
                    Word::F32 => Value::F32(f32::from_bits(w)),
                    Word::I32 => Value::I32(w as i32),
                    Word::U32 => Value::U32(w),
                }
            }
            Expr::LoadByte { buf, byte } => {
                let byte = self.eval_index(byte)?;
                let w = word_at(*buf, self.u32_buffer(*buf)?, "byte", byte, byte / 4)?;
                Value::U32((w >> (8 * (byte % 4))) & 0xff)
            }
            Expr::LoadHalf { buf, index, half } => {
                let index = self.eval_index(index)?;
                let w = word_at(*buf, self.u32_buffer(*buf)?, "half", index, index / 2)?;
                let bits = (w >> (16 * (index % 2))) & 0xffff;
                Value::F32(match half {
                    Half::F16 => f16_to_f32(bits as u16),
                    Half::Bf16 => f32::from_bits(bits << 16),
                })
            }
            Expr::LoadShared { arr, index } => {
                let index = self.eval_index(index)?;
                let values = self
                    .shared
                    .get(arr)
                    .ok_or(EvalError::UnboundShared(arr.0))?;
                *values
                    .get(index as usize)
                    .ok_or(EvalError::SharedOutOfRange {
                        arr: arr.0,
                        index,
                        len: values.len(),
                    })?
            }
            Expr::Unary(op, x) => unary(*op, self.eval(x)?)?,
            Expr::Binary(op, a, b) => binary(*op, self.eval(a)?, self.eval(b)?)?,
            Expr::Cmp(op, a, b) => compare(*op, self.eval(a)?, self.eval(b)?)?,
            Expr::Select {
                cond,
                on_true,
                on_false,
            } => {
                let (c, t, f) = (self.eval(cond)?, self.eval(on_true)?, self.eval(on_false)?);
                match c {
                    Value::Bool(c) if t.ty() == f.ty() => {
                        if c {
                            t
                        } else {
                            f
                        }
                    }
                    Value::Bool(_) | Value::F32(_) | Value::I32(_) | Value::U32(_) => {
                        return Err(EvalError::SelectType {
                            cond: c.ty(),
                            on_true: t.ty(),
                            on_false: f.ty(),
                        });
                    }
                }
            }
            Expr::MulAdd(a, b, c) => {
                let (a, b, c) = (self.eval_f32(a)?, self.eval_f32(b)?, self.eval_f32(c)?);
                Value::F32(a.mul_add(b, c))
            }
            Expr::Cast(to, x) => convert(*to, self.eval(x)?),
            Expr::ShuffleXor { .. } => return Err(EvalError::CrossThread),
        })
    }

    /// The value of `e`, which must be an f32.
    pub fn eval_f32(&self, e: &Expr) -> Result<f32, EvalError> {
        match self.eval(e)? {
            Value::F32(v) => Ok(v),
            v @ (Value::I32(_) | Value::U32(_) | Value::Bool(_)) => Err(EvalError::NotF32(v.ty())),
        }
    }

    /// The value of `e`, which must be a u32.
    pub fn eval_u32(&self, e: &Expr) -> Result<u32, EvalError> {
        self.eval_index(e)
    }

    fn eval_index(&self, e: &Expr) -> Result<u32, EvalError> {
        match self.eval(e)? {
            Value::U32(v) => Ok(v),
            v @ (Value::F32(_) | Value::I32(_) | Value::Bool(_)) => {
                Err(EvalError::IndexType(v.ty()))
            }
        }
    }

    fn buffer(&self, param: ParamId) -> Result<&Buffer<'a>, EvalError> {
        self.buffers
            .get(&param)
            .ok_or(EvalError::UnboundParam(param.0))
    }

    fn u32_buffer(&self, param: ParamId) -> Result<&Buffer<'a>, EvalError> {
        let b = self.buffer(param)?;
        match b.word {
            Word::U32 => Ok(b),
            Word::F32 | Word::I32 => Err(EvalError::SubWordLoad {
                param: param.0,
                word: b.word,
            }),
        }
    }
}

fn word_at(
    param: ParamId,
    b: &Buffer<'_>,
    unit: &'static str,
    index: u32,
    word: u32,
) -> Result<u32, EvalError> {
    b.words
        .get(word as usize)
        .copied()
        .ok_or(EvalError::OutOfRange {
            param: param.0,
            unit,
            index,
            len_words: b.words.len(),
        })
}

/// An f64 computation of an f32 function, rounded to f32.
fn via_f64(x: f32, f: fn(f64) -> f64) -> f32 {
    f(f64::from(x)) as f32
}

fn unary(op: UnOp, x: Value) -> Result<Value, EvalError> {
    let bad = || EvalError::UnaryType { op, ty: x.ty() };
    Ok(match (op, x) {
        (UnOp::Neg, Value::F32(v)) => Value::F32(-v),
        (UnOp::Neg, Value::I32(v)) => Value::I32(v.wrapping_neg()),
        (UnOp::Abs, Value::F32(v)) => Value::F32(v.abs()),
        (UnOp::Abs, Value::I32(v)) => Value::I32(v.wrapping_abs()),
        (UnOp::Not, Value::Bool(v)) => Value::Bool(!v),
        (UnOp::Not, Value::I32(v)) => Value::I32(!v),
        (UnOp::Not, Value::U32(v)) => Value::U32(!v),
        (UnOp::BitsToF32, Value::U32(v)) => Value::F32(f32::from_bits(v)),
        (UnOp::F16ToF32, Value::U32(v)) => Value::F32(f16_to_f32(v as u16)),
        (UnOp::BitsToU32, Value::F32(v)) => Value::U32(v.to_bits()),
        (UnOp::Exp, Value::F32(v)) => Value::F32(via_f64(v, f64::exp)),
        (UnOp::Log, Value::F32(v)) => Value::F32(via_f64(v, f64::ln)),
        (UnOp::Sqrt, Value::F32(v)) => Value::F32(v.sqrt()),
        (UnOp::Rsqrt, Value::F32(v)) => Value::F32(via_f64(v, |a| 1.0 / a.sqrt())),
        (UnOp::Recip, Value::F32(v)) => Value::F32(1.0 / v),
        (UnOp::Tanh, Value::F32(v)) => Value::F32(via_f64(v, f64::tanh)),
        (UnOp::Erf, Value::F32(v)) => Value::F32(via_f64(v, erf)),
        (UnOp::Floor, Value::F32(v)) => Value::F32(v.floor()),
        (UnOp::Ceil, Value::F32(v)) => Value::F32(v.ceil()),
        (UnOp::Round, Value::F32(v)) => Value::F32(v.round_ties_even()),
        (UnOp::Sin, Value::F32(v)) => Value::F32(via_f64(v, f64::sin)),
        (UnOp::Cos, Value::F32(v)) => Value::F32(via_f64(v, f64::cos)),
        (UnOp::RoundF16, Value::F32(v)) => Value::F32(round_f16(v)),
        (UnOp::RoundBf16, Value::F32(v)) => Value::F32(round_bf16(v)),
        (UnOp::Neg | UnOp::Abs, Value::U32(_) | Value::Bool(_))
        | (UnOp::Not, Value::F32(_))
        | (UnOp::BitsToF32 | UnOp::F16ToF32, Value::F32(_) | Value::I32(_) | Value::Bool(_))
        | (UnOp::BitsToU32, Value::I32(_) | Value::U32(_) | Value::Bool(_))
        | (
            UnOp::Exp
            | UnOp::Log
            | UnOp::Sqrt
            | UnOp::Rsqrt
            | UnOp::Recip
            | UnOp::Tanh
            | UnOp::Erf
            | UnOp::Floor
            | UnOp::Ceil
            | UnOp::Round
            | UnOp::Sin
            | UnOp::Cos
            | UnOp::RoundF16
            | UnOp::RoundBf16,
            Value::I32(_) | Value::U32(_) | Value::Bool(_),
        ) => return Err(bad()),
    })
}

fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, EvalError> {
    let bad = || EvalError::BinaryType {
        op,
        left: a.ty(),
        right: b.ty(),
    };
    Ok(match (a, b) {
        (Value::I32(x), Value::U32(amount)) if matches!(op, BinOp::Shl | BinOp::Shr) => {
            Value::I32(if op == BinOp::Shl {
                x << shift_amount(amount)?
            } else {
                x >> shift_amount(amount)?
            })
        }
        (Value::U32(x), Value::U32(amount)) if matches!(op, BinOp::Shl | BinOp::Shr) => {
            Value::U32(if op == BinOp::Shl {
                x << shift_amount(amount)?
            } else {
                x >> shift_amount(amount)?
            })
        }
        (Value::F32(x), Value::F32(y)) => Value::F32(match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            BinOp::Max => x.max(y),
            BinOp::Min => x.min(y),
            BinOp::Pow => f64::from(x).powf(f64::from(y)) as f32,
            BinOp::Rem | BinOp::And | BinOp::Or | BinOp::Xor | BinOp::Shl | BinOp::Shr => {
                return Err(bad());
            }
        }),
        (Value::I32(x), Value::I32(y)) => Value::I32(match op {
            BinOp::Add => x.wrapping_add(y),
            BinOp::Sub => x.wrapping_sub(y),
            BinOp::Mul => x.wrapping_mul(y),
            BinOp::Div => nonzero(y, op).map(|()| x.wrapping_div(y))?,
            BinOp::Rem => nonzero(y, op).map(|()| x.wrapping_rem(y))?,
            BinOp::Max => x.max(y),
            BinOp::Min => x.min(y),
            BinOp::And => x & y,
            BinOp::Or => x | y,
            BinOp::Xor => x ^ y,
            BinOp::Pow | BinOp::Shl | BinOp::Shr => return Err(bad()),
        }),
        (Value::U32(x), Value::U32(y)) => Value::U32(match op {
            BinOp::Add => x.wrapping_add(y),
            BinOp::Sub => x.wrapping_sub(y),
            BinOp::Mul => x.wrapping_mul(y),
            BinOp::Div => x.checked_div(y).ok_or(EvalError::DivideByZero { op })?,
            BinOp::Rem => x.checked_rem(y).ok_or(EvalError::DivideByZero { op })?,
            BinOp::Max => x.max(y),
            BinOp::Min => x.min(y),
            BinOp::And => x & y,
            BinOp::Or => x | y,
            BinOp::Xor => x ^ y,
            BinOp::Pow | BinOp::Shl | BinOp::Shr => return Err(bad()),
        }),
        (Value::Bool(x), Value::Bool(y)) => Value::Bool(match op {
            BinOp::And => x & y,
            BinOp::Or => x | y,
            BinOp::Xor => x ^ y,
            BinOp::Add
            | BinOp::Sub
            | BinOp::Mul
            | BinOp::Div
            | BinOp::Rem
            | BinOp::Max
            | BinOp::Min
            | BinOp::Pow
            | BinOp::Shl
            | BinOp::Shr => return Err(bad()),
        }),
        (Value::F32(_) | Value::I32(_) | Value::U32(_) | Value::Bool(_), _) => return Err(bad()),
    })
}

/// A shift amount backends agree on (below 32).
fn shift_amount(amount: u32) -> Result<u32, EvalError> {
    if amount < 32 {
        Ok(amount)
    } else {
        Err(EvalError::ShiftTooLarge { amount })
    }
}

/// The division-by-zero error when the divisor `y` is zero.
fn nonzero(y: i32, op: BinOp) -> Result<(), EvalError> {
    if y != 0 {
        Ok(())
    } else {
        Err(EvalError::DivideByZero { op })
    }
}

fn compare(op: CmpOp, a: Value, b: Value) -> Result<Value, EvalError> {
    let ordering = match (a, b) {
        (Value::F32(x), Value::F32(y)) => x.partial_cmp(&y),
        (Value::I32(x), Value::I32(y)) => Some(x.cmp(&y)),
        (Value::U32(x), Value::U32(y)) => Some(x.cmp(&y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(&y)),
        (Value::F32(_) | Value::I32(_) | Value::U32(_) | Value::Bool(_), _) => {
            return Err(EvalError::CmpType {
                op,
                left: a.ty(),
                right: b.ty(),
            });
        }
    };
    // An unordered pair (a NaN) is unequal and neither less nor greater, as in IEEE.
    Ok(Value::Bool(match ordering {
        None => op == CmpOp::Ne,
        Some(o) => match op {
            CmpOp::Eq => o.is_eq(),
            CmpOp::Ne => o.is_ne(),
            CmpOp::Lt => o.is_lt(),
            CmpOp::Le => o.is_le(),
            CmpOp::Gt => o.is_gt(),
            CmpOp::Ge => o.is_ge(),
        },
    }))
}

/// [`Expr::Cast`]: Rust's `as` conversions are the IR's (saturating float to integer with NaN to
/// 0, round-to-nearest integer to float, i32/u32 by bits).
fn convert(to: Ty, x: Value) -> Value {
    match (to, x) {
        (Ty::F32, Value::F32(v)) => Value::F32(v),
        (Ty::F32, Value::I32(v)) => Value::F32(v as f32),
        (Ty::F32, Value::U32(v)) => Value::F32(v as f32),
        (Ty::F32, Value::Bool(v)) => Value::F32(if v { 1.0 } else { 0.0 }),
        (Ty::I32, Value::F32(v)) => Value::I32(v as i32),
        (Ty::I32, Value::I32(v)) => Value::I32(v),
        (Ty::I32, Value::U32(v)) => Value::I32(v as i32),
        (Ty::I32, Value::Bool(v)) => Value::I32(i32::from(v)),
        (Ty::U32, Value::F32(v)) => Value::U32(v as u32),
        (Ty::U32, Value::I32(v)) => Value::U32(v as u32),
        (Ty::U32, Value::U32(v)) => Value::U32(v),
        (Ty::U32, Value::Bool(v)) => Value::U32(u32::from(v)),
        (Ty::Bool, Value::F32(v)) => Value::Bool(v != 0.0),
        (Ty::Bool, Value::I32(v)) => Value::Bool(v != 0),
        (Ty::Bool, Value::U32(v)) => Value::Bool(v != 0),
        (Ty::Bool, Value::Bool(v)) => Value::Bool(v),
    }
}

/// [`UnOp::RoundF16`]: the nearest f16 value (ties to even), as f32; beyond f16's range it is
/// an infinity, NaN stays NaN.
pub fn round_f16(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    let a = x.abs();
    // 65520 is halfway between f16's largest finite value, 65504 (odd mantissa), and 65536:
    // ties to even round it up to infinity.
    if a >= 65520.0 {
        return f32::INFINITY.copysign(x);
    }
    // The spacing of f16 values near `a`: 2^(e - 10) for a normal f16 of exponent e, 2^-24 for
    // subnormals. Scaling by a power of two is exact, so only `round_ties_even` rounds.
    let exp = ((a.to_bits() >> 23) as i32 - 127).max(-14);
    let quantum = f32::from_bits(((exp - 10 + 127) as u32) << 23);
    ((a / quantum).round_ties_even() * quantum).copysign(x)
}

/// [`UnOp::RoundBf16`]: the nearest bf16 value (ties to even), as f32; NaN stays NaN.
pub fn round_bf16(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(rounded)
}

/// erf by its Taylor series near 0 and a continued fraction for erfc in the tails; accurate to
/// well under an f32 ulp.
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(a) = 2/sqrt(pi) * sum_n (-1)^n a^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        for n in 1..200 {
            term *= -a * a / f64::from(n);
            let t = term / f64::from(2 * n + 1);
            sum += t;
            if t.abs() < 1e-18 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a > 10.0 {
        1.0
    } else {
        // erfc(a) = exp(-a^2)/sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))
        let mut f = a;
        for n in (1..300).rev() {
            f = a + (f64::from(n) / 2.0) / f;
        }
        1.0 - (-a * a).exp() / std::f64::consts::PI.sqrt() / f
    };
    r.copysign(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{cast, load, load_byte, load_half, select, u32c, un};

    const P: ParamId = ParamId(0);

    fn env(words: &[u32]) -> Env<'_> {
        let mut env = Env::new();
        env.bind(P, Word::U32, words);
        env
    }

    #[test]
    fn bytes_and_halves_are_little_endian() {
        let words = [0x4433_2211, 0x3c00_c000];
        let env = env(&words);
        let bytes: Vec<Value> = (0..4)
            .map(|i| env.eval(&load_byte(P, u32c(i))).expect("in range"))
            .collect();
        assert_eq!(bytes, [0x11, 0x22, 0x33, 0x44].map(Value::U32));
        assert_eq!(
            env.eval(&load_half(P, u32c(2), Half::F16)),
            Ok(Value::F32(-2.0))
        );
        assert_eq!(
            env.eval(&load_half(P, u32c(3), Half::F16)),
            Ok(Value::F32(1.0))
        );
        assert_eq!(
            env.eval(&load_half(P, u32c(3), Half::Bf16)),
            Ok(Value::F32(f32::from_bits(0x3c00_0000)))
        );
        assert!(matches!(
            env.eval(&load_byte(P, u32c(8))),
            Err(EvalError::OutOfRange { index: 8, .. })
        ));
        assert!(matches!(
            env.eval(&load_half(P, u32c(4), Half::F16)),
            Err(EvalError::OutOfRange { .. })
        ));
    }

    #[test]
    fn f16_halves_widen_exactly() {
        // Smallest subnormal, largest subnormal, infinity, NaN.
        let words = [0x03ff_0001, 0x7e00_fc00];
        let env = env(&words);
        let half = |i| {
            env.eval_f32(&load_half(P, u32c(i), Half::F16))
                .expect("in range")
        };
        assert_eq!(half(0), 2f32.powi(-24));
        assert_eq!(half(1), 1023.0 * 2f32.powi(-24));
        assert_eq!(half(2), f32::NEG_INFINITY);
        assert!(half(3).is_nan());
    }

    #[test]
    fn loads_are_typed_by_the_buffer() {
        let words = [1.5f32.to_bits()];
        let mut env = Env::new();
        env.bind(P, Word::F32, &words);
        assert_eq!(env.eval(&load(P, u32c(0))), Ok(Value::F32(1.5)));
        assert!(matches!(
            env.eval(&load_byte(P, u32c(0))),
            Err(EvalError::SubWordLoad { .. })
        ));
        assert!(matches!(
            env.eval(&load(ParamId(1), u32c(0))),
            Err(EvalError::UnboundParam(1))
        ));
    }

    #[test]
    fn operators_check_types_and_shifts() {
        let env = Env::new();
        assert!(matches!(
            env.eval(&(u32c(1) + Expr::F32(1.0))),
            Err(EvalError::BinaryType { .. })
        ));
        assert_eq!(env.eval(&(u32c(1) << u32c(31))), Ok(Value::U32(1 << 31)));
        assert_eq!(env.eval(&(Expr::I32(-8) >> u32c(1))), Ok(Value::I32(-4)));
        assert_eq!(
            env.eval(&(u32c(1) << u32c(32))),
            Err(EvalError::ShiftTooLarge { amount: 32 })
        );
        assert_eq!(
            env.eval(&(u32c(1) / u32c(0))),
            Err(EvalError::DivideByZero { op: BinOp::Div })
        );
        assert_eq!(
            env.eval(&(Expr::I32(i32::MIN) / Expr::I32(-1))),
            Ok(Value::I32(i32::MIN))
        );
        assert_eq!(env.eval(&(u32c(0) - u32c(1))), Ok(Value::U32(u32::MAX)));
        let nan = Expr::F32(f32::NAN);
        assert_eq!(
            env.eval(&crate::build::cmp(CmpOp::Ne, nan.clone(), nan.clone())),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            env.eval(&crate::build::lt(nan.clone(), Expr::F32(1.0))),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            env.eval(&select(Expr::Bool(false), Expr::F32(1.0), Expr::F32(2.0))),
            Ok(Value::F32(2.0))
        );
        assert!(matches!(
            env.eval(&select(u32c(0), u32c(1), u32c(2))),
            Err(EvalError::SelectType { .. })
        ));
        assert!(matches!(
            env.eval(&Expr::Var(Var(3))),
            Err(EvalError::UnboundVar(3))
        ));
    }

    #[test]
    fn casts_saturate_and_round() {
        let env = Env::new();
        assert_eq!(
            env.eval(&cast(Ty::I32, Expr::F32(-2.9))),
            Ok(Value::I32(-2))
        );
        assert_eq!(env.eval(&cast(Ty::U32, Expr::F32(-2.9))), Ok(Value::U32(0)));
        assert_eq!(
            env.eval(&cast(Ty::I32, Expr::F32(f32::NAN))),
            Ok(Value::I32(0))
        );
        assert_eq!(
            env.eval(&cast(Ty::I32, Expr::F32(1e20))),
            Ok(Value::I32(i32::MAX))
        );
        assert_eq!(
            env.eval(&cast(Ty::F32, u32c(16_777_217))),
            Ok(Value::F32(16_777_216.0))
        );
        assert_eq!(
            env.eval(&cast(Ty::Bool, Expr::F32(-0.0))),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            env.eval(&un(UnOp::BitsToF32, u32c(0x3f80_0000))),
            Ok(Value::F32(1.0))
        );
    }

    #[test]
    fn rounding_to_halves_ties_to_even() {
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even is 1.
        assert_eq!(round_f16(1.0 + 2f32.powi(-11)), 1.0);
        assert_eq!(
            round_f16(1.0 + 3.0 * 2f32.powi(-11)),
            1.0 + 2.0 * 2f32.powi(-10)
        );
        assert_eq!(round_f16(65519.0), 65504.0);
        assert_eq!(round_f16(-65520.0), f32::NEG_INFINITY);
        assert_eq!(round_f16(2f32.powi(-25)), 0.0);
        assert_eq!(round_f16(3.0 * 2f32.powi(-25)), 2f32.powi(-23));
        assert_eq!(round_f16(-1e-30).to_bits(), (-0.0f32).to_bits());
        assert_eq!(round_bf16(f32::from_bits(0x3f80_8000)), 1.0);
        assert_eq!(
            round_bf16(f32::from_bits(0x3f81_8000)),
            f32::from_bits(0x3f82_0000)
        );
        assert_eq!(round_bf16(f32::MAX), f32::INFINITY);
        assert!(round_bf16(f32::NAN).is_nan() && round_f16(f32::NAN).is_nan());
    }

    #[test]
    fn transcendentals_are_close() {
        let env = Env::new();
        let erf1 = env.eval_f32(&un(UnOp::Erf, Expr::F32(1.0))).expect("f32");
        assert_eq!(erf1, 0.842_700_8);
        let erf3 = env.eval_f32(&un(UnOp::Erf, Expr::F32(-3.0))).expect("f32");
        assert_eq!(erf3, -0.999_977_9);
    }
}
