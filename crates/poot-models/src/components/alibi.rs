//! ALiBi (Press et al., "Train Short, Test Long", 2022): in place of positional embeddings, each
//! query head `h` adds `slope_h * (j - p)` to its score of key position `j` from position `p`
//! ([`poot_graph_ir::ops::alibi_bias`]). The slopes are a geometric sequence per head, computed
//! here from the head count and the largest bias, bound as a computed table
//! ([`Role::AlibiSlopes`]) that a tensor-parallel rank slices to its heads.

use std::sync::Arc;

use crate::table::ComputedTable;
use crate::weights::{Role, WeightMap, WeightRole};

/// The largest bias every ALiBi model but a reconfigured MPT uses (transformers' BLOOM and MPT,
/// llama.cpp's BLOOM).
pub const DEFAULT_MAX_BIAS: f32 = 8.0;

/// The slope of each of `n_heads` heads for a largest bias of `max_bias`.
///
/// With `n` a power of two, head `h` gets `2^(-max_bias * (h + 1) / n)`. Otherwise, with `c` the
/// largest power of two below `n`, the first `c` heads get `c`'s slopes and the other `n - c`
/// the odd-numbered slopes of `2c` heads (`2^(-max_bias * (2i + 1) / 2c)`): transformers'
/// BLOOM (`_get_alibi_slopes`) and MPT (`build_mpt_alibi_tensor`, whose interleaving of the
/// `2c` slopes picks the same values) and llama.cpp's `ggml_soft_max_ext`. Each slope is the f32
/// nearest its exact value. transformers' BLOOM and llama.cpp raise an f32-rounded base to each
/// power instead, which can land one ulp away where a slope is not a power of two of an integer
/// exponent (12 heads: `2^-2.5` and `2^-3.5`), a relative change of 6e-8.
pub fn alibi_slopes(n_heads: usize, max_bias: f32) -> Vec<f32> {
    if n_heads == 0 {
        return Vec::new();
    }
    let c = 1usize << n_heads.ilog2();
    let bias = f64::from(max_bias);
    let slope = |k: f64, of: usize| (-bias * k / of as f64).exp2() as f32;
    let mut slopes: Vec<f32> = (1..=c).map(|k| slope(k as f64, c)).collect();
    slopes.extend((0..n_heads - c).map(|i| slope((2 * i + 1) as f64, 2 * c)));
    slopes
}

/// Binds [`Role::AlibiSlopes`] to the slopes of `n_heads` heads (`[n_heads, 1]`).
pub fn bind_alibi_slopes(w: &mut WeightMap, n_heads: usize, max_bias: f32) {
    let slopes: Arc<[f32]> = alibi_slopes(n_heads, max_bias).into();
    w.bind_table(
        WeightRole::global(Role::AlibiSlopes),
        ComputedTable::values(n_heads, 1, slopes),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn powers_of_two_are_one_geometric_sequence() {
        assert_eq!(alibi_slopes(4, 8.0), [0.25, 0.0625, 0.015625, 0.00390625]);
        let eight = alibi_slopes(8, 8.0);
        assert_eq!(eight, (1..=8).map(|k| 0.5f32.powi(k)).collect::<Vec<_>>());
        assert_eq!(alibi_slopes(1, 8.0), [0.00390625]);
    }

    /// Six heads: four slopes of four heads, then the odd ones of eight (transformers' MPT
    /// prints `[0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]`).
    #[test]
    fn other_head_counts_take_the_odd_slopes_of_twice_as_many() {
        assert_eq!(
            alibi_slopes(6, 8.0),
            [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
        );
        // Twelve heads (BLOOM's rule): eight of eight, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
        let twelve = alibi_slopes(12, 8.0);
        assert_eq!(&twelve[..8], &alibi_slopes(8, 8.0)[..]);
        for (got, k) in twelve[8..].iter().zip([0.5f64, 1.5, 2.5, 3.5]) {
            assert_eq!(*got, (-k).exp2() as f32);
        }
        // More than twice a power of two: only c extra heads exist below 2c.
        assert_eq!(alibi_slopes(7, 8.0).len(), 7);
        assert_eq!(alibi_slopes(7, 8.0)[6], 2f32.powi(-5));
    }

    /// MPT's `alibi_bias_max` scales every exponent: `2^(-max_bias * k / n)`.
    #[test]
    fn the_largest_bias_scales_every_exponent() {
        assert_eq!(
            alibi_slopes(4, 16.0),
            [0.0625, 0.00390625, 2f32.powi(-12), 2f32.powi(-16)]
        );
        let six = alibi_slopes(6, 4.0);
        assert_eq!(
            six,
            [0.5, 0.25, 0.125, 0.0625, 2f32.powf(-0.5), 2f32.powf(-1.5)]
        );
    }
}
