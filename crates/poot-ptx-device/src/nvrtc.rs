//! Compiling CUDA C to PTX with NVRTC: the option list, the architecture choice and the call.

use std::ffi::{CString, c_char, c_int};

use cudarc::nvrtc::sys;

/// The NVRTC options for one target architecture (`90` for compute capability 9.0).
///
/// The float options pin IEEE behaviour so a kernel computes what the CPU oracle computes op
/// by op: no fused multiply-add contraction, no flush of denormals, correctly rounded division
/// and square root. NVRTC's defaults already say the same for the last three; they are spelled
/// out so a changed default cannot change results. `-default-device` makes every function a
/// device function unless marked otherwise. The output is PTX for the virtual architecture
/// `compute_XY` (a real `sm_XY` target asks NVRTC for a cubin); the driver compiles it for the
/// device when the module is loaded.
pub fn nvrtc_options(arch: u32) -> Vec<String> {
    vec![
        format!("--gpu-architecture=compute_{arch}"),
        "--fmad=false".to_string(),
        "--ftz=false".to_string(),
        "--prec-div=true".to_string(),
        "--prec-sqrt=true".to_string(),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ]
}

/// The architecture to compile for: the newest one NVRTC supports that is not newer than the
/// device (`compute capability major * 10 + minor`). PTX for an older architecture runs on a
/// newer device; `None` when NVRTC supports nothing this old.
pub fn select_arch(device_cc: u32, supported: &[u32]) -> Option<u32> {
    supported.iter().copied().filter(|&a| a <= device_cc).max()
}

/// A failed NVRTC call: the step and its log.
#[derive(Debug)]
pub(crate) struct NvrtcFailure {
    pub(crate) log: String,
}

fn nvrtc_error(step: &str, r: sys::nvrtcResult) -> NvrtcFailure {
    NvrtcFailure {
        log: format!("{step} returned {r:?}"),
    }
}

/// NVRTC's version, `(major, minor)`.
pub(crate) fn version() -> Result<(i32, i32), NvrtcFailure> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: both out-pointers are valid for writes; the library was found present by the caller.
    let r = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    match r {
        sys::nvrtcResult::NVRTC_SUCCESS => Ok((major, minor)),
        r => Err(nvrtc_error("nvrtcVersion", r)),
    }
}

/// The architectures NVRTC can compile for, as `major * 10 + minor`.
pub(crate) fn supported_archs() -> Result<Vec<u32>, NvrtcFailure> {
    let mut n: c_int = 0;
    // SAFETY: the out-pointer is valid for writes.
    let r = unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcGetNumSupportedArchs", r));
    }
    let mut archs: Vec<c_int> = vec![0; usize::try_from(n).unwrap_or(0)];
    if archs.is_empty() {
        return Ok(Vec::new());
    }
    // SAFETY: `archs` holds exactly the count NVRTC reported.
    let r = unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcGetSupportedArchs", r));
    }
    Ok(archs
        .into_iter()
        .filter_map(|a| u32::try_from(a).ok())
        .collect())
}

/// Destroys an NVRTC program when dropped.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed exactly once.
        unsafe {
            let _ = sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

/// Reads a size-then-bytes NVRTC output (the log, the PTX) as text without its trailing NUL.
fn read_text(
    prog: sys::nvrtcProgram,
    size_fn: unsafe fn(sys::nvrtcProgram, *mut usize) -> sys::nvrtcResult,
    get_fn: unsafe fn(sys::nvrtcProgram, *mut c_char) -> sys::nvrtcResult,
) -> Result<String, sys::nvrtcResult> {
    let mut size = 0usize;
    // SAFETY: `prog` is a live program; the out-pointer is valid.
    let r = unsafe { size_fn(prog, &mut size) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(r);
    }
    let mut buf: Vec<u8> = vec![0; size.max(1)];
    // SAFETY: `buf` holds the size NVRTC reported (at least one byte).
    let r = unsafe { get_fn(prog, buf.as_mut_ptr().cast::<c_char>()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(r);
    }
    if let Some(end) = buf.iter().position(|&b| b == 0) {
        buf.truncate(end);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Compiles `source` to PTX text. The program is named `poot_kernel.cu` whatever the kernel, so
/// the output depends only on the source and the options (the cache key).
pub(crate) fn compile(source: &str, options: &[String]) -> Result<String, NvrtcFailure> {
    let src = CString::new(source).map_err(|_| NvrtcFailure {
        log: "the CUDA source contains a NUL byte".to_string(),
    })?;
    let c_opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| NvrtcFailure {
            log: "an NVRTC option contains a NUL byte".to_string(),
        })?;
    let opt_ptrs: Vec<*const c_char> = c_opts.iter().map(|o| o.as_ptr()).collect();
    let n_opts = c_int::try_from(opt_ptrs.len()).map_err(|_| NvrtcFailure {
        log: "too many NVRTC options".to_string(),
    })?;

    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: `src` and the name are NUL-terminated and outlive the program (NVRTC copies them);
    // no headers are passed.
    let r = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            src.as_ptr(),
            c"poot_kernel.cu".as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(nvrtc_error("nvrtcCreateProgram", r));
    }
    let prog = Program(raw);

    // SAFETY: `opt_ptrs` points at `n_opts` NUL-terminated strings alive for the call.
    let compiled = unsafe { sys::nvrtcCompileProgram(prog.0, n_opts, opt_ptrs.as_ptr()) };
    if compiled != sys::nvrtcResult::NVRTC_SUCCESS {
        let log = read_text(prog.0, sys::nvrtcGetProgramLogSize, sys::nvrtcGetProgramLog)
            .unwrap_or_else(|r| format!("(the compile log could not be read: {r:?})"));
        return Err(NvrtcFailure {
            log: format!("nvrtcCompileProgram returned {compiled:?}\n{log}"),
        });
    }
    read_text(prog.0, sys::nvrtcGetPTXSize, sys::nvrtcGetPTX)
        .map_err(|r| nvrtc_error("nvrtcGetPTX", r))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::plausible_ptx;
    use poot_kernel::build::{
        KernelBuilder, f32c, group_count_x, group_id, load, local_id, lt, u32c, un,
    };
    use poot_kernel::render::{entry_name, render_cuda};
    use poot_kernel::{Access, Kernel, Ty, UnOp, Word};

    /// NVRTC runs without a GPU: these tests compile for real where the library is found
    /// (`LD_LIBRARY_PATH`), and report a skip elsewhere.
    fn nvrtc_present() -> bool {
        // SAFETY: only tries to load the library.
        let present = unsafe { sys::is_culib_present() };
        if !present {
            println!("SKIP: no NVRTC");
        }
        present
    }

    fn kernels() -> Vec<Kernel> {
        let mut b = KernelBuilder::new("axpy.l0", 128);
        let a = b.param("a", Word::F32, Access::Read);
        let x = b.param("b", Word::F32, Access::Read);
        let out = b.param("out", Word::F32, Access::ReadWrite);
        let start = group_id(0) * u32c(128) + local_id();
        b.for_(start, u32c(1000), group_count_x() * u32c(128), |b, i| {
            b.store(out, i.clone(), load(a, i.clone()) * f32c(2.0) + load(x, i));
        });
        let axpy = b.finish();

        let mut b = KernelBuilder::new("check.l1", 64);
        let x = b.param("x", Word::F32, Access::Read);
        let out = b.param("out", Word::F32, Access::ReadWrite);
        let i = b.let_(Ty::U32, group_id(0) * u32c(64) + local_id());
        b.if_(lt(i.clone(), u32c(100)), |b| {
            let v = b.let_(Ty::F32, un(UnOp::Tanh, load(x, i.clone())));
            b.if_(lt(v.clone(), f32c(0.0)), |b| b.fault(42));
            b.store(out, i.clone(), v);
        });
        let check = b.finish();

        let mut b = KernelBuilder::new("muladd.l2", 32);
        let x = b.param("x", Word::F32, Access::Read);
        let y = b.param("y", Word::F32, Access::Read);
        let out = b.param("out", Word::F32, Access::ReadWrite);
        let i = b.let_(Ty::U32, local_id());
        b.store(
            out,
            i.clone(),
            load(x, i.clone()) * load(y, i.clone()) + load(out, i),
        );
        vec![axpy, check, b.finish()]
    }

    #[test]
    fn rendered_kernels_compile_to_deterministic_ptx() {
        if !nvrtc_present() {
            return;
        }
        let v = version().expect("nvrtcVersion");
        let archs = supported_archs().expect("supported archs");
        assert!(archs.contains(&90), "NVRTC {v:?} supports {archs:?}");
        for k in kernels() {
            let src = render_cuda(&k).expect("renders");
            let ptx = compile(&src, &nvrtc_options(90))
                .unwrap_or_else(|f| panic!("{}: {}", k.name, f.log));
            let entry = entry_name(&k);
            assert!(
                plausible_ptx(&ptx, &entry),
                "{}: PTX lacks `.entry {entry}(`:\n{ptx}",
                k.name
            );
            assert!(ptx.contains(".target sm_90"), "{}", k.name);
            // `a * b + c` stays a multiply and an add, rounded twice like the CPU's. (libdevice
            // math such as `tanhf` uses explicit FMAs; only contraction is turned off.)
            if k.name == "muladd.l2" {
                assert!(
                    !ptx.contains("fma.rn.f32")
                        && ptx.contains("mul.rn.f32")
                        && ptx.contains("add.rn.f32"),
                    "contracted:\n{ptx}"
                );
            }
            let again = compile(&src, &nvrtc_options(90)).unwrap_or_else(|f| panic!("{}", f.log));
            assert_eq!(ptx, again, "{}: NVRTC output is not deterministic", k.name);
        }
    }

    #[test]
    fn a_compile_error_carries_the_log() {
        if !nvrtc_present() {
            return;
        }
        let src = "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }";
        match compile(src, &nvrtc_options(90)) {
            Err(f) => assert!(f.log.contains("undefined_name"), "{}", f.log),
            Ok(ptx) => panic!("compiled:\n{ptx}"),
        }
        match compile("a\0b", &nvrtc_options(90)) {
            Err(f) => assert!(f.log.contains("NUL"), "{}", f.log),
            Ok(_) => panic!("a NUL byte compiled"),
        }
    }

    #[test]
    fn options_are_deterministic_and_pin_the_float_model() {
        let a = nvrtc_options(90);
        assert_eq!(a, nvrtc_options(90));
        assert_eq!(a[0], "--gpu-architecture=compute_90");
        for o in [
            "--fmad=false",
            "--ftz=false",
            "--prec-div=true",
            "--prec-sqrt=true",
            "-default-device",
            "--std=c++17",
        ] {
            assert!(a.iter().any(|x| x == o), "missing {o}");
        }
        assert_ne!(a, nvrtc_options(89));
    }

    #[test]
    fn arch_is_the_newest_supported_not_newer_than_the_device() {
        let supported = [75, 80, 86, 87, 89, 90, 100, 120];
        assert_eq!(select_arch(90, &supported), Some(90));
        assert_eq!(select_arch(95, &supported), Some(90));
        assert_eq!(select_arch(121, &supported), Some(120));
        assert_eq!(select_arch(70, &supported), None);
        assert_eq!(select_arch(90, &[]), None);
    }
}
