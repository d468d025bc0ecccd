//! Shared by the poot-load integration tests: fixture paths, a temporary directory, and the
//! comparison of a parse against the JSON the reference scripts wrote.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use poot_load::gguf::{GgufMetadata, MetaArray, MetaValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

pub fn synthetic(name: &str) -> PathBuf {
    fixtures().join("synthetic").join(name)
}

pub fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A real checkpoint from the model cache, or `None` (after printing a SKIP line) when absent.
pub fn real_model(name: &str) -> Option<PathBuf> {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/poot")))?;
    let path = cache.join("models").join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} is absent (run scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// SHA-256 of the first and last 4 KiB (the whole slice when at most 8 KiB), as
/// `scripts/ref/gguf_describe.py::ends_digest` computes it.
pub fn ends_sha256(bytes: &[u8]) -> String {
    if bytes.len() <= 8192 {
        return sha256_hex(bytes);
    }
    let mut h = Sha256::new();
    h.update(&bytes[..4096]);
    h.update(&bytes[bytes.len() - 4096..]);
    hex::encode(h.finalize())
}

/// A directory removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("poot-load-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Copies every regular file of `src` (one level, plus `1_Pooling/`) into this directory.
    pub fn copy_dir(&self, src: &Path) {
        for entry in std::fs::read_dir(src).expect("read fixture dir") {
            let entry = entry.expect("dir entry");
            if entry.file_type().expect("file type").is_file() {
                std::fs::copy(
                    entry.path(),
                    self.join(&entry.file_name().to_string_lossy()),
                )
                .expect("copy");
            }
        }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every metadata entry the reference lists must be present, typed and valued as listed.
/// With `exhaustive`, the parse must have no other entries either, in the same order.
pub fn check_metadata(meta: &GgufMetadata, expected: &Value, exhaustive: bool) {
    let expected = expected.as_array().expect("metadata list");
    for e in expected {
        let key = e["key"].as_str().expect("key");
        let actual = meta
            .get(key)
            .unwrap_or_else(|| panic!("metadata `{key}` missing"));
        check_value(key, actual, e);
    }
    if exhaustive {
        let keys: Vec<&str> = meta.iter().map(|(k, _)| k).collect();
        let want: Vec<&str> = expected
            .iter()
            .map(|e| e["key"].as_str().expect("key"))
            .collect();
        assert_eq!(keys, want);
    }
}

fn check_value(key: &str, actual: &MetaValue, e: &Value) {
    let ty = e["type"].as_str().expect("type");
    if ty == "array" {
        let MetaValue::Array(a) = actual else {
            panic!("`{key}`: expected an array, got {actual:?}")
        };
        check_array(key, a, e);
        return;
    }
    assert_eq!(actual.type_name(), ty, "`{key}`");
    let v = &e["value"];
    match actual {
        MetaValue::F32(x) => assert_eq!(
            x.to_bits(),
            (v.as_f64().expect("f32") as f32).to_bits(),
            "`{key}`"
        ),
        MetaValue::F64(x) => assert_eq!(x.to_bits(), v.as_f64().expect("f64").to_bits(), "`{key}`"),
        MetaValue::Bool(x) => assert_eq!(Some(*x), v.as_bool(), "`{key}`"),
        MetaValue::String(x) => assert_eq!(Some(x.as_str()), v.as_str(), "`{key}`"),
        other => assert_eq!(other.as_integer(), json_int(v), "`{key}`"),
    }
}

fn json_int(v: &Value) -> Option<i128> {
    v.as_u64()
        .map(i128::from)
        .or_else(|| v.as_i64().map(i128::from))
}

fn check_array(key: &str, a: &MetaArray, e: &Value) {
    let elem = e["elem"].as_str().expect("elem");
    let want_type = if elem == "array" {
        "array of arrays".to_owned()
    } else {
        format!("array of {elem}")
    };
    assert_eq!(a.type_name(), want_type, "`{key}`");
    assert_eq!(
        a.len() as u64,
        e["len"].as_u64().expect("len"),
        "`{key}` length"
    );
    if let MetaArray::Array(items) = a {
        let want = e["items"].as_array().expect("items");
        assert_eq!(items.len(), want.len());
        for (inner, w) in items.iter().zip(want) {
            check_array(key, inner, w);
        }
        return;
    }
    let (head, digest) = array_head_and_digest(a);
    let want_head = e["head"].as_array().expect("head");
    assert_eq!(head.len(), want_head.len(), "`{key}` head");
    for (h, w) in head.iter().zip(want_head) {
        check_value(
            key,
            h,
            &serde_json::json!({ "type": h.type_name(), "value": w }),
        );
    }
    assert_eq!(
        digest,
        e["sha256"].as_str().expect("sha256"),
        "`{key}` contents"
    );
}

/// The first five elements as scalar values, and the SHA-256 of all elements encoded as GGUF
/// stores them (see `scripts/ref/gguf_describe.py`).
fn array_head_and_digest(a: &MetaArray) -> (Vec<MetaValue>, String) {
    fn go<T: Copy, const N: usize>(
        v: &[T],
        wrap: fn(T) -> MetaValue,
        le: fn(T) -> [u8; N],
    ) -> (Vec<MetaValue>, String) {
        let mut h = Sha256::new();
        for &x in v {
            h.update(le(x));
        }
        (
            v.iter().take(5).map(|&x| wrap(x)).collect(),
            hex::encode(h.finalize()),
        )
    }
    match a {
        MetaArray::U8(v) => go(v, MetaValue::U8, u8::to_le_bytes),
        MetaArray::I8(v) => go(v, MetaValue::I8, i8::to_le_bytes),
        MetaArray::U16(v) => go(v, MetaValue::U16, u16::to_le_bytes),
        MetaArray::I16(v) => go(v, MetaValue::I16, i16::to_le_bytes),
        MetaArray::U32(v) => go(v, MetaValue::U32, u32::to_le_bytes),
        MetaArray::I32(v) => go(v, MetaValue::I32, i32::to_le_bytes),
        MetaArray::U64(v) => go(v, MetaValue::U64, u64::to_le_bytes),
        MetaArray::I64(v) => go(v, MetaValue::I64, i64::to_le_bytes),
        MetaArray::F32(v) => go(v, MetaValue::F32, f32::to_le_bytes),
        MetaArray::F64(v) => go(v, MetaValue::F64, f64::to_le_bytes),
        MetaArray::Bool(v) => go(v, MetaValue::Bool, |b| [u8::from(b)]),
        MetaArray::String(v) => {
            let mut h = Sha256::new();
            for s in v {
                h.update((s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            (
                v.iter()
                    .take(5)
                    .map(|s| MetaValue::String(s.clone()))
                    .collect(),
                hex::encode(h.finalize()),
            )
        }
        MetaArray::Array(_) => unreachable!("nested arrays are compared item by item"),
    }
}

/// A safetensors file from a header (JSON text) and a data section, for crafted inputs.
pub fn safetensors_bytes(header_json: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header_json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header_json.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A well-formed safetensors file of the given tensors (name, dtype, shape, bytes), laid out
/// in order. Written here to craft layouts the reference fixtures do not have.
pub fn write_safetensors(tensors: &[(&str, &str, &[u64], &[u8])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(
            (*name).to_owned(),
            serde_json::json!({ "dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()] }),
        );
    }
    safetensors_bytes(&Value::Object(header).to_string(), &data)
}

/// Raw GGUF bytes, field by field, for crafted (often malformed) inputs.
#[derive(Clone, Default)]
pub struct GgufBytes(pub Vec<u8>);

impl GgufBytes {
    /// Magic, version, tensor count, metadata count.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> GgufBytes {
        let mut g = GgufBytes(b"GGUF".to_vec());
        g.u32(version).u64(n_tensors).u64(n_kv);
        g
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn raw(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64).raw(s)
    }
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key.as_bytes()).u32(4).u32(v)
    }
    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        self.str(key.as_bytes()).u32(8).str(v.as_bytes())
    }
    /// Name, dims innermost-first, ggml type id, data offset.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(dims.len() as u32);
        for &d in dims {
            self.u64(d);
        }
        self.u32(type_id).u64(offset)
    }
    pub fn pad_to(&mut self, align: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(align) {
            self.0.push(0);
        }
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    pub fn bytes(&self) -> Vec<u8> {
        self.0.clone()
    }
}
