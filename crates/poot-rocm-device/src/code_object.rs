//! AMD code objects: the ELF a HIP compile produces, read far enough to check it before HSA
//! loads it: the machine, the architecture it was built for, and each kernel's descriptor (its
//! wavefront width, kernel-argument bytes and fixed workgroup and private memory). A compiler
//! that wraps the ELF in a clang offload bundle (`__CLANG_OFFLOAD_BUNDLE__`) has it unwrapped
//! first ([`unbundle`]).
//!
//! Everything read is bounds-checked: a truncated or foreign file is a [`CodeObjectError`],
//! never a panic.

/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;
const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
/// The offload bundle's magic string.
const BUNDLE_MAGIC: &[u8] = b"__CLANG_OFFLOAD_BUNDLE__";
/// Bytes of an AMDHSA kernel descriptor.
const KERNEL_DESCRIPTOR_BYTES: usize = 64;
/// `kernel_code_properties` bit: the kernel runs 32-lane wavefronts.
const KD_WAVEFRONT_SIZE32: u16 = 1 << 10;

/// Why a code object could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    /// The bytes end before a structure they describe.
    #[error("the code object is truncated ({what} past its {len} B)")]
    Truncated { what: &'static str, len: usize },
    /// Not a 64-bit little-endian ELF for AMD GPUs.
    #[error("not an AMD GPU code object: {why}")]
    Foreign { why: String },
    /// An offload bundle without an entry for the architecture.
    #[error("the offload bundle has no code object for {arch} (entries: {entries})")]
    NotInBundle { arch: String, entries: String },
    /// The ELF has no kernel descriptor `{name}.kd`.
    #[error("the code object has no kernel `{name}`")]
    NoKernel { name: String },
}

/// A kernel's descriptor, as the code object holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelDescriptor {
    /// Statically allocated workgroup (LDS) bytes.
    pub group_segment_bytes: u32,
    /// Per-lane scratch bytes.
    pub private_segment_bytes: u32,
    /// Bytes of kernel arguments the kernel reads (hidden arguments included).
    pub kernarg_bytes: u32,
    /// Lanes per wavefront the kernel was compiled for (32 or 64).
    pub wavefront_lanes: u32,
}

/// An AMD GPU ELF code object.
pub struct CodeObject<'a> {
    bytes: &'a [u8],
}

fn read<const N: usize>(
    bytes: &[u8],
    at: usize,
    what: &'static str,
) -> Result<[u8; N], CodeObjectError> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .and_then(|s| s.try_into().ok())
        .ok_or(CodeObjectError::Truncated {
            what,
            len: bytes.len(),
        })
}

fn u16_at(b: &[u8], at: usize, what: &'static str) -> Result<u16, CodeObjectError> {
    Ok(u16::from_le_bytes(read(b, at, what)?))
}

fn u32_at(b: &[u8], at: usize, what: &'static str) -> Result<u32, CodeObjectError> {
    Ok(u32::from_le_bytes(read(b, at, what)?))
}

fn u64_at(b: &[u8], at: usize, what: &'static str) -> Result<u64, CodeObjectError> {
    Ok(u64::from_le_bytes(read(b, at, what)?))
}

fn offset(v: u64, what: &'static str, len: usize) -> Result<usize, CodeObjectError> {
    usize::try_from(v).map_err(|_| CodeObjectError::Truncated { what, len })
}

/// The code object for `arch` (a processor name such as `gfx942`) in `bytes`: the bytes
/// themselves when they are an ELF, the bundle's matching entry when they are an offload bundle.
pub fn unbundle<'a>(bytes: &'a [u8], arch: &str) -> Result<&'a [u8], CodeObjectError> {
    if !bytes.starts_with(BUNDLE_MAGIC) {
        return Ok(bytes);
    }
    let len = bytes.len();
    let count = u64_at(bytes, BUNDLE_MAGIC.len(), "bundle entry count")?;
    let mut at = BUNDLE_MAGIC.len() + 8;
    let mut ids = Vec::new();
    for _ in 0..count {
        let start = offset(u64_at(bytes, at, "bundle entry")?, "bundle entry", len)?;
        let size = offset(u64_at(bytes, at + 8, "bundle entry")?, "bundle entry", len)?;
        let id_len = offset(u64_at(bytes, at + 16, "bundle entry")?, "bundle id", len)?;
        let id_start = at + 24;
        let id = id_start
            .checked_add(id_len)
            .and_then(|end| bytes.get(id_start..end))
            .ok_or(CodeObjectError::Truncated {
                what: "bundle id",
                len,
            })?;
        let id = String::from_utf8_lossy(id).into_owned();
        at = id_start + id_len;
        // `hipv4-amdgcn-amd-amdhsa--gfx942` or `...--gfx942:sramecc+:xnack-`.
        let entry_arch = id.rsplit("--").next().unwrap_or_default();
        let entry_arch = entry_arch.split(':').next().unwrap_or_default();
        if id.contains("amdgcn") && entry_arch == arch {
            return start
                .checked_add(size)
                .and_then(|end| bytes.get(start..end))
                .ok_or(CodeObjectError::Truncated {
                    what: "bundled code object",
                    len,
                });
        }
        ids.push(id);
    }
    Err(CodeObjectError::NotInBundle {
        arch: arch.to_string(),
        entries: ids.join(", "),
    })
}

impl<'a> CodeObject<'a> {
    /// Checks that `bytes` is a 64-bit little-endian ELF for AMD GPUs.
    pub fn parse(bytes: &'a [u8]) -> Result<CodeObject<'a>, CodeObjectError> {
        let ident: [u8; 6] = read(bytes, 0, "ELF header")?;
        if ident[..4] != *b"\x7fELF" || ident[4] != 2 || ident[5] != 1 {
            return Err(CodeObjectError::Foreign {
                why: "not a 64-bit little-endian ELF".to_string(),
            });
        }
        let machine = u16_at(bytes, 0x12, "ELF header")?;
        if machine != EM_AMDGPU {
            return Err(CodeObjectError::Foreign {
                why: format!("ELF machine {machine}, not AMDGPU ({EM_AMDGPU})"),
            });
        }
        Ok(CodeObject { bytes })
    }

    /// The architecture the code was built for: `EF_AMDGPU_MACH`, the low byte of the ELF flags
    /// (compare with [`crate::GpuArch::elf_mach`]).
    pub fn elf_mach(&self) -> Result<u8, CodeObjectError> {
        Ok((u32_at(self.bytes, 0x30, "ELF header")? & 0xff) as u8)
    }

    /// The descriptor of kernel `entry` (its symbol `entry.kd`).
    pub fn kernel(&self, entry: &str) -> Result<KernelDescriptor, CodeObjectError> {
        let b = self.bytes;
        let len = b.len();
        let shoff = offset(u64_at(b, 0x28, "ELF header")?, "section headers", len)?;
        let shentsize = usize::from(u16_at(b, 0x3a, "ELF header")?);
        let shnum = usize::from(u16_at(b, 0x3c, "ELF header")?);
        if shentsize < 64 {
            return Err(CodeObjectError::Foreign {
                why: format!("section headers of {shentsize} B"),
            });
        }
        let section = |i: usize| -> Result<[u64; 4], CodeObjectError> {
            let at = i
                .checked_mul(shentsize)
                .and_then(|o| o.checked_add(shoff))
                .ok_or(CodeObjectError::Truncated {
                    what: "section header",
                    len,
                })?;
            Ok([
                u64::from(u32_at(b, at + 4, "section header")?),
                u64_at(b, at + 16, "section header")?,
                u64_at(b, at + 24, "section header")?,
                u64_at(b, at + 32, "section header")?,
            ])
        };
        let want = format!("{entry}.kd");
        for i in 0..shnum {
            let [kind, _, sym_off, sym_size] = section(i)?;
            if kind != u64::from(SHT_SYMTAB) && kind != u64::from(SHT_DYNSYM) {
                continue;
            }
            let link = u32_at(b, shoff + i * shentsize + 40, "section header")? as usize;
            let [_, _, str_off, str_size] = section(link)?;
            let strings = offset(str_off, "string table", len)?;
            let strings_end = offset(str_off.saturating_add(str_size), "string table", len)?;
            let (sym_off, sym_size) = (
                offset(sym_off, "symbol table", len)?,
                offset(sym_size, "symbol table", len)?,
            );
            for s in 0..sym_size / 24 {
                let at = sym_off + s * 24;
                let name_at = strings + u32_at(b, at, "symbol")? as usize;
                let name = b
                    .get(name_at..strings_end)
                    .and_then(|rest| rest.split(|&c| c == 0).next())
                    .ok_or(CodeObjectError::Truncated {
                        what: "symbol name",
                        len,
                    })?;
                if name != want.as_bytes() {
                    continue;
                }
                let shndx = usize::from(u16_at(b, at + 6, "symbol")?);
                let value = u64_at(b, at + 8, "symbol")?;
                let [_, addr, data_off, _] = section(shndx)?;
                let kd = value
                    .checked_sub(addr)
                    .and_then(|o| o.checked_add(data_off))
                    .ok_or(CodeObjectError::Truncated {
                        what: "kernel descriptor",
                        len,
                    })?;
                let kd = offset(kd, "kernel descriptor", len)?;
                let d: [u8; KERNEL_DESCRIPTOR_BYTES] = read(b, kd, "kernel descriptor")?;
                let word = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
                let properties = u16::from_le_bytes([d[56], d[57]]);
                return Ok(KernelDescriptor {
                    group_segment_bytes: word(0),
                    private_segment_bytes: word(4),
                    kernarg_bytes: word(8),
                    wavefront_lanes: if properties & KD_WAVEFRONT_SIZE32 != 0 {
                        32
                    } else {
                        64
                    },
                });
            }
        }
        Err(CodeObjectError::NoKernel {
            name: entry.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn foreign_and_truncated_bytes_are_errors() {
        assert!(matches!(
            CodeObject::parse(b"").err(),
            Some(CodeObjectError::Truncated { .. })
        ));
        assert!(matches!(
            CodeObject::parse(b"\x7fELF\x01\x01 32-bit").err(),
            Some(CodeObjectError::Foreign { .. })
        ));
        let mut x86 = vec![0u8; 64];
        x86[..6].copy_from_slice(b"\x7fELF\x02\x01");
        x86[0x12] = 62;
        assert!(matches!(
            CodeObject::parse(&x86).err(),
            Some(CodeObjectError::Foreign { .. })
        ));
        // An AMDGPU header whose section headers lie past the end.
        let mut amd = x86.clone();
        amd[0x12] = 224;
        amd[0x28..0x30].copy_from_slice(&1_000_000u64.to_le_bytes());
        amd[0x3a] = 64;
        amd[0x3c] = 3;
        let co = CodeObject::parse(&amd).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            co.kernel("k").err(),
            Some(CodeObjectError::Truncated { .. })
        ));
        // With no sections at all, no kernel.
        amd[0x3c] = 0;
        let co = CodeObject::parse(&amd).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            co.kernel("k").err(),
            Some(CodeObjectError::NoKernel { name: "k".into() })
        );
    }

    fn bundle(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut header = BUNDLE_MAGIC.to_vec();
        header.extend((entries.len() as u64).to_le_bytes());
        let table: usize = entries.iter().map(|(id, _)| 24 + id.len()).sum();
        let mut at = (header.len() + table) as u64;
        let mut body = Vec::new();
        for (id, data) in entries {
            header.extend(at.to_le_bytes());
            header.extend((data.len() as u64).to_le_bytes());
            header.extend((id.len() as u64).to_le_bytes());
            header.extend(id.as_bytes());
            body.extend_from_slice(data);
            at += data.len() as u64;
        }
        header.extend(body);
        header
    }

    #[test]
    fn bundles_give_the_entry_of_the_architecture() {
        let b = bundle(&[
            ("host-x86_64-unknown-linux-gnu-", b""),
            ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", b"NINETYA"),
            ("hipv4-amdgcn-amd-amdhsa--gfx942", b"MI300"),
        ]);
        assert_eq!(unbundle(&b, "gfx942"), Ok(&b"MI300"[..]));
        assert_eq!(unbundle(&b, "gfx90a"), Ok(&b"NINETYA"[..]));
        match unbundle(&b, "gfx1100") {
            Err(CodeObjectError::NotInBundle { arch, entries }) => {
                assert_eq!(arch, "gfx1100");
                assert!(entries.contains("gfx942"), "{entries}");
            }
            other => panic!("expected NotInBundle, got {other:?}"),
        }
        // A plain ELF passes through; a bundle cut short is an error.
        assert_eq!(unbundle(b"\x7fELF", "gfx942"), Ok(&b"\x7fELF"[..]));
        assert!(matches!(
            unbundle(&b[..40], "gfx942"),
            Err(CodeObjectError::Truncated { .. })
        ));
    }
}
