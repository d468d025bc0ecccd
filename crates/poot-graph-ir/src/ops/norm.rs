use super::{Builder, BuilderError, Traced, scalar_like, to_f32};

/// Options of an RMS norm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNormOptions {
    pub eps: f32,
    /// Added to the stored scale before it multiplies (Gemma stores `w` and scales by `1 + w`).
    pub weight_offset: f32,
}

/// `x * rsqrt(mean(x^2) + eps) * w` over the last axis; `w` `[D]` may be stored f16/bf16.
pub fn rmsnorm(b: &Builder, x: Traced, w: Traced, eps: f32) -> Result<Traced, BuilderError> {
    rmsnorm_with(
        b,
        x,
        w,
        RmsNormOptions {
            eps,
            weight_offset: 0.0,
        },
    )
}

/// [`rmsnorm`] with every option.
pub fn rmsnorm_with(
    b: &Builder,
    x: Traced,
    w: Traced,
    opts: RmsNormOptions,
) -> Result<Traced, BuilderError> {
    let dims = b.dims(x)?;
    let axis = last_axis(&dims)?;
    let n = dims[axis] as f32;
    let ss = b.reduce_sum(b.mul(x, x)?, axis)?;
    let mean = b.mul(ss, scalar_like(b, 1.0 / n, ss)?)?;
    let inv = b.rsqrt(b.add(mean, scalar_like(b, opts.eps, mean)?)?)?;
    let normed = b.mul(x, b.broadcast(inv, dims.clone())?)?;
    let mut w = to_f32(b, w)?;
    if opts.weight_offset != 0.0 {
        w = b.add(w, scalar_like(b, opts.weight_offset, w)?)?;
    }
    b.mul(normed, b.broadcast(w, dims)?)
}

/// `(x - mean) * rsqrt(var + eps) * gamma + beta` over the last axis (biased variance).
pub fn layernorm(
    b: &Builder,
    x: Traced,
    gamma: Traced,
    beta: Traced,
    eps: f32,
) -> Result<Traced, BuilderError> {
    let dims = b.dims(x)?;
    let axis = last_axis(&dims)?;
    let inv_n = 1.0 / dims[axis] as f32;
    let sum = b.reduce_sum(x, axis)?;
    let mean = b.mul(sum, scalar_like(b, inv_n, sum)?)?;
    let centered = b.sub(x, b.broadcast(mean, dims.clone())?)?;
    let ss = b.reduce_sum(b.mul(centered, centered)?, axis)?;
    let var = b.mul(ss, scalar_like(b, inv_n, ss)?)?;
    let inv = b.rsqrt(b.add(var, scalar_like(b, eps, var)?)?)?;
    let normed = b.mul(centered, b.broadcast(inv, dims.clone())?)?;
    let gamma = b.broadcast(to_f32(b, gamma)?, dims.clone())?;
    let beta = b.broadcast(to_f32(b, beta)?, dims)?;
    b.add(b.mul(normed, gamma)?, beta)
}

/// The feature axis of `dims`; a rank-0 value has none.
pub(super) fn last_axis(dims: &[usize]) -> Result<usize, BuilderError> {
    dims.len().checked_sub(1).ok_or(BuilderError::Infer {
        at: "norm".to_string(),
        source: crate::op::InferError::Axis {
            op: "norm",
            axis: 0,
            rank: 0,
        },
    })
}
