//! Readers for the committed reference fixtures (written by scripts/ref/gen_format_fixtures.py).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// One array of a "named arrays" fixture file.
pub struct Array {
    pub dtype: String,
    pub dims: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl Array {
    pub fn u32s(&self) -> Vec<u32> {
        self.bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    pub fn f32s(&self) -> Vec<f32> {
        assert_eq!(self.dtype, "f32");
        self.bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        s
    }
    fn u32(&mut self) -> u32 {
        let b = self.take(4);
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn u64(&mut self) -> u64 {
        let b = self.take(8);
        u64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn str(&mut self) -> String {
        let n = self.u32() as usize;
        String::from_utf8(self.take(n).to_vec()).expect("fixture names are UTF-8")
    }
}

/// Reads a "named arrays" fixture (format in the generating script's docstring).
pub fn read_arrays(rel: &str) -> BTreeMap<String, Array> {
    let path = fixture_path(rel);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut c = Cursor {
        bytes: &bytes,
        at: 0,
    };
    assert_eq!(c.take(4), b"PFNA", "{rel}: not a named-arrays fixture");
    assert_eq!(c.u32(), 1, "{rel}: fixture version");
    let count = c.u32();
    let mut out = BTreeMap::new();
    for _ in 0..count {
        let name = c.str();
        let dtype = c.str();
        let rank = c.u32();
        let dims = (0..rank).map(|_| c.u64() as usize).collect();
        let len = c.u64() as usize;
        let data = c.take(len).to_vec();
        out.insert(
            name,
            Array {
                dtype,
                dims,
                bytes: data,
            },
        );
    }
    assert_eq!(c.at, bytes.len(), "{rel}: trailing bytes");
    out
}

pub fn sha256_f32(values: &[f32]) -> [u8; 32] {
    let mut h = Sha256::new();
    for v in values {
        h.update(v.to_le_bytes());
    }
    h.finalize().into()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two f32 slices bit for bit, except that any NaN matches any NaN (the formats define
/// no NaN payloads); NaN positions must agree. Returns the number of values compared.
pub fn assert_bits_eq(what: &str, got: &[f32], want: &[f32]) -> usize {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = if w.is_nan() {
            g.is_nan()
        } else {
            g.to_bits() == w.to_bits()
        };
        assert!(
            same,
            "{what}: element {i}: got {g:e} ({:#010x}), reference {w:e} ({:#010x})",
            g.to_bits(),
            w.to_bits()
        );
    }
    got.len()
}
