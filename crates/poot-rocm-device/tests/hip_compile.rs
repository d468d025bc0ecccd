//! Every kernel the shared device suite plans for ROCm, rendered to HIP and compiled by clang to
//! an AMD code object for each of gfx90a, gfx942 (64-lane wavefronts), gfx1100 and gfx1151 (32
//! lanes), and the device's own kernels with them. Each code object is then read back: built
//! for its architecture, every kernel present with the wavefront width it was planned for, and
//! its kernel arguments exactly its pointers (no hidden arguments a raw HSA dispatch would have
//! to fill).
//!
//! No AMD GPU runs here: this checks that the HIP is valid and that the AMDGPU backend
//! generates code for it, nothing about its values. hipRTC declares HIP's device names before
//! the source; clang without HIP headers (`-nogpuinc -nogpulib`) gets them from [`PRELUDE`],
//! whose math functions are stand-ins built on clang builtins (on a device, hipRTC links ROCm's
//! OCML instead). The clang is `POOT_HIP_CLANG`, else the first of `clang-19`, `clang` that
//! compiles for gfx1151; without one the test prints a SKIP line, except under `CI`, where it
//! fails.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use poot_executor::suite::{self, Case};
use poot_graph_plan::{Target, compile_entry};
use poot_kernel::Kernel;
use poot_kernel::render::{can_fault, entry_name, render_hip};
use poot_rocm_device::code_object::{CodeObject, unbundle};
use poot_rocm_device::{BUILTIN_SOURCE, CI_ARCHS, COPY_ENTRY, FILL_ENTRY, GpuArch};

/// What hipRTC declares before the source and clang without HIP headers does not.
const PRELUDE: &str = r#"
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
struct poot_hip_dim3 { unsigned int x, y, z; };
#define threadIdx (poot_hip_dim3{__builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(), __builtin_amdgcn_workitem_id_z()})
#define blockIdx (poot_hip_dim3{__builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(), __builtin_amdgcn_workgroup_id_z()})
static __device__ __forceinline__ void __syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
static __device__ __forceinline__ void __threadfence_system() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }
static __device__ __forceinline__ unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
static __device__ __forceinline__ float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
static __device__ __forceinline__ unsigned int atomicMax(unsigned int* p, unsigned int v) { return __atomic_fetch_max(p, v, __ATOMIC_RELAXED); }
static __device__ __forceinline__ unsigned int atomicOr(unsigned int* p, unsigned int v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
// Stand-ins for OCML's functions (compiled, never run).
static __device__ __forceinline__ float expf(float x) { return __builtin_expf(x); }
static __device__ __forceinline__ float logf(float x) { return __builtin_logf(x); }
static __device__ __forceinline__ float sqrtf(float x) { return __builtin_sqrtf(x); }
static __device__ __forceinline__ float floorf(float x) { return __builtin_floorf(x); }
static __device__ __forceinline__ float ceilf(float x) { return __builtin_ceilf(x); }
static __device__ __forceinline__ float rintf(float x) { return __builtin_rintf(x); }
static __device__ __forceinline__ float fabsf(float x) { return __builtin_fabsf(x); }
static __device__ __forceinline__ float sinf(float x) { return __builtin_sinf(x); }
static __device__ __forceinline__ float cosf(float x) { return __builtin_cosf(x); }
static __device__ __forceinline__ float fmaf(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
static __device__ __forceinline__ float tanhf(float x) { return 1.0f - 2.0f / (__builtin_expf(2.0f * x) + 1.0f); }
static __device__ __forceinline__ float erff(float x) { return tanhf(1.2025f * x); }
static __device__ __forceinline__ float powf(float x, float y) { return __builtin_exp2f(y * __builtin_log2f(x)); }
"#;

/// Kernels per translation unit (each in a namespace of its own, so their helpers do not
/// collide).
const KERNELS_PER_UNIT: usize = 40;

/// The clang to use, or why there is none.
fn clang(dir: &Path) -> Result<String, String> {
    let named = std::env::var("POOT_HIP_CLANG").ok();
    let probe = dir.join("probe.hip");
    std::fs::write(&probe, "extern \"C\" __attribute__((global)) void k() {}\n")
        .map_err(|e| e.to_string())?;
    let mut tried = Vec::new();
    for c in named.into_iter().chain(["clang-19".into(), "clang".into()]) {
        let out = Command::new(&c)
            .args([
                "-x",
                "hip",
                "--offload-arch=gfx1151",
                "-nogpulib",
                "-nogpuinc",
            ])
            .args(["--cuda-device-only", "--no-gpu-bundle-output", "-o"])
            .arg(dir.join("probe.co"))
            .arg(&probe)
            .output();
        match out {
            Ok(o) if o.status.success() => return Ok(c),
            Ok(o) => tried.push(format!(
                "`{c}`: {}",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
            )),
            Err(e) => tried.push(format!("`{c}`: {e}")),
        }
    }
    Err(tried.join("; "))
}

/// A source to compile, and each kernel in it with the 8-byte arguments it takes.
struct Unit {
    source: String,
    entries: Vec<(String, u32)>,
}

/// Every kernel the suite's cases (and its split and overlapped cases) plan for `target`,
/// renamed apart, rendered, and deduplicated by source.
fn suite_kernels(target: &Target) -> Vec<Unit> {
    let mut cases: Vec<(Case, Target)> = suite::cases()
        .into_iter()
        .map(|c| (c, target.clone()))
        .collect();
    let mut split = target.clone();
    split.limits.max_buffer_bytes = suite::SPLIT_LIMIT_BYTES;
    cases.extend(suite::split_cases().into_iter().map(|c| (c, split.clone())));
    cases.push((suite::overlapped_case().0, target.clone()));
    let mut by_source: BTreeMap<String, Unit> = BTreeMap::new();
    let mut planned = 0usize;
    for (i, (case, t)) in cases.iter().enumerate() {
        let plan = compile_entry(&case.graph, t, &case.name)
            .unwrap_or_else(|e| panic!("{}: the ROCm target refuses the case: {e}", case.name));
        for mut k in plan.kernels {
            planned += 1;
            k.name = format!("c{i}_{}", k.name);
            let unit = render(&k);
            // The same kernel body under another name compiles the same: keep one.
            let body = unit.source.replace(&unit.entries[0].0, "ENTRY");
            by_source.entry(body).or_insert(unit);
        }
    }
    assert!(planned > 100, "only {planned} kernels planned");
    by_source.into_values().collect()
}

fn render(k: &Kernel) -> Unit {
    let source = render_hip(k).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    assert_eq!(
        render_hip(k).as_ref(),
        Ok(&source),
        "{}: not deterministic",
        k.name
    );
    assert!(
        !source.contains("#include"),
        "{}: hipRTC source includes nothing",
        k.name
    );
    let pointers = k.params.len() as u32 + u32::from(can_fault(k));
    Unit {
        source,
        entries: vec![(entry_name(k), pointers)],
    }
}

/// Compiles `units` for `arch` in translation units of [`KERNELS_PER_UNIT`] and checks each
/// code object; panics with clang's complaint or the mismatch.
fn compile_for(clang: &str, dir: &Path, arch: &GpuArch, units: &[Unit], tag: &str) {
    for (n, chunk) in units.chunks(KERNELS_PER_UNIT).enumerate() {
        let mut tu = String::new();
        for (i, u) in chunk.iter().enumerate() {
            tu.push_str(&format!("namespace poot_unit_{i} {{\n{}\n}}\n", u.source));
        }
        let src = dir.join(format!("{tag}_{arch}_{n}.hip"));
        let out = dir.join(format!("{tag}_{arch}_{n}.co"));
        std::fs::write(&src, &tu).unwrap();
        let run = Command::new(clang)
            .args(["-x", "hip", "-nogpulib", "-nogpuinc", "--cuda-device-only"])
            .arg("--no-gpu-bundle-output")
            .args(arch.compile_options())
            .args(["-O3", "-ffp-contract=off", "-Wall", "-Werror"])
            .args(["-Wno-unused-function", "-Wno-unused-variable"])
            .arg("-include")
            .arg(dir.join("prelude.h"))
            .arg("-o")
            .arg(&out)
            .arg(&src)
            .output()
            .expect("run clang");
        assert!(
            run.status.success(),
            "clang rejects the HIP for {arch} ({}):\n{}",
            src.display(),
            String::from_utf8_lossy(&run.stderr)
                .lines()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        let bytes = std::fs::read(&out).unwrap();
        let elf = unbundle(&bytes, arch.name()).unwrap();
        let co = CodeObject::parse(elf).unwrap_or_else(|e| panic!("{arch}: {e}"));
        assert_eq!(co.elf_mach().unwrap(), arch.elf_mach().unwrap(), "{arch}");
        for (entry, args) in chunk.iter().flat_map(|u| &u.entries) {
            let kd = co.kernel(entry).unwrap_or_else(|e| panic!("{arch}: {e}"));
            assert_eq!(kd.wavefront_lanes, arch.wavefront_lanes(), "{arch} {entry}");
            assert!(
                kd.kernarg_bytes <= 8 * args.max(&1),
                "{arch} {entry}: {} B of kernel arguments for {args} (hidden arguments)",
                kd.kernarg_bytes,
            );
            assert!(kd.group_segment_bytes <= 64 << 10, "{arch} {entry}");
        }
    }
}

#[test]
fn every_suite_kernel_compiles_for_the_four_amd_targets() {
    let dir = std::env::temp_dir().join(format!("poot-hip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let clang = match clang(&dir) {
        Ok(c) => c,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI needs a clang that compiles HIP for gfx1151 (clang-19 and lld-19): {why}"
            );
            println!(
                "SKIP: HIP not compiled, no clang for AMD GPUs ({why}); apt-get install clang-19 lld-19"
            );
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    };
    std::fs::write(dir.join("prelude.h"), PRELUDE).unwrap();
    let wave64 = Target::rocm_preset();
    let mut wave32 = Target::rocm_preset();
    wave32.limits.subgroup_size = 32;
    let kernels: Vec<(u32, Vec<Unit>)> = [wave64, wave32]
        .iter()
        .map(|t| (t.limits.subgroup_size, suite_kernels(t)))
        .collect();
    // The suite reaches the HIP-only paths: wavefront shuffles and trapping checks.
    for (lanes, units) in &kernels {
        for needle in ["poot_shfl_xor(", "__builtin_trap()", "poot_group_count_x()"] {
            assert!(
                units.iter().any(|u| u.source.contains(needle)),
                "no {lanes}-lane kernel uses {needle}"
            );
        }
    }
    let builtin = vec![Unit {
        source: BUILTIN_SOURCE.to_string(),
        entries: vec![(FILL_ENTRY.to_string(), 3), (COPY_ENTRY.to_string(), 3)],
    }];
    // The archs in parallel (clang is single-threaded).
    std::thread::scope(|s| {
        for name in CI_ARCHS {
            let (clang, dir, kernels, builtin) = (&clang, &dir, &kernels, &builtin);
            s.spawn(move || {
                let arch = GpuArch::parse(name).unwrap();
                let (_, units) = kernels
                    .iter()
                    .find(|(lanes, _)| *lanes == arch.wavefront_lanes())
                    .unwrap();
                compile_for(clang, dir, &arch, units, "suite");
                compile_for(clang, dir, &arch, builtin, "builtin");
                println!("{arch}: {} kernels compiled", units.len() + 2);
            });
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
