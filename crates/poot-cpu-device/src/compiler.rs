//! The system C compiler: kernels' C to shared objects, cached on disk by content hash.
//!
//! A shared object is compiled for this machine (`-march=native`), so its cache key holds the
//! source, the compiler's identity and flags, and the instruction-set extensions the CPU
//! reports: a cache shared by machines of different CPUs never loads code one of them cannot
//! run. Files are written under a temporary name and renamed, so a concurrent process never
//! loads half a file.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// The C compiler the device runs, from `$CC` or `cc`.
#[derive(Clone, Debug)]
pub(crate) struct Compiler {
    program: String,
    /// `cc --version`'s first line, part of every cache key.
    version: String,
    cache_dir: Option<PathBuf>,
    /// Flags only GCC takes: at `-O2` its vectoriser otherwise declines most loops (clang's
    /// does not need asking, and refuses the flag).
    gcc_only: &'static [&'static str],
}

/// Flags every kernel is compiled with: optimized for this CPU, each product rounded on its own
/// as the oracle rounds it (no contraction into fused multiply-adds), sums free to be
/// reassociated (the order of a sum is what the tolerances allow) so reductions vectorise.
pub(crate) const KERNEL_FLAGS: &[&str] = &[
    "-O2",
    "-march=native",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-fassociative-math",
    "-fno-signed-zeros",
    "-fno-trapping-math",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-w",
];

/// Flags of the contraction library (`contract.c`): its sums are reassociated anyway, so they
/// may use fused multiply-adds (its decoders opt out where ggml rounds each step).
pub(crate) const LIBRARY_FLAGS: &[&str] = &[
    "-O3",
    "-march=native",
    "-ffp-contract=fast",
    "-fno-math-errno",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-w",
];

/// Why a kernel could not be compiled.
#[derive(Debug)]
pub(crate) enum CompileFailure {
    /// The compiler could not be run at all.
    Missing(String),
    /// It ran and refused the source (with its diagnostics).
    Refused(String),
}

impl Compiler {
    /// The compiler, checked by running it once.
    pub(crate) fn find(cache_root: Option<&Path>) -> Result<Compiler, CompileFailure> {
        let program = std::env::var("CC")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "cc".to_string());
        let out = Command::new(&program).arg("--version").output().map_err(|e| {
            CompileFailure::Missing(format!(
                "the C compiler `{program}` could not be run ({e}); install one (`apt install gcc`) or set CC"
            ))
        })?;
        if !out.status.success() {
            return Err(CompileFailure::Missing(format!(
                "`{program} --version` failed ({}); install a working C compiler (`apt install gcc`) or set CC",
                out.status
            )));
        }
        let version = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .to_string();
        let gcc_only: &[&str] = if version.contains("clang") {
            &[]
        } else {
            &["-fvect-cost-model=dynamic"]
        };
        Ok(Compiler {
            program,
            version,
            gcc_only,
            cache_dir: cache_root.map(|r| r.join("cpu")),
        })
    }

    /// The compiler's name and version, for device names and reports.
    pub(crate) fn describe(&self) -> String {
        format!("{} ({})", self.program, self.version)
    }

    /// The content key of `source` compiled here with `flags`.
    pub(crate) fn key(&self, source: &str, flags: &[&str]) -> String {
        let mut h = Sha256::new();
        h.update(source.as_bytes());
        h.update(b"\0");
        h.update(self.program.as_bytes());
        h.update(b"\0");
        h.update(self.version.as_bytes());
        for f in flags.iter().chain(self.gcc_only) {
            h.update(b"\0");
            h.update(f.as_bytes());
        }
        h.update(b"\0");
        h.update(cpu_features().as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// Whether the disk cache holds the shared object keyed `key`.
    pub(crate) fn cached(&self, key: &str) -> bool {
        self.cache_dir
            .as_ref()
            .is_some_and(|d| d.join(format!("{key}.so")).is_file())
    }

    /// The shared object of `source` (keyed `key`, compiled with `flags`): from the disk cache
    /// when present, else compiled into it (or into a temporary directory without a cache).
    pub(crate) fn shared_object(
        &self,
        key: &str,
        source: &str,
        flags: &[&str],
    ) -> Result<PathBuf, CompileFailure> {
        let dir = match &self.cache_dir {
            Some(d) => d.clone(),
            None => std::env::temp_dir().join(format!("poot-cpu-{}", std::process::id())),
        };
        let so = dir.join(format!("{key}.so"));
        if so.is_file() {
            return Ok(so);
        }
        std::fs::create_dir_all(&dir).map_err(|e| {
            CompileFailure::Missing(format!("cannot create {}: {e}", dir.display()))
        })?;
        let unique = format!("{key}.{}.{}", std::process::id(), unique_suffix());
        let c_file = dir.join(format!("{unique}.c"));
        let tmp_so = dir.join(format!("{unique}.so"));
        std::fs::write(&c_file, source).map_err(|e| {
            CompileFailure::Missing(format!("cannot write {}: {e}", c_file.display()))
        })?;
        let out = Command::new(&self.program)
            .args(flags)
            .args(self.gcc_only)
            .arg("-o")
            .arg(&tmp_so)
            .arg(&c_file)
            .arg("-lm")
            .output();
        let _ = std::fs::remove_file(&c_file);
        let out = out.map_err(|e| {
            CompileFailure::Missing(format!(
                "the C compiler `{}` could not be run ({e})",
                self.program
            ))
        })?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&tmp_so);
            return Err(CompileFailure::Refused(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        std::fs::rename(&tmp_so, &so)
            .map_err(|e| CompileFailure::Missing(format!("cannot store {}: {e}", so.display())))?;
        Ok(so)
    }
}

/// A suffix no other compile of this process uses.
fn unique_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The instruction-set extensions `-march=native` may use, as this CPU reports them.
fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut f = Vec::new();
        macro_rules! probe {
            ($($name:tt),*) => {
                $(if std::arch::is_x86_feature_detected!($name) { f.push($name); })*
            };
        }
        probe!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "bmi2",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni",
            "avx512bf16",
            "avx512fp16",
            "avxvnni"
        );
        f.join(",")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}
