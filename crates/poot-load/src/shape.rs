//! Element counts of stored shapes.

/// The element count of a shape, or `None` when the product of its non-zero dimensions
/// overflows 64 bits. Checking the non-zero dimensions (not just the running product, which
/// a zero makes 0 early) means that once a shape is admitted, no product of any of its
/// dimensions, in any order, overflows: a shape `[2^40, 2^40, 0]` is refused even though it
/// has no elements.
pub(crate) fn checked_n_elems(dims: &[u64]) -> Option<u64> {
    let nonzero = dims
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
    if dims.contains(&0) {
        Some(0)
    } else {
        Some(nonzero)
    }
}

#[cfg(test)]
mod tests {
    use super::checked_n_elems;

    #[test]
    fn zero_dims_do_not_hide_an_overflow() {
        assert_eq!(checked_n_elems(&[]), Some(1));
        assert_eq!(checked_n_elems(&[3, 4]), Some(12));
        assert_eq!(checked_n_elems(&[3, 0, 4]), Some(0));
        assert_eq!(checked_n_elems(&[0, 1 << 40, 1 << 40]), None);
        assert_eq!(checked_n_elems(&[1 << 40, 1 << 40, 0]), None);
        assert_eq!(checked_n_elems(&[u64::MAX, 1]), Some(u64::MAX));
    }
}
