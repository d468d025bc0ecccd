//! Checkpoint metadata with extreme sizes and values (layer counts and contexts near 2^32 and
//! 2^62, NaN and negative floats, negative integers) gives a model or a typed error: never a
//! panic, an abort on a failed allocation, or an allocation sized by a declared maximum.
//!
//! Every numeric key of a tiny GGUF Llama and of each family fixture's `config.json` is
//! varied. A counting allocator records the largest single allocation, and refuses any over
//! 1 GiB (an abort, so the test fails rather than the machine swapping).

#![allow(clippy::unwrap_used)]

#[path = "common/tiny_gguf.rs"]
mod tiny_gguf;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use poot_graph_ir::TraceLimits;
use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::FIXTURES;
use poot_models::weights::ConstData;
use poot_models::{ModelError, ModelKind, Registry, StepShape, StepSpec};
use proptest::prelude::*;
use serde_json::Value;
use tiny_gguf::{Meta, TinyGguf};

struct Counting;

thread_local! {
    /// The largest single allocation this thread made since the last reset (tests run on
    /// several threads; each measures its own).
    static LARGEST_BYTES: Cell<usize> = const { Cell::new(0) };
}

fn note(bytes: usize) {
    let _ = LARGEST_BYTES.try_with(|l| l.set(l.get().max(bytes)));
}
const REFUSED_BYTES: usize = 1 << 30;
/// What one load of these tiny checkpoints may allocate at once, whatever they declare.
const BOUND_BYTES: usize = 64 << 20;

// SAFETY: forwards to the system allocator; only refuses (null) requests over 1 GiB.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > REFUSED_BYTES {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > REFUSED_BYTES {
            return std::ptr::null_mut();
        }
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A fresh scratch path (tests run in parallel, so each call gets its own directory).
fn scratch(name: &str) -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("poot-extreme-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Removes the scratch directory holding `path`.
fn discard(path: &Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Loads and builds `path`; a built decoder also traces a step at a small capacity and reads
/// its constants (the rotary tables at that capacity). Returns the build's error, if any.
fn build_and_use(path: &Path) -> Result<(), ModelError> {
    let ck = poot_load::load(path, &LoadOptions::default())?;
    let registry = Registry::builtin()?;
    let entry = registry.resolve(ck.config())?;
    let mut model = (entry.build)(ck.config(), &ck)?.model;
    // What a driver does with a capacity of 16: narrow the tables to it.
    let capacity = model.config().max_positions.min(16);
    model.narrow_positions(capacity).unwrap();
    let config = model.config().clone();
    assert_eq!(config.max_positions, capacity.max(1));
    let spec = match config.kind {
        ModelKind::Decoder => StepSpec::step(StepShape::new(1, 1, capacity)),
        ModelKind::Encoder => StepSpec::encode(1, capacity),
    };
    // A trace may refuse a shape (typed); what it declares must be readable.
    if let Ok(graph) = model.trace(&spec, TraceLimits::standard(4096)) {
        for (_, name, ty) in graph.consts() {
            if let Ok(ConstData::F32(v)) = model.weights().const_data(name, ck.store()) {
                assert_eq!(Some(4 * v.len() as u64), ty.size_bytes(), "{name}");
            }
        }
    }
    Ok(())
}

/// Runs `f` and checks the largest single allocation it made stayed bounded.
fn bounded<T>(what: &str, f: impl FnOnce() -> T) -> T {
    LARGEST_BYTES.with(|l| l.set(0));
    let out = f();
    let largest = LARGEST_BYTES.with(Cell::get);
    assert!(
        largest <= BOUND_BYTES,
        "{what}: one allocation of {largest} B"
    );
    out
}

fn extreme_int() -> impl Strategy<Value = i128> {
    prop_oneof![
        Just(0i128),
        Just(1),
        Just(-1),
        Just((1 << 31) - 1),
        Just(1 << 31),
        Just((1 << 32) - 1),
        Just(1 << 32),
        Just(1 << 24),
        Just(1 << 62),
        Just(i64::MAX as i128),
        Just(i64::MIN as i128),
        Just(u64::MAX as i128),
        0i128..100_000,
        any::<u64>().prop_map(i128::from),
        any::<i64>().prop_map(i128::from),
    ]
}

fn extreme_float() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(-1.0),
        Just(1e-45),
        Just(f32::MAX as f64),
        Just(1e300),
        Just(4294967296.0),
        any::<f64>(),
    ]
}

/// A GGUF value for an integer: the narrowest of u32/i32/u64/i64 that holds it.
fn gguf_int(n: i128) -> Meta {
    if let Ok(v) = u32::try_from(n) {
        Meta::U32(v)
    } else if let Ok(v) = i32::try_from(n) {
        Meta::I32(v)
    } else if let Ok(v) = u64::try_from(n) {
        Meta::U64(v)
    } else {
        Meta::I64(n as i64)
    }
}

#[derive(Clone, Debug)]
enum Value_ {
    Int(i128),
    Float(f64),
}

fn extreme_value() -> impl Strategy<Value = Value_> {
    prop_oneof![
        3 => extreme_int().prop_map(Value_::Int),
        1 => extreme_float().prop_map(Value_::Float),
    ]
}

/// The GGUF keys a test varies: the tiny Llama's numeric ones and optional ones it lacks.
fn gguf_keys() -> Vec<String> {
    let mut keys: Vec<String> = TinyGguf::llama()
        .meta
        .iter()
        .filter(|(_, v)| !matches!(v, Meta::Str(_) | Meta::Strs(_)))
        .map(|(k, _)| k.clone())
        .collect();
    keys.extend(
        [
            "llama.attention.key_length",
            "llama.vocab_size",
            "llama.rope.scaling.factor",
            "llama.rope.scaling.original_context_length",
        ]
        .map(String::from),
    );
    keys
}

fn gguf_case(changes: &[(usize, Value_)], yarn: bool) -> Result<(), ModelError> {
    let keys = gguf_keys();
    let mut g = TinyGguf::llama();
    if yarn {
        g.set("llama.rope.scaling.type", Meta::Str("yarn".into()));
        g.set("llama.rope.scaling.factor", Meta::F32(4.0));
        g.set("llama.rope.scaling.original_context_length", Meta::U32(16));
    }
    for (i, v) in changes {
        let key = &keys[i % keys.len()];
        let meta = match *v {
            Value_::Int(n) => gguf_int(n),
            Value_::Float(f) if f.is_finite() && f.abs() > f32::MAX as f64 => Meta::F64(f),
            Value_::Float(f) => Meta::F32(f as f32),
        };
        g.set(key, meta);
    }
    let path = scratch("case.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    let out = build_and_use(&path);
    discard(&path);
    out
}

/// Every numeric key of a fixture's `config.json`, nested ones as `outer.inner`.
fn numeric_keys(config: &Value) -> Vec<Vec<String>> {
    let mut keys = Vec::new();
    if let Value::Object(map) = config {
        for (k, v) in map {
            match v {
                Value::Number(_) => keys.push(vec![k.clone()]),
                Value::Object(inner) => {
                    for (ik, iv) in inner {
                        if iv.is_number() {
                            keys.push(vec![k.clone(), ik.clone()]);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    // Keys a family reads that a fixture may leave out.
    for k in [
        "head_dim",
        "partial_rotary_factor",
        "sliding_window_pattern",
    ] {
        if !keys.iter().any(|p| p.len() == 1 && p[0] == k) {
            keys.push(vec![k.to_string()]);
        }
    }
    keys
}

fn hf_case(fixture: usize, changes: &[(usize, Value_)]) -> Result<(), ModelError> {
    let f = &FIXTURES[fixture % FIXTURES.len()];
    let src = f.path();
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let keys = numeric_keys(&config);
    for (i, v) in changes {
        let path = &keys[i % keys.len()];
        let json = match *v {
            Value_::Int(n) => match (u64::try_from(n), i64::try_from(n)) {
                (Ok(u), _) => Value::from(u),
                (_, Ok(s)) => Value::from(s),
                _ => Value::from(n as f64),
            },
            // JSON has no NaN or infinity: a non-finite float becomes a huge one.
            Value_::Float(x) if x.is_finite() => Value::from(x),
            Value_::Float(_) => Value::from(-1e308),
        };
        let mut slot = &mut config;
        for k in &path[..path.len() - 1] {
            slot = &mut slot[k.as_str()];
        }
        slot[path[path.len() - 1].as_str()] = json;
    }
    let dir = scratch("hf");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let out = build_and_use(&dir);
    discard(&dir);
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn extreme_gguf_metadata_gives_a_model_or_a_typed_error(
        changes in prop::collection::vec((any::<usize>(), extreme_value()), 1..4),
        yarn in any::<bool>(),
    ) {
        let _ = bounded("gguf", || gguf_case(&changes, yarn));
    }

    #[test]
    fn extreme_hf_config_values_give_a_model_or_a_typed_error(
        fixture in any::<usize>(),
        changes in prop::collection::vec((any::<usize>(), extreme_value()), 1..4),
    ) {
        let _ = bounded("hf", || hf_case(fixture, &changes));
    }
}

/// The cases of issue 23, each by name: a typed error naming the key.
#[test]
fn the_reported_sizes_are_typed_errors_naming_their_key() {
    for (key, value) in [
        ("llama.block_count", Meta::U32(u32::MAX)),
        ("llama.block_count", Meta::U64(1 << 62)),
        ("llama.rope.dimension_count", Meta::U32(1 << 31)),
    ] {
        let mut g = TinyGguf::llama();
        g.set(key, value.clone());
        let path = scratch("reported.gguf");
        std::fs::write(&path, g.bytes()).unwrap();
        let err = bounded(key, || build_and_use(&path)).unwrap_err();
        discard(&path);
        assert!(err.to_string().contains(key), "{key} = {value:?}: {err}");
    }
    let llama = FIXTURES.iter().position(|f| f.family == "llama").unwrap();
    for key in ["num_hidden_layers", "max_position_embeddings"] {
        let keys = numeric_keys(
            &serde_json::from_slice(
                &std::fs::read(FIXTURES[llama].path().join("config.json")).unwrap(),
            )
            .unwrap(),
        );
        let i = keys
            .iter()
            .position(|p| p.len() == 1 && p[0] == key)
            .unwrap();
        let err = bounded(key, || hf_case(llama, &[(i, Value_::Int(1 << 62))])).unwrap_err();
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
}

/// A declared context far beyond the capacity in use costs nothing at build: the tables a
/// step reads are those of its capacity.
#[test]
fn a_huge_declared_context_builds_without_its_tables() {
    let mut g = TinyGguf::llama();
    g.set("llama.context_length", Meta::U32(1 << 24));
    let path = scratch("context.gguf");
    std::fs::write(&path, g.bytes()).unwrap();
    bounded("context 2^24", || build_and_use(&path)).unwrap();
    discard(&path);
}

/// The unvaried checkpoints build, so the cases above vary a model that otherwise loads.
#[test]
fn the_unvaried_checkpoints_build() {
    let path = scratch("plain.gguf");
    std::fs::write(&path, TinyGguf::llama().bytes()).unwrap();
    bounded("plain gguf", || build_and_use(&path)).unwrap();
    discard(&path);
    for f in 0..FIXTURES.len() {
        bounded("fixture", || hf_case(f, &[])).unwrap();
    }
}

/// `tests/fixtures/tiny_llama.gguf` is this writer's tiny Llama (the `model_load` fuzz target's
/// seed). `POOT_WRITE_FIXTURES=1` rewrites it.
#[test]
fn the_committed_tiny_gguf_is_the_writers_llama() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny_llama.gguf");
    let bytes = TinyGguf::llama().bytes();
    if std::env::var_os("POOT_WRITE_FIXTURES").is_some() {
        std::fs::write(&path, &bytes).unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
