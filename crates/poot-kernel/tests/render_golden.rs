//! The exact CUDA and WGSL text of one small kernel, so any change to the renderers' output
//! shows up in review (and in the PTX cache, which keys on this text).

use poot_kernel::build::{
    KernelBuilder, f32c, group_id, load, load_half, load_shared, local_id, lt, max, u32c,
};
use poot_kernel::render::{RenderError, render_cuda, render_wgsl};
use poot_kernel::{Access, Expr, Half, Kernel, Ty, Word};

/// `y[i] = max(bf16(x[i]) * 0.1, 0)` for `i < n`; faults with code 9 past the buffer's end.
fn golden_kernel() -> Kernel {
    let mut b = KernelBuilder::new("scale.relu", 64);
    let x = b.param("x", Word::U32, Access::Read);
    let n = b.param("n", Word::U32, Access::Read);
    let y = b.param("y", Word::F32, Access::ReadWrite);
    let i = b.let_(Ty::U32, group_id(0) * u32c(64) + local_id());
    b.if_else(
        lt(i.clone(), load(n, u32c(0))),
        |b| {
            b.store(
                y,
                i.clone(),
                max(load_half(x, i.clone(), Half::Bf16) * f32c(0.1), f32c(0.0)),
            )
        },
        |b| b.fault(9),
    );
    b.finish()
}

#[test]
fn golden_cuda() {
    let got = render_cuda(&golden_kernel()).expect("renders");
    assert_eq!(got, GOLDEN_CUDA);
}

#[test]
fn golden_wgsl() {
    let got = render_wgsl(&golden_kernel()).expect("renders");
    assert_eq!(got.source, GOLDEN_WGSL);
    assert_eq!(got.entry, "k_scale_relu_b685c54b");
    assert_eq!(got.fault_binding, Some(3));
}

/// One warp's half-precision matrix product: the 12 operands of lane `l` at `x[12 l..]`, staged
/// as 6 packed words in shared memory (4 in one store, 2 in another), its 4 sums to `y[4 l..]`.
fn half_tile_kernel(half: Half) -> Kernel {
    let mut b = KernelBuilder::new("tile", 32);
    let x = b.param("x", Word::F32, Access::Read);
    let y = b.param("y", Word::F32, Access::ReadWrite);
    let sh = b.shared("pairs", Ty::U32, 32 * 8);
    let at = |i: u32| load(x, local_id() * u32c(12) + u32c(i));
    let ops: Vec<Expr> = (0..12).map(|i| b.let_(Ty::F32, at(i))).collect();
    let base = local_id() * u32c(8);
    b.store_shared_halves(half, sh, base.clone(), ops[..8].to_vec());
    b.store_shared_halves(half, sh, base.clone() + u32c(4), ops[8..].to_vec());
    let word = |i: u32| load_shared(sh, base.clone() + u32c(i));
    let acc = [0, 1, 2, 3].map(|_| b.var(Ty::F32, f32c(0.0)));
    b.mma_half(half, acc, [0, 1, 2, 3].map(word), [4, 5].map(word));
    for (i, v) in acc.into_iter().enumerate() {
        b.store(y, local_id() * u32c(4) + u32c(i as u32), Expr::Var(v));
    }
    b.finish()
}

/// The statements' exact CUDA: each operand pair rounded and packed by one `cvt` (the first
/// of a pair in the low half) and stored in one wide store, then one `mma.sync` on the words;
/// WGSL refuses them by name.
#[test]
fn golden_half_matrix_tile() {
    let got = render_cuda(&half_tile_kernel(Half::F16)).expect("renders");
    let start = got
        .find("    {\n        unsigned poot_h0")
        .expect("the staging's block");
    let end = start + got[start..].find("asm volatile").expect("the product");
    let end = end + got[end..].find('\n').expect("its end") + 1;
    assert_eq!(&got[start..end], GOLDEN_HALF_TILE, "{got}");
    let bf16 = render_cuda(&half_tile_kernel(Half::Bf16)).expect("renders");
    assert!(bf16.contains("cvt.rn.bf16x2.f32"));
    assert!(bf16.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"));
    assert!(matches!(
        render_wgsl(&half_tile_kernel(Half::F16)),
        Err(RenderError::Unsupported {
            what: "a half-precision matrix tile's staging",
            language: "WGSL",
            ..
        })
    ));
}

const GOLDEN_HALF_TILE: &str = r#"    {
        unsigned poot_h0; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h0) : "f"(v1), "f"(v0));
        unsigned poot_h1; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h1) : "f"(v3), "f"(v2));
        unsigned poot_h2; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h2) : "f"(v5), "f"(v4));
        unsigned poot_h3; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h3) : "f"(v7), "f"(v6));
        *reinterpret_cast<poot_words4*>(&s0_pairs[(threadIdx.x * 8u)]) = poot_words4{poot_h0, poot_h1, poot_h2, poot_h3};
    }
    {
        unsigned poot_h0; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h0) : "f"(v9), "f"(v8));
        unsigned poot_h1; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(poot_h1) : "f"(v11), "f"(v10));
        *reinterpret_cast<poot_words2*>(&s0_pairs[((threadIdx.x * 8u) + 4u)]) = poot_words2{poot_h0, poot_h1};
    }
    float v12 = 0.0f;
    float v13 = 0.0f;
    float v14 = 0.0f;
    float v15 = 0.0f;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};" : "+f"(v12), "+f"(v13), "+f"(v14), "+f"(v15) : "r"(s0_pairs[((threadIdx.x * 8u) + 0u)]), "r"(s0_pairs[((threadIdx.x * 8u) + 1u)]), "r"(s0_pairs[((threadIdx.x * 8u) + 2u)]), "r"(s0_pairs[((threadIdx.x * 8u) + 3u)]), "r"(s0_pairs[((threadIdx.x * 8u) + 4u)]), "r"(s0_pairs[((threadIdx.x * 8u) + 5u)]));
"#;

const GOLDEN_CUDA: &str = r#"// poot kernel k_scale_relu_b685c54b: rendered from a kernel description, do not edit.

// Half i of a buffer of u32 words (the low half of word i >> 1 when i is even), as bf16.
static __device__ __forceinline__ float poot_load_bf16(const unsigned int* p, unsigned int i) {
    return __uint_as_float(((p[i >> 1] >> ((i & 1u) * 16u)) & 0xffffu) << 16);
}

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

// Records a failed check in the fault words (largest code, flag) and traps.
static __device__ __forceinline__ void poot_trap(unsigned int* f, unsigned int code) {
    atomicMax(&f[0], code);
    atomicOr(&f[1], 1u);
    __threadfence_system();
    __trap();
}

// Waits until the kernels this one may overlap have finished and their writes are visible.
static __device__ __forceinline__ void poot_wait_predecessors() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef POOT_EARLY_LAUNCH
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#endif
}

extern "C" __global__ void __launch_bounds__(64) k_scale_relu_b685c54b(const unsigned int* __restrict__ p0_x, const unsigned int* __restrict__ p1_n, float* __restrict__ p2_y, unsigned int* __restrict__ poot_fault) {
    poot_wait_predecessors();
    const unsigned int v0 = ((blockIdx.x * 64u) + threadIdx.x);
    if (v0 < p1_n[0u]) {
        p2_y[v0] = poot_max_f32((poot_load_bf16(p0_x, v0) * __uint_as_float(0x3dcccccdu /* 0.1 */)), 0.0f);
    } else {
        poot_trap(poot_fault, 9u);
    }
}
"#;

const GOLDEN_WGSL: &str = r#"// poot kernel k_scale_relu_b685c54b: rendered from a kernel description, do not edit.
@group(0) @binding(0) var<storage, read> p0_x: array<u32>;
@group(0) @binding(1) var<storage, read> p1_n: array<u32>;
@group(0) @binding(2) var<storage, read_write> p2_y: array<f32>;
@group(0) @binding(3) var<storage, read_write> poot_fault: array<atomic<u32>>;

// Half i of p0_x (the low half of word i >> 1 when i is even), as bf16.
fn poot_load_bf16_p0_x(i: u32) -> f32 {
    return bitcast<f32>(((p0_x[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu) << 16u);
}

// IEEE 754-2019 maximum: NaN if either is NaN, +0 above -0.
fn poot_max_f32(a: f32, b: f32) -> f32 {
    let ua = bitcast<u32>(a);
    let ub = bitcast<u32>(b);
    if ((ua & 0x7fffffffu) > 0x7f800000u || (ub & 0x7fffffffu) > 0x7f800000u) {
        return bitcast<f32>(0x7fc00000u);
    }
    if (a == b) {
        return bitcast<f32>(ua & ub);
    }
    return select(b, a, a > b);
}

@compute @workgroup_size(64)
fn k_scale_relu_b685c54b(@builtin(local_invocation_id) poot_lid: vec3<u32>, @builtin(workgroup_id) poot_wid: vec3<u32>, @builtin(num_workgroups) poot_nwg: vec3<u32>) {
    let v0: u32 = ((poot_wid.x * 64u) + poot_lid.x);
    if (v0 < p1_n[0u]) {
        p2_y[v0] = poot_max_f32((poot_load_bf16_p0_x(v0) * bitcast<f32>(0x3dcccccdu /* 0.1 */)), 0.0f);
    } else {
        atomicMax(&poot_fault[0], 9u);
        atomicOr(&poot_fault[1], 1u);
    }
}
"#;
