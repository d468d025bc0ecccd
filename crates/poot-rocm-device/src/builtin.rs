//! The device's own kernels, written in HIP by hand (they take a word count, which kernel
//! descriptions cannot): zeroing a new buffer and copying between buffers, both queued in order
//! with the rest of the work, so a zeroed or copied buffer is ready for the next dispatch
//! without the host waiting.

/// Threads per workgroup of both kernels.
pub(crate) const THREADS: u32 = 256;
/// The most workgroups one launch uses; each then strides over the rest.
pub(crate) const MAX_GROUPS: u32 = 4096;

/// `poot_fill_words(unsigned int* dst, unsigned long long n, unsigned int value)`.
pub const FILL_ENTRY: &str = "poot_fill_words";
/// `poot_copy_words(const unsigned int* src, unsigned int* dst, unsigned long long n)`.
pub const COPY_ENTRY: &str = "poot_copy_words";

/// The source of both kernels. The workgroup count is read from the dispatch packet, as the
/// rendered kernels read it.
pub const SOURCE: &str = r#"// poot's own HIP kernels: fill and copy 32-bit words.
static __device__ __forceinline__ unsigned long long poot_builtin_stride() {
    const unsigned short* packet = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
    return (unsigned long long)((const unsigned int*)packet)[3];
}

extern "C" __global__ void __launch_bounds__(256) poot_fill_words(unsigned int* __restrict__ dst, unsigned long long n, unsigned int value) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * 256u + threadIdx.x; i < n; i += poot_builtin_stride()) {
        dst[i] = value;
    }
}

extern "C" __global__ void __launch_bounds__(256) poot_copy_words(const unsigned int* __restrict__ src, unsigned int* __restrict__ dst, unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * 256u + threadIdx.x; i < n; i += poot_builtin_stride()) {
        dst[i] = src[i];
    }
}
"#;

/// Workgroups that cover `words` words (at least one, at most [`MAX_GROUPS`]).
pub(crate) fn groups_for(words: u64) -> u32 {
    let groups = words
        .div_ceil(u64::from(THREADS))
        .clamp(1, u64::from(MAX_GROUPS));
    groups as u32
}

/// The kernel arguments of a fill of `words` words at `dst` with `value`.
pub(crate) fn fill_args(dst: u64, words: u64, value: u32) -> Vec<u8> {
    let mut a = Vec::with_capacity(24);
    a.extend(dst.to_le_bytes());
    a.extend(words.to_le_bytes());
    a.extend(value.to_le_bytes());
    a
}

/// The kernel arguments of a copy of `words` words from `src` to `dst`.
pub(crate) fn copy_args(src: u64, dst: u64, words: u64) -> Vec<u8> {
    let mut a = Vec::with_capacity(24);
    a.extend(src.to_le_bytes());
    a.extend(dst.to_le_bytes());
    a.extend(words.to_le_bytes());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_follow_the_signatures() {
        let f = fill_args(0x1000, 5, 7);
        assert_eq!(f.len(), 20);
        assert_eq!(&f[8..16], &5u64.to_le_bytes());
        assert_eq!(&f[16..20], &7u32.to_le_bytes());
        let c = copy_args(0x10, 0x20, 3);
        assert_eq!(c.len(), 24);
        assert_eq!(&c[8..16], &0x20u64.to_le_bytes());
        assert_eq!(groups_for(0), 1);
        assert_eq!(groups_for(257), 2);
        assert_eq!(groups_for(u64::MAX), MAX_GROUPS);
        assert!(SOURCE.contains(FILL_ENTRY) && SOURCE.contains(COPY_ENTRY));
    }
}
