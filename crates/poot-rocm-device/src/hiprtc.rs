//! hipRTC, ROCm's runtime compiler (`libhiprtc.so`), loaded at run time: HIP source to an AMD
//! code object for one architecture, with the device functions of ROCm's OCML linked in.
//!
//! `POOT_HIPRTC_LIBRARY` names a file to load instead of the usual names; `ROCM_PATH` (else
//! `/opt/rocm`) is searched after the loader's own path.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use libloading::Library;

/// The environment variable naming the hipRTC library to load.
pub const HIPRTC_LIBRARY_ENV: &str = "POOT_HIPRTC_LIBRARY";

const HIPRTC_SUCCESS: c_int = 0;

type Program = *mut c_void;

/// The hipRTC entry points poot calls.
pub(crate) struct Hiprtc {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int,
    error_string: unsafe extern "C" fn(c_int) -> *const c_char,
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> c_int,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    code_size: unsafe extern "C" fn(Program, *mut usize) -> c_int,
    code: unsafe extern "C" fn(Program, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Program) -> c_int,
    /// Where the library was found.
    pub(crate) path: String,
    _lib: Library,
}

/// A compile that failed: the stage and hipRTC's log.
#[derive(Debug)]
pub(crate) struct CompileFailure {
    pub(crate) log: String,
}

fn candidates() -> Vec<String> {
    let mut names: Vec<String> = std::env::var(HIPRTC_LIBRARY_ENV).ok().into_iter().collect();
    names.extend(
        [
            "libhiprtc.so",
            "libhiprtc.so.7",
            "libhiprtc.so.6",
            "libhiprtc.so.5",
        ]
        .map(String::from),
    );
    let root = std::env::var("ROCM_PATH").unwrap_or_else(|_| "/opt/rocm".to_string());
    names.push(format!("{root}/lib/libhiprtc.so"));
    names
}

/// Loads hipRTC once per process; the reason it is not usable otherwise.
pub(crate) fn hiprtc() -> Result<&'static Hiprtc, String> {
    static HIPRTC: OnceLock<Result<Hiprtc, String>> = OnceLock::new();
    HIPRTC.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Hiprtc, String> {
    let mut tried = Vec::new();
    let mut found = None;
    for name in candidates() {
        // SAFETY: loading hipRTC runs its (trusted) initializers; nothing else.
        match unsafe { Library::new(&name) } {
            Ok(lib) => {
                found = Some((lib, name));
                break;
            }
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    let Some((lib, path)) = found else {
        return Err(format!(
            "hipRTC (libhiprtc.so) was not found ({}); install ROCm's hiprtc or set {HIPRTC_LIBRARY_ENV} to its path",
            tried.join("; ")
        ));
    };
    fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        // SAFETY: every `T` here is the C signature `hiprtc.h` declares for `name`.
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("hipRTC has no `{name}`: {e}"))
    }
    Ok(Hiprtc {
        version: sym(&lib, "hiprtcVersion")?,
        error_string: sym(&lib, "hiprtcGetErrorString")?,
        create: sym(&lib, "hiprtcCreateProgram")?,
        compile: sym(&lib, "hiprtcCompileProgram")?,
        log_size: sym(&lib, "hiprtcGetProgramLogSize")?,
        log: sym(&lib, "hiprtcGetProgramLog")?,
        code_size: sym(&lib, "hiprtcGetCodeSize")?,
        code: sym(&lib, "hiprtcGetCode")?,
        destroy: sym(&lib, "hiprtcDestroyProgram")?,
        path,
        _lib: lib,
    })
}

/// A program, destroyed when dropped.
struct Owned<'a> {
    rtc: &'a Hiprtc,
    program: Program,
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        // SAFETY: the program was created by `hiprtcCreateProgram` and is destroyed once.
        unsafe {
            let _ = (self.rtc.destroy)(&mut self.program);
        }
    }
}

impl Hiprtc {
    /// hipRTC's version, `(major, minor)`.
    pub(crate) fn version(&self) -> Result<(i32, i32), String> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: writes two ints.
        let r = unsafe { (self.version)(&mut major, &mut minor) };
        if r == HIPRTC_SUCCESS {
            Ok((major, minor))
        } else {
            Err(format!("hiprtcVersion: {}", self.text(r)))
        }
    }

    fn text(&self, r: c_int) -> String {
        // SAFETY: returns a static string (or null) for any code.
        let p = unsafe { (self.error_string)(r) };
        if p.is_null() {
            format!("hipRTC error {r}")
        } else {
            // SAFETY: a NUL-terminated static string.
            let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
            format!("{s} ({r})")
        }
    }

    /// Compiles `source` (named `name` in messages) with `options` to a code object (or an
    /// offload bundle holding one).
    pub(crate) fn compile(
        &self,
        name: &str,
        source: &str,
        options: &[String],
    ) -> Result<Vec<u8>, CompileFailure> {
        let failure = |log: String| CompileFailure { log };
        let src = CString::new(source).map_err(|_| failure("the source has a NUL byte".into()))?;
        let file = CString::new(format!("{name}.hip"))
            .map_err(|_| failure(format!("the name {name:?} has a NUL byte")))?;
        let opts: Vec<CString> = options
            .iter()
            .map(|o| CString::new(o.as_str()))
            .collect::<Result<_, _>>()
            .map_err(|_| failure("an option has a NUL byte".into()))?;
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let n_opts =
            c_int::try_from(opt_ptrs.len()).map_err(|_| failure("too many options".into()))?;
        let mut program: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated strings that outlive the call; no headers.
        let r = unsafe {
            (self.create)(
                &mut program,
                src.as_ptr(),
                file.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        if r != HIPRTC_SUCCESS {
            return Err(failure(format!("hiprtcCreateProgram: {}", self.text(r))));
        }
        let owned = Owned { rtc: self, program };
        // SAFETY: a live program; `n_opts` NUL-terminated options that outlive the call.
        let r = unsafe { (self.compile)(owned.program, n_opts, opt_ptrs.as_ptr()) };
        if r != HIPRTC_SUCCESS {
            return Err(failure(format!(
                "hiprtcCompileProgram: {}\n{}",
                self.text(r),
                self.program_log(&owned)
            )));
        }
        let mut size = 0usize;
        // SAFETY: a compiled program; writes one size.
        let r = unsafe { (self.code_size)(owned.program, &mut size) };
        if r != HIPRTC_SUCCESS {
            return Err(failure(format!("hiprtcGetCodeSize: {}", self.text(r))));
        }
        let mut code = vec![0u8; size];
        // SAFETY: `code` holds the `size` bytes hipRTC writes.
        let r = unsafe { (self.code)(owned.program, code.as_mut_ptr().cast()) };
        if r != HIPRTC_SUCCESS {
            return Err(failure(format!("hiprtcGetCode: {}", self.text(r))));
        }
        Ok(code)
    }

    fn program_log(&self, p: &Owned<'_>) -> String {
        let mut size = 0usize;
        // SAFETY: a live program; writes one size.
        if unsafe { (self.log_size)(p.program, &mut size) } != HIPRTC_SUCCESS || size == 0 {
            return String::new();
        }
        let mut log = vec![0u8; size];
        // SAFETY: `log` holds the `size` bytes hipRTC writes (NUL included).
        if unsafe { (self.log)(p.program, log.as_mut_ptr().cast()) } != HIPRTC_SUCCESS {
            return String::new();
        }
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        String::from_utf8_lossy(&log[..end]).into_owned()
    }
}
