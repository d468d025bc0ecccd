//! The helper functions a CUDA rendering may call, each emitted only when used.
//!
//! They pin down what C leaves undefined (out-of-range float-to-int casts, signed overflow,
//! division by zero) or what the description means differently from CUDA's built-ins (`fmaxf`
//! drops NaN). The integer and bit-level algorithms are the same ones the WGSL library uses
//! ([`super::wgsl_lib`]), so both backends agree bit for bit on them. Everything here compiles
//! with NVRTC without includes: it uses only `__float_as_uint`, `__uint_as_float`, atomics,
//! `__threadfence_system` and `__trap`.

/// A CUDA helper. Declaration order is emission order; a helper's dependencies come before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum CudaLib {
    Words2,
    Words4,
    F32x2,
    F32x4,
    F16ToF32,
    LoadByte,
    LoadF16,
    LoadBf16,
    RoundF16,
    RoundBf16,
    MaxF32,
    MinF32,
    MaxI32,
    MinI32,
    MaxU32,
    MinU32,
    AbsI32,
    F32ToI32,
    F32ToU32,
    F32ToBool,
    DivI32,
    RemI32,
    DivU32,
    RemU32,
    Fault,
    FaultIf,
    /// HIP only: a wavefront shuffle of each word type.
    ShuffleXor,
    /// HIP only: the workgroup count along x, from the dispatch packet.
    GroupCountX,
    WaitPredecessors,
}

impl CudaLib {
    /// Helpers this one calls.
    pub(crate) fn deps(self) -> &'static [CudaLib] {
        match self {
            CudaLib::LoadF16 => &[CudaLib::F16ToF32],
            CudaLib::FaultIf => &[CudaLib::Fault],
            CudaLib::Words2
            | CudaLib::Words4
            | CudaLib::F32x2
            | CudaLib::F32x4
            | CudaLib::F16ToF32
            | CudaLib::LoadByte
            | CudaLib::LoadBf16
            | CudaLib::RoundF16
            | CudaLib::RoundBf16
            | CudaLib::MaxF32
            | CudaLib::MinF32
            | CudaLib::MaxI32
            | CudaLib::MinI32
            | CudaLib::MaxU32
            | CudaLib::MinU32
            | CudaLib::AbsI32
            | CudaLib::F32ToI32
            | CudaLib::F32ToU32
            | CudaLib::F32ToBool
            | CudaLib::DivI32
            | CudaLib::RemI32
            | CudaLib::DivU32
            | CudaLib::RemU32
            | CudaLib::Fault
            | CudaLib::ShuffleXor
            | CudaLib::GroupCountX
            | CudaLib::WaitPredecessors => &[],
        }
    }

    /// The helper's definition, ending in a newline.
    pub(crate) fn source(self) -> &'static str {
        match self {
            CudaLib::Words2 => WORDS2,
            CudaLib::Words4 => WORDS4,
            CudaLib::F32x2 => F32X2,
            CudaLib::F32x4 => F32X4,
            CudaLib::F16ToF32 => F16_TO_F32,
            CudaLib::LoadByte => LOAD_BYTE,
            CudaLib::LoadF16 => LOAD_F16,
            CudaLib::LoadBf16 => LOAD_BF16,
            CudaLib::RoundF16 => ROUND_F16,
            CudaLib::RoundBf16 => ROUND_BF16,
            CudaLib::MaxF32 => MAX_F32,
            CudaLib::MinF32 => MIN_F32,
            CudaLib::MaxI32 => MAX_I32,
            CudaLib::MinI32 => MIN_I32,
            CudaLib::MaxU32 => MAX_U32,
            CudaLib::MinU32 => MIN_U32,
            CudaLib::AbsI32 => ABS_I32,
            CudaLib::F32ToI32 => F32_TO_I32,
            CudaLib::F32ToU32 => F32_TO_U32,
            CudaLib::F32ToBool => F32_TO_BOOL,
            CudaLib::DivI32 => DIV_I32,
            CudaLib::RemI32 => REM_I32,
            CudaLib::DivU32 => DIV_U32,
            CudaLib::RemU32 => REM_U32,
            CudaLib::Fault => FAULT,
            CudaLib::FaultIf => FAULT_IF,
            // Only the HIP rendering calls these.
            CudaLib::ShuffleXor => HIP_SHUFFLE_XOR,
            CudaLib::GroupCountX => HIP_GROUP_COUNT_X,
            CudaLib::WaitPredecessors => WAIT_PREDECESSORS,
        }
    }

    /// The helper's definition for the HIP rendering ([`super::hip`]): the same text where it
    /// uses only what HIP spells as CUDA does, a HIP version where it uses PTX or a trap.
    /// Kernels never wait for their predecessors on HSA (each dispatch packet carries the
    /// barrier bit), so that helper is empty.
    pub(crate) fn hip_source(self) -> &'static str {
        match self {
            CudaLib::F16ToF32 => HIP_F16_TO_F32,
            CudaLib::Fault => HIP_FAULT,
            CudaLib::FaultIf => HIP_FAULT_IF,
            CudaLib::WaitPredecessors => "",
            other => other.source(),
        }
    }
}

impl CudaLib {
    /// The helper's definition for the host C rendering ([`super::host_c`]), whose prelude
    /// spells CUDA's qualifiers and bit casts in C: the same text where it uses nothing else,
    /// a host version where it uses PTX or device built-ins.
    pub(crate) fn host_source(self) -> &'static str {
        match self {
            CudaLib::F16ToF32 => HOST_F16_TO_F32,
            CudaLib::Fault => HOST_FAULT,
            // `poot_fault_if` is a macro of the host fault helper (it must return).
            CudaLib::FaultIf | CudaLib::WaitPredecessors => "",
            other => other.source(),
        }
    }
}

const HOST_F16_TO_F32: &str = "\
// IEEE half bits (the low 16 of h) to f32, exactly; a NaN keeps its payload's top bits and is
// quiet.
static inline float poot_f16_to_f32(unsigned int h) {
    const unsigned int s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) {
        return __uint_as_float(s | 0x7f800000u | (m != 0u ? 0x400000u | (m << 13) : 0u));
    }
    if (e == 0u) {
        const float f = (float)m * 5.9604644775390625e-08f;
        return s != 0u ? -f : f;
    }
    return __uint_as_float(s | ((e + 112u) << 23) | (m << 13));
}
";

const HOST_FAULT: &str = "\
// Records a failed check in the fault words (largest code, flag); the macros then leave the
// workgroup's function, as a trap ends a GPU thread.
static inline void poot_record_fault(unsigned int* f, unsigned int code) {
    unsigned int old = __atomic_load_n(&f[0], __ATOMIC_RELAXED);
    while (old < code
           && !__atomic_compare_exchange_n(&f[0], &old, code, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    __atomic_fetch_or(&f[1], 1u, __ATOMIC_RELEASE);
}
#define poot_trap(f, code) do { poot_record_fault((f), (code)); return; } while (0)
#define poot_fault_if(failed, f, code) do { if (failed) { poot_trap((f), (code)); } } while (0)
";

/// The first statement of every kernel. A kernel launched with programmatic stream
/// serialization may start before the kernels it follows have finished: this waits until they
/// have and their writes are visible, so nothing it reads or writes can race them. Elsewhere
/// (an ordinary launch, an older GPU) it does nothing. `POOT_EARLY_LAUNCH` (an NVRTC define)
/// then lets the kernel after this one be launched at once.
const WAIT_PREDECESSORS: &str = "\
// Waits until the kernels this one may overlap have finished and their writes are visible.
static __device__ __forceinline__ void poot_wait_predecessors() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(\"griddepcontrol.wait;\" ::: \"memory\");
#ifdef POOT_EARLY_LAUNCH
    asm volatile(\"griddepcontrol.launch_dependents;\" ::: \"memory\");
#endif
#endif
}
";

const HIP_F16_TO_F32: &str = "\
// IEEE half bits (the low 16 of h) to f32 by the conversion instruction: exact for every finite
// half and infinity, a NaN stays a NaN.
static __device__ __forceinline__ float poot_f16_to_f32(unsigned int h) {
    return (float)__builtin_bit_cast(_Float16, (unsigned short)h);
}
";

const HIP_FAULT: &str = "\
// Records a failed check in the fault words (largest code, flag), makes them visible to the
// host and traps: the queue's error callback reports the trap, the host reads the code.
static __device__ __forceinline__ void poot_trap(unsigned int* f, unsigned int code) {
    atomicMax(&f[0], code);
    atomicOr(&f[1], 1u);
    __threadfence_system();
    __builtin_trap();
}
";

const HIP_FAULT_IF: &str = "\
// A check that traps when `failed` (inlined: a call costs AMD GPUs a stack frame).
static __device__ __forceinline__ void poot_fault_if(bool failed, unsigned int* f, unsigned int code) {
    if (failed) {
        poot_trap(f, code);
    }
}
";

const HIP_SHUFFLE_XOR: &str = "\
// The value of lane (this lane ^ mask) of the wavefront (32 or 64 lanes; both lanes active),
// by a backwards permute, so no HIP header decides the wavefront's width.
static __device__ __forceinline__ unsigned int poot_shfl_xor_u32(unsigned int v, unsigned int mask) {
    const unsigned int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return (unsigned int)__builtin_amdgcn_ds_bpermute((int)((lane ^ mask) << 2), (int)v);
}
static __device__ __forceinline__ float poot_shfl_xor(float v, unsigned int mask) {
    return __uint_as_float(poot_shfl_xor_u32(__float_as_uint(v), mask));
}
static __device__ __forceinline__ int poot_shfl_xor(int v, unsigned int mask) {
    return (int)poot_shfl_xor_u32((unsigned int)v, mask);
}
static __device__ __forceinline__ unsigned int poot_shfl_xor(unsigned int v, unsigned int mask) {
    return poot_shfl_xor_u32(v, mask);
}
";

const HIP_GROUP_COUNT_X: &str = "\
// Workgroups along x: the dispatch packet's grid (in work-items) over its workgroup size. HIP's
// gridDim reads the implicit kernel arguments instead, which a raw HSA dispatch leaves zero.
static __device__ __forceinline__ unsigned int poot_group_count_x() {
    const unsigned short* packet = (const unsigned short*)__builtin_amdgcn_dispatch_ptr();
    return ((const unsigned int*)packet)[3] / packet[2];
}
";

const WORDS2: &str = "\
// Two u32 words read or written in one 8-byte access.
struct alignas(8) poot_words2 { unsigned int x, y; };
";

const WORDS4: &str = "\
// Four u32 words read or written in one 16-byte access.
struct alignas(16) poot_words4 { unsigned int x, y, z, w; };
";

const F32X2: &str = "\
// Two f32 read from shared memory in one 8-byte load.
struct alignas(8) poot_f32x2 { float x, y; };
";

const F32X4: &str = "\
// Four f32 read from shared memory in one 16-byte load.
struct alignas(16) poot_f32x4 { float x, y, z, w; };
";

const F16_TO_F32: &str = "\
// IEEE half bits (the low 16 of h) to f32 by the conversion instruction: exact for every finite
// half and infinity, a NaN stays a NaN. One instruction on the float pipes, where widening by
// integer arithmetic cost the decode contractions of f16 weights eight on the integer pipe,
// which bounded them (measured on the H200).
static __device__ __forceinline__ float poot_f16_to_f32(unsigned int h) {
    float f;
    asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"((unsigned short)h));
    return f;
}
";

const LOAD_BYTE: &str = "\
// Byte b of a buffer of little-endian u32 words.
static __device__ __forceinline__ unsigned int poot_load_byte(const unsigned int* p, unsigned int b) {
    return (p[b >> 2] >> ((b & 3u) * 8u)) & 0xffu;
}
";

const LOAD_F16: &str = "\
// Half i of a buffer of u32 words (the low half of word i >> 1 when i is even), as f16.
static __device__ __forceinline__ float poot_load_f16(const unsigned int* p, unsigned int i) {
    return poot_f16_to_f32((p[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu);
}
";

const LOAD_BF16: &str = "\
// Half i of a buffer of u32 words (the low half of word i >> 1 when i is even), as bf16.
static __device__ __forceinline__ float poot_load_bf16(const unsigned int* p, unsigned int i) {
    return __uint_as_float(((p[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu) << 16);
}
";

const ROUND_F16: &str = "\
// x rounded to the nearest f16 value, ties to even, as f32; overflow gives inf, NaN stays NaN.
static __device__ __forceinline__ float poot_round_f16(float x) {
    const unsigned int b = __float_as_uint(x);
    const unsigned int s = b & 0x80000000u;
    const unsigned int a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return __uint_as_float((b | 0x400000u) & 0xffffe000u);
    }
    if (a >= 0x477ff000u) {
        return __uint_as_float(s | 0x7f800000u);
    }
    if (a >= 0x38800000u) {
        // f16 normal range: keep 10 mantissa bits.
        return __uint_as_float(s | ((a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u));
    }
    if (a < 0x33000000u) {
        return __uint_as_float(s);
    }
    // f16 subnormal range: round to a multiple q of 2^-24.
    const unsigned int sh = 126u - (a >> 23);
    const unsigned int m = (a & 0x7fffffu) | 0x800000u;
    unsigned int q = m >> sh;
    const unsigned int rm = m & ((1u << sh) - 1u);
    const unsigned int hw = 1u << (sh - 1u);
    if (rm > hw || (rm == hw && (q & 1u) == 1u)) {
        q = q + 1u;
    }
    return __uint_as_float(s | __float_as_uint((float)q * __uint_as_float(0x33800000u)));
}
";

const ROUND_BF16: &str = "\
// x rounded to the nearest bf16 value, ties to even, as f32; overflow gives inf, NaN stays NaN.
static __device__ __forceinline__ float poot_round_bf16(float x) {
    const unsigned int b = __float_as_uint(x);
    if ((b & 0x7fffffffu) > 0x7f800000u) {
        return __uint_as_float((b | 0x400000u) & 0xffff0000u);
    }
    return __uint_as_float((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
}
";

const MAX_F32: &str = "\
// IEEE 754-2019 maximum: NaN if either is NaN, +0 above -0.
static __device__ __forceinline__ float poot_max_f32(float a, float b) {
    const unsigned int ua = __float_as_uint(a);
    const unsigned int ub = __float_as_uint(b);
    if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) {
        return __uint_as_float(0x7fc00000u);
    }
    if (a == b) {
        return __uint_as_float(ua & ub);
    }
    return a > b ? a : b;
}
";

const MIN_F32: &str = "\
// IEEE 754-2019 minimum: NaN if either is NaN, -0 below +0.
static __device__ __forceinline__ float poot_min_f32(float a, float b) {
    const unsigned int ua = __float_as_uint(a);
    const unsigned int ub = __float_as_uint(b);
    if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) {
        return __uint_as_float(0x7fc00000u);
    }
    if (a == b) {
        return __uint_as_float(ua | ub);
    }
    return a < b ? a : b;
}
";

const MAX_I32: &str = "\
static __device__ __forceinline__ int poot_max_i32(int a, int b) {
    return a > b ? a : b;
}
";

const MIN_I32: &str = "\
static __device__ __forceinline__ int poot_min_i32(int a, int b) {
    return a < b ? a : b;
}
";

const MAX_U32: &str = "\
static __device__ __forceinline__ unsigned int poot_max_u32(unsigned int a, unsigned int b) {
    return a > b ? a : b;
}
";

const MIN_U32: &str = "\
static __device__ __forceinline__ unsigned int poot_min_u32(unsigned int a, unsigned int b) {
    return a < b ? a : b;
}
";

const ABS_I32: &str = "\
// |a|, wrapping: abs(INT_MIN) = INT_MIN.
static __device__ __forceinline__ int poot_abs_i32(int a) {
    return a < 0 ? (int)(0u - (unsigned int)a) : a;
}
";

const F32_TO_I32: &str = "\
// Truncates toward zero and saturates; NaN gives 0.
static __device__ __forceinline__ int poot_f32_to_i32(float x) {
    const unsigned int b = __float_as_uint(x);
    const unsigned int a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return 0;
    }
    if (a >= 0x4f000000u) {
        return (b >> 31) != 0u ? (-2147483647 - 1) : 2147483647;
    }
    return (int)x;
}
";

const F32_TO_U32: &str = "\
// Truncates toward zero and saturates; NaN and negative values give 0.
static __device__ __forceinline__ unsigned int poot_f32_to_u32(float x) {
    const unsigned int b = __float_as_uint(x);
    const unsigned int a = b & 0x7fffffffu;
    if (a > 0x7f800000u || (b >> 31) != 0u) {
        return 0u;
    }
    if (a >= 0x4f800000u) {
        return 0xffffffffu;
    }
    return (unsigned int)x;
}
";

const F32_TO_BOOL: &str = "\
// x != 0, with NaN true and -0 false.
static __device__ __forceinline__ bool poot_f32_to_bool(float x) {
    return (__float_as_uint(x) & 0x7fffffffu) != 0u;
}
";

const DIV_I32: &str = "\
// Truncating division; a / 0 = a and INT_MIN / -1 = INT_MIN, as in WGSL.
static __device__ __forceinline__ int poot_div_i32(int a, int b) {
    if (b == 0) {
        return a;
    }
    if (b == -1) {
        return (int)(0u - (unsigned int)a);
    }
    return a / b;
}
";

const REM_I32: &str = "\
// Remainder with the dividend's sign; a % 0 = 0 and a % -1 = 0, as in WGSL.
static __device__ __forceinline__ int poot_rem_i32(int a, int b) {
    if (b == 0 || b == -1) {
        return 0;
    }
    return a % b;
}
";

const DIV_U32: &str = "\
// Division; a / 0 = a, as in WGSL.
static __device__ __forceinline__ unsigned int poot_div_u32(unsigned int a, unsigned int b) {
    return b == 0u ? a : a / b;
}
";

const REM_U32: &str = "\
// Remainder; a % 0 = 0, as in WGSL.
static __device__ __forceinline__ unsigned int poot_rem_u32(unsigned int a, unsigned int b) {
    return b == 0u ? 0u : a % b;
}
";

const FAULT: &str = "\
// Records a failed check in the fault words (largest code, flag) and traps.
static __device__ __forceinline__ void poot_trap(unsigned int* f, unsigned int code) {
    atomicMax(&f[0], code);
    atomicOr(&f[1], 1u);
    __threadfence_system();
    __trap();
}
";

const FAULT_IF: &str = "\
// A check that traps when `failed`, as a call the optimizer keeps opaque: NVRTC 13.0 crashed
// (segfault) compiling a kernel that repeats an inlined check of the same index.
static __device__ __noinline__ void poot_fault_if(bool failed, unsigned int* f, unsigned int code) {
    if (failed) {
        poot_trap(f, code);
    }
}
";

#[cfg(test)]
mod tests {
    #[test]
    fn the_small_signed_cast_is_exact_within_two_to_the_22() {
        for x in (-(1i32 << 22)..1 << 22)
            .step_by(5)
            .chain([-(1 << 22), -1, 0, 1, (1 << 22) - 1])
        {
            let bits = 0x4b40_0000u32.wrapping_add(x as u32);
            let got = f32::from_bits(bits) - 12_582_912.0;
            assert_eq!(got, x as f32, "{x}");
        }
    }

    #[test]
    fn the_small_integer_cast_is_exact_below_two_to_the_23() {
        for x in (0..1u32 << 23).step_by(7).chain([0, 1, (1 << 23) - 1]) {
            let got = f32::from_bits(0x4b00_0000 | x) - 8_388_608.0;
            assert_eq!(got, x as f32, "{x}");
        }
    }
}
