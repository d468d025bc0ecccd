use super::{Builder, BuilderError, Traced, to_f32};
use crate::op::InferError;

/// How a rotary embedding pairs the features of a head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// Feature `i` pairs with `i + R/2` (GPT-NeoX; Hugging Face's `rotate_half`).
    HalfSplit,
    /// Feature `2i` pairs with `2i + 1` (GPT-J; llama.cpp's normal mode).
    Interleaved,
}

/// Rotates the first `R` features of every head of `x` `[B, H, T, D]` by the angles of absolute
/// positions `pos` `[B, T]`, read from `cos`/`sin` tables `[P, R/2]` (`R <= D`; features past
/// `R` pass through unchanged).
pub fn rope(
    b: &Builder,
    x: Traced,
    cos: Traced,
    sin: Traced,
    pos: Traced,
    style: RopeStyle,
) -> Result<Traced, BuilderError> {
    let xd = b.dims(x)?;
    let td = b.dims(cos)?;
    let (bsz, h, t, d) = match xd.as_slice() {
        &[bsz, h, t, d] => (bsz, h, t, d),
        _ => return Err(rank_err(xd.len(), 0)),
    };
    let half = match td.as_slice() {
        &[_, half] => half,
        _ => return Err(rank_err(td.len(), 1)),
    };
    let r = 2 * half;
    if r > d || r == 0 {
        return Err(BuilderError::Infer {
            at: "rope".to_string(),
            source: InferError::SliceBounds {
                axis: 3,
                start: 0,
                end: r,
                dim: d,
            },
        });
    }
    // Angles for each (row, position), shared by every head.
    let angles = |table: Traced| -> Result<Traced, BuilderError> {
        let rows = to_f32(b, b.gather(table, pos, 0)?)?; // [B, T, R/2]
        let rows = b.reshape(rows, [bsz, 1, t, half])?;
        b.broadcast(rows, [bsz, h, t, half])
    };
    let (c, s) = (angles(cos)?, angles(sin)?);
    let rotated = match style {
        RopeStyle::HalfSplit => {
            let x1 = b.slice(x, vec![0, 0, 0, 0], vec![bsz, h, t, half])?;
            let x2 = b.slice(x, vec![0, 0, 0, half], vec![bsz, h, t, r])?;
            let o1 = b.sub(b.mul(x1, c)?, b.mul(x2, s)?)?;
            let o2 = b.add(b.mul(x2, c)?, b.mul(x1, s)?)?;
            b.concat(&[o1, o2], 3)?
        }
        RopeStyle::Interleaved => {
            let xr = b.slice(x, vec![0, 0, 0, 0], vec![bsz, h, t, r])?;
            let pairs = b.reshape(xr, [bsz, h, t, half, 2])?;
            let even = b.reshape(
                b.slice(pairs, vec![0, 0, 0, 0, 0], vec![bsz, h, t, half, 1])?,
                [bsz, h, t, half],
            )?;
            let odd = b.reshape(
                b.slice(pairs, vec![0, 0, 0, 0, 1], vec![bsz, h, t, half, 2])?,
                [bsz, h, t, half],
            )?;
            let oe = b.sub(b.mul(even, c)?, b.mul(odd, s)?)?;
            let oo = b.add(b.mul(odd, c)?, b.mul(even, s)?)?;
            let oe = b.reshape(oe, [bsz, h, t, half, 1])?;
            let oo = b.reshape(oo, [bsz, h, t, half, 1])?;
            b.reshape(b.concat(&[oe, oo], 4)?, [bsz, h, t, r])?
        }
    };
    if r == d {
        Ok(rotated)
    } else {
        let rest = b.slice(x, vec![0, 0, 0, r], vec![bsz, h, t, d])?;
        b.concat(&[rotated, rest], 3)
    }
}

fn rank_err(rank: usize, input: usize) -> BuilderError {
    BuilderError::Infer {
        at: "rope".to_string(),
        source: InferError::IndexRank {
            op: "rope",
            input,
            rank,
            expected: if input == 0 { 4 } else { 2 },
        },
    }
}
