//! HIP rendering, for AMD GPUs (ROCm: hipRTC, or clang with `-x hip`).
//!
//! HIP spells a kernel as CUDA does, so the statements and expressions are the CUDA dialect's
//! ([`super::cuda`], in its HIP language) and the source uses only names HIP declares for
//! device code: `threadIdx`, `blockIdx`, `__syncthreads`, `atomicMax`, `atomicOr`,
//! `__threadfence_system`, `__float_as_uint`/`__uint_as_float`, the math functions (`expf`,
//! `logf`, `sqrtf`, `tanhf`, `erff`, `floorf`, `ceilf`, `rintf`, `sinf`, `cosf`, `powf`, `fabsf`,
//! `fmaf`, which HIP maps to ROCm's OCML) and the qualifiers (`__global__`, `__device__`,
//! `__shared__`, `__forceinline__`, `__launch_bounds__`), with no `#include`: hipRTC declares
//! them all before the source. What differs from CUDA C:
//!
//! - **Wavefronts.** A subgroup is a wavefront of 64 lanes (gfx9: MI200, MI300) or 32 (gfx10
//!   and later compiled for wave32: RDNA). Shuffles go through `poot_shfl_xor`, a backwards
//!   permute (`ds_bpermute`) addressed by the lane's index within its wavefront, right at
//!   either width; the planner keeps every xor partner inside one team of at most 32 lanes, or
//!   inside the first wavefront of a reduction, and the target's subgroup size must be the
//!   width the kernel was compiled for.
//! - **The workgroup count** (`GroupCountX`) is read from the dispatch packet
//!   (`poot_group_count_x`): HIP's `gridDim` reads implicit kernel arguments that a raw HSA
//!   dispatch does not fill. The rendered kernels read no implicit argument, so the device
//!   may leave that part of the kernel-argument segment zero.
//! - **Faults** record their code as on CUDA, then `__builtin_trap()` (`s_trap 2`), which the
//!   HSA queue reports to its error callback. See [`fault`](super::fault).
//! - **No matrix-unit products**: `MmaTf32`/`MmaHalf` are PTX's `mma.sync` and are refused by
//!   name, as is `StoreSharedHalves`, their staging (the planner gives the ROCm target none).
//! - **Launch bounds** name the workgroup only: CUDA's second bound (workgroups resident per
//!   multiprocessor, [`Kernel::min_resident`]) is tuned for NVIDIA GPUs and HIP reads a second
//!   argument differently, so it is left out.
//! - **No early launch**: kernels do not wait for their predecessors, since each dispatch
//!   packet the device writes carries the barrier bit.
//!
//! Compile with `-ffp-contract=off` (products and sums round one by one, as the oracle's do).

use super::check::check;
use super::code::Code;
use super::cuda::{Cuda, Language, ty};
use super::cuda_lib::CudaLib;
use super::fault::can_fault;
use super::walk::Walker;
use super::{RenderError, entry_name, libs_with_deps, names};
use crate::ir::{Access, Kernel};

/// How the HIP rendering spells the workgroup count along x.
pub(super) const GROUP_COUNT_X_CALL: &str = "poot_group_count_x()";

/// Renders `k` as one HIP translation unit holding one `extern "C"` kernel.
pub fn render_hip(k: &Kernel) -> Result<String, RenderError> {
    let facts = check(k)?;
    let dialect = Cuda {
        language: Language::Hip,
        ..Cuda::default()
    };
    let mut r = Walker::new(k, facts, dialect);
    let mut body = Code::at_depth(1);
    for (i, s) in k.shared.iter().enumerate() {
        body.line(format!(
            "__shared__ __attribute__((aligned(16))) {} {}[{}];",
            ty(s.ty),
            names::shared(i, &s.name),
            s.len
        ));
    }
    r.block(&mut body, &k.body)?;
    let body = body.finish();
    // Builtins are spelled without touching the helper set; the count's helper is added here.
    if body.contains(GROUP_COUNT_X_CALL) {
        r.d.libs.insert(CudaLib::GroupCountX);
    }

    let entry = entry_name(k);
    let mut out = Code::at_depth(0);
    out.line(format!(
        "// poot kernel {entry} (HIP): rendered from a kernel description, do not edit."
    ));
    for l in libs_with_deps(&r.d.libs, CudaLib::deps) {
        out.line("");
        out.raw(l.hip_source());
    }
    let mut params: Vec<String> = k
        .params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let constness = match p.access {
                Access::Read => "const ",
                Access::ReadWrite => "",
            };
            format!(
                "{constness}{}* __restrict__ {}",
                ty(p.word.ty()),
                names::param(i, &p.name)
            )
        })
        .collect();
    if can_fault(k) {
        params.push("unsigned int* __restrict__ poot_fault".to_string());
    }
    out.line("");
    out.line(format!(
        "extern \"C\" __global__ void __launch_bounds__({}) {entry}({}) {{",
        k.workgroup,
        params.join(", ")
    ));
    out.raw(&body);
    out.line("}");
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{KernelBuilder, group_count_x, load, local_id, shuffle_xor, u32c};
    use crate::{Half, Ty, Word};

    fn shuffling_kernel() -> Kernel {
        let mut b = KernelBuilder::new("shuffle", 64);
        let x = b.param("x", Word::F32, Access::Read);
        let out = b.param("out", Word::F32, Access::ReadWrite);
        let v = b.var(Ty::F32, load(x, local_id()));
        b.team_sum(v, 32);
        let n = b.let_(Ty::U32, group_count_x());
        let u = b.let_(Ty::U32, shuffle_xor(local_id(), 16));
        b.store(
            out,
            local_id(),
            crate::Expr::Var(v) + crate::build::cast(Ty::F32, n + u),
        );
        b.finish()
    }

    #[test]
    fn hip_differs_from_cuda_only_where_amd_does() {
        let k = shuffling_kernel();
        let src = render_hip(&k).expect("renders");
        assert!(!src.contains("#include"), "{src}");
        assert!(!src.contains("__shfl_xor_sync"), "{src}");
        assert!(!src.contains("gridDim.x"), "{src}");
        assert!(
            !src.contains("griddepcontrol") && !src.contains("asm("),
            "{src}"
        );
        assert!(src.contains("__builtin_amdgcn_ds_bpermute"), "{src}");
        assert!(src.contains("__builtin_amdgcn_dispatch_ptr"), "{src}");
        // The team sum: five halvings of 32 lanes.
        assert_eq!(src.matches("+= poot_shfl_xor(").count(), 5, "{src}");
        assert!(src.contains(&format!(
            "extern \"C\" __global__ void __launch_bounds__(64) {}(",
            entry_name(&k)
        )));
        // Deterministic, like every renderer.
        assert_eq!(render_hip(&k).as_ref(), Ok(&src));
    }

    #[test]
    fn a_kernel_without_the_count_has_no_count_helper() {
        let mut b = KernelBuilder::new("copy", 32);
        let x = b.param("x", Word::U32, Access::Read);
        let out = b.param("out", Word::U32, Access::ReadWrite);
        b.store(out, local_id(), load(x, local_id()) + u32c(1));
        let src = render_hip(&b.finish()).expect("renders");
        assert!(!src.contains("poot_group_count_x"), "{src}");
        assert!(!src.contains("poot_fault"), "{src}");
    }

    #[test]
    fn faults_trap_through_the_builtin() {
        let mut b = KernelBuilder::new("checked", 32);
        let out = b.param("out", Word::U32, Access::ReadWrite);
        b.begin_if(crate::build::lt(local_id(), u32c(3)));
        b.fault(7);
        b.end();
        b.store(out, local_id(), u32c(0));
        let k = b.finish();
        let src = render_hip(&k).expect("renders");
        assert!(src.contains("__builtin_trap()"), "{src}");
        assert!(!src.contains("__trap()"), "{src}");
        assert!(
            src.contains("unsigned int* __restrict__ poot_fault)"),
            "{src}"
        );
        assert!(src.contains("poot_fault_if("), "{src}");
    }

    #[test]
    fn matrix_unit_products_are_refused_by_name() {
        let mut b = KernelBuilder::new("mma", 32);
        let out = b.param("out", Word::F32, Access::ReadWrite);
        let acc: [crate::Var; 4] = std::array::from_fn(|_| b.var(Ty::F32, crate::Expr::F32(0.0)));
        let a: [crate::Expr; 4] = std::array::from_fn(|_| crate::Expr::U32(0x3c00_3c00));
        let w: [crate::Expr; 2] = std::array::from_fn(|_| crate::Expr::U32(0x3c00_3c00));
        b.mma_half(Half::F16, acc, a, w);
        b.store(out, local_id(), crate::Expr::Var(acc[0]));
        match render_hip(&b.finish()) {
            Err(RenderError::Unsupported { what, language, .. }) => {
                assert_eq!(language, "HIP");
                assert!(what.contains("mma.sync"), "{what}");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
