//! Identifiers in rendered source: derived from the description's names, valid in CUDA C and
//! WGSL, distinct from each other and from every keyword.
//!
//! A name is reduced to ASCII letters and digits joined by single underscores (other characters
//! become `_`, runs of `_` collapse, leading and trailing ones drop, at most
//! [`MAX_NAME_CHARS`] are kept) and put behind a prefix no keyword or helper starts with:
//! `p{i}_` for parameter `i`, `s{i}_` for shared array `i`, `k_` for the entry point. No
//! identifier then has a double underscore (reserved in both languages) or starts with a digit.

use std::fmt::Write;

use super::RenderError;
use crate::ir::{Kernel, KernelError, ParamId, SharedId, Var};

/// The most characters of a description's name kept in an identifier.
const MAX_NAME_CHARS: usize = 48;

/// The entry point's name for `k` in both renderings: `k_` and the kernel's reduced name. When
/// reducing changed the name, eight hex digits of a hash of the original follow, so names that
/// reduce alike (`attn.l3`, `attn_l3`) still get different entry points.
pub fn entry_name(k: &Kernel) -> String {
    let reduced = reduce(&k.name);
    let mut s = join("k", &reduced);
    if reduced != k.name {
        let _ = write!(s, "_{:08x}", fnv1a(k.name.as_bytes()));
    }
    s
}

/// Buffer parameter `i`'s identifier.
pub(crate) fn param(i: usize, name: &str) -> String {
    join(&format!("p{i}"), &reduce(name))
}

/// Shared array `i`'s identifier.
pub(crate) fn shared(i: usize, name: &str) -> String {
    join(&format!("s{i}"), &reduce(name))
}

/// The identifier of `k`'s parameter `p`.
pub(crate) fn param_of(k: &Kernel, p: ParamId) -> Result<String, RenderError> {
    let decl = k
        .params
        .get(p.0 as usize)
        .ok_or_else(|| KernelError::Unknown {
            kernel: k.name.clone(),
            kind: "parameter",
            index: p.0,
        })?;
    Ok(param(p.0 as usize, &decl.name))
}

/// The identifier of `k`'s shared array `s`.
pub(crate) fn shared_of(k: &Kernel, s: SharedId) -> Result<String, RenderError> {
    let arr = k
        .shared
        .get(s.0 as usize)
        .ok_or_else(|| KernelError::Unknown {
            kernel: k.name.clone(),
            kind: "shared array",
            index: s.0,
        })?;
    Ok(shared(s.0 as usize, &arr.name))
}

/// A variable's identifier.
pub(crate) fn var(v: Var) -> String {
    format!("v{}", v.0)
}

fn join(prefix: &str, reduced: &str) -> String {
    if reduced.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}_{reduced}")
    }
}

/// `name` as ASCII alphanumerics joined by single underscores, at most [`MAX_NAME_CHARS`].
fn reduce(name: &str) -> String {
    let mut out = String::new();
    let mut pending_sep = false;
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            if pending_sep && !out.is_empty() {
                out.push('_');
            }
            pending_sep = false;
            out.push(c);
            if out.len() >= MAX_NAME_CHARS {
                break;
            }
        } else {
            pending_sep = true;
        }
    }
    out
}

/// 32-bit FNV-1a: a fixed, dependency-free hash, so entry names never change between builds.
fn fnv1a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in bytes {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduces_to_safe_identifiers() {
        assert_eq!(reduce("rmsnorm_l3"), "rmsnorm_l3");
        assert_eq!(reduce("__a..b--c__"), "a_b_c");
        assert_eq!(reduce("ünï"), "n");
        assert_eq!(reduce(""), "");
        assert_eq!(param(0, "x"), "p0_x");
        assert_eq!(param(2, "..."), "p2");
        assert_eq!(shared(1, "float"), "s1_float");
        assert_eq!(reduce(&"a".repeat(100)).len(), MAX_NAME_CHARS);
    }
}
