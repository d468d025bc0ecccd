//! AMD GPU architectures: what a `gfx` name means for compiling and planning.
//!
//! The wavefront width decides the planner's subgroup size and must match what the kernels are
//! compiled for: GCN and CDNA (`gfx9`: MI200 is gfx90a, MI300 gfx942) run 64 lanes; RDNA
//! (`gfx10`, `gfx11`, `gfx12`: gfx1100 is the RX 7900, gfx1151 Strix Halo) runs either, and
//! poot compiles it for 32 (the compilers' default there).

/// An AMD GPU architecture by its LLVM processor name (`gfx942`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuArch {
    name: String,
    wavefront_lanes: u32,
}

/// The four architectures CI compiles every suite kernel for.
pub const CI_ARCHS: [&str; 4] = ["gfx90a", "gfx942", "gfx1100", "gfx1151"];

/// A name that is not an AMD GPU architecture poot compiles for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` is not an AMD GPU architecture poot compiles for (gfx9, gfx10, gfx11 or gfx12)")]
pub struct UnknownArch {
    pub name: String,
}

impl GpuArch {
    /// The architecture named `name`: a processor (`gfx942`), or an ISA or agent name with a
    /// target triple or features around it (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`).
    pub fn parse(name: &str) -> Result<GpuArch, UnknownArch> {
        let bare = name.rsplit("--").next().unwrap_or(name);
        let bare = bare.split(':').next().unwrap_or(bare).trim();
        let unknown = || UnknownArch {
            name: name.to_string(),
        };
        let digits = bare.strip_prefix("gfx").ok_or_else(unknown)?;
        let family = ["9", "10", "11", "12"]
            .into_iter()
            .find(|f| digits.starts_with(f) && digits.len() == f.len() + 2)
            .ok_or_else(unknown)?;
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(unknown());
        }
        Ok(GpuArch {
            name: bare.to_string(),
            wavefront_lanes: if family == "9" { 64 } else { 32 },
        })
    }

    /// The processor name (`gfx942`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Lanes per wavefront kernels are compiled for: 64 on gfx9, 32 on RDNA.
    pub fn wavefront_lanes(&self) -> u32 {
        self.wavefront_lanes
    }

    /// The compiler options selecting this architecture and its wavefront width.
    pub fn compile_options(&self) -> Vec<String> {
        let mut options = vec![format!("--offload-arch={}", self.name)];
        if self.wavefront_lanes() == 32 {
            options.push("-mno-wavefrontsize64".to_string());
        }
        options
    }

    /// The `EF_AMDGPU_MACH` value (the low byte of an AMD code object's ELF flags) of this
    /// architecture, where poot knows it (checked against clang 19 for each).
    pub fn elf_mach(&self) -> Option<u8> {
        Some(match self.name.as_str() {
            "gfx900" => 0x2c,
            "gfx906" => 0x2f,
            "gfx908" => 0x30,
            "gfx90a" => 0x3f,
            "gfx940" => 0x40,
            "gfx941" => 0x4b,
            "gfx942" => 0x4c,
            "gfx1010" => 0x33,
            "gfx1030" => 0x36,
            "gfx1100" => 0x41,
            "gfx1101" => 0x46,
            "gfx1102" => 0x47,
            "gfx1103" => 0x44,
            "gfx1150" => 0x43,
            "gfx1151" => 0x4a,
            "gfx1152" => 0x55,
            "gfx1200" => 0x48,
            "gfx1201" => 0x4e,
            _ => return None,
        })
    }
}

impl std::fmt::Display for GpuArch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_or_without_triple_and_features() {
        for (name, bare, lanes) in [
            ("gfx90a", "gfx90a", 64),
            ("gfx942", "gfx942", 64),
            ("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942", 64),
            ("gfx1100", "gfx1100", 32),
            ("gfx1151", "gfx1151", 32),
            ("gfx1201", "gfx1201", 32),
        ] {
            let a = GpuArch::parse(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a.name(), bare);
            assert_eq!(a.wavefront_lanes(), lanes, "{name}");
        }
        for bad in [
            "", "gfx", "gfx8031", "sm_90", "gfx9", "gfx11000", "gfxzz1", "gfx803",
        ] {
            assert!(GpuArch::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rdna_compiles_for_32_lanes() {
        let rdna = GpuArch::parse("gfx1151").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            rdna.compile_options(),
            ["--offload-arch=gfx1151", "-mno-wavefrontsize64"]
        );
        let cdna = GpuArch::parse("gfx942").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cdna.compile_options(), ["--offload-arch=gfx942"]);
    }

    #[test]
    fn every_ci_arch_has_its_elf_mach() {
        for a in CI_ARCHS {
            let arch = GpuArch::parse(a).unwrap_or_else(|e| panic!("{e}"));
            assert!(arch.elf_mach().is_some(), "{a}");
        }
    }
}
