use super::{Builder, BuilderError, Traced, scalar_like};
use crate::op::UnaryOp;

/// `x / (1 + exp(-x))`.
pub fn silu(b: &Builder, x: Traced) -> Result<Traced, BuilderError> {
    let one = scalar_like(b, 1.0, x)?;
    let denom = b.add(one, b.exp(b.neg(x)?)?)?;
    b.div(x, denom)
}

/// The SwiGLU gate: `silu(gate) * up`.
pub fn swiglu(b: &Builder, gate: Traced, up: Traced) -> Result<Traced, BuilderError> {
    b.mul(silu(b, gate)?, up)
}

/// GeLU, tanh approximation, written in its sigmoid form:
/// `0.5 x (1 + tanh(z)) = x / (1 + exp(-2z))` with `z = sqrt(2/pi) (x + 0.044715 x^3)`.
pub fn gelu_tanh(b: &Builder, x: Traced) -> Result<Traced, BuilderError> {
    let x3 = b.mul(b.mul(x, x)?, x)?;
    let inner = b.add(x, b.mul(scalar_like(b, 0.044715, x)?, x3)?)?;
    let k = -2.0 * (2.0f64 / std::f64::consts::PI).sqrt();
    let neg2z = b.mul(scalar_like(b, k as f32, x)?, inner)?;
    let denom = b.add(scalar_like(b, 1.0, x)?, b.exp(neg2z)?)?;
    b.div(x, denom)
}

/// Exact GeLU: `0.5 x (1 + erf(x / sqrt 2))`.
pub fn gelu_erf(b: &Builder, x: Traced) -> Result<Traced, BuilderError> {
    let scaled = b.mul(x, scalar_like(b, std::f32::consts::FRAC_1_SQRT_2, x)?)?;
    let erf = b.unary(UnaryOp::Erf, scaled)?;
    let one_plus = b.add(scalar_like(b, 1.0, x)?, erf)?;
    b.mul(b.mul(scalar_like(b, 0.5, x)?, x)?, one_plus)
}

/// The GeGLU gate: `gelu_tanh(gate) * up`.
pub fn geglu(b: &Builder, gate: Traced, up: Traced) -> Result<Traced, BuilderError> {
    b.mul(gelu_tanh(b, gate)?, up)
}
