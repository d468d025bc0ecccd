use super::{Builder, BuilderError, Traced};

/// `exp(x - max) / sum(exp(x - max))` along `axis`.
pub fn softmax(b: &Builder, x: Traced, axis: usize) -> Result<Traced, BuilderError> {
    let dims = b.dims(x)?;
    let m = b.reduce_max(x, axis)?;
    let m = b.broadcast(m, dims.clone())?;
    let e = b.exp(b.sub(x, m)?)?;
    let s = b.reduce_sum(e, axis)?;
    let s = b.broadcast(s, dims)?;
    b.div(e, s)
}
