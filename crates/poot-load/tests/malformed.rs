//! Malformed input is a typed error: no panic, no hang, and no allocation beyond what the file
//! holds. Truncations at every cut point, lying lengths and offsets, huge declared counts,
//! bad alignment, unknown types, overlapping and out-of-bounds data.
// Helpers unwrap too: a failure there is the test failing (clippy.toml's
// allow-unwrap-in-tests covers only #[test] bodies).
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{GgufBytes, TempDir, safetensors_bytes, synthetic};
use poot_load::gguf::{GgufError, GgufFile};
use poot_load::safetensors::{SafetensorsError, SafetensorsHeader};
use poot_load::{LoadError, LoadOptions, load, peek_config};

/// Counts this thread's live heap bytes and their peak, so a test can bound what one parse
/// allocates (tests run on several threads; each measures only its own).
struct PeakAlloc;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LIVE.try_with(|live| {
            let now = live.get() + layout.size();
            live.set(now);
            let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
        });
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE.try_with(|live| live.set(live.get().saturating_sub(layout.size())));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

/// The peak heap bytes `f` allocates on this thread beyond what was live when it started.
fn peak_bytes<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let out = f();
    (out, PEAK.with(Cell::get) - base)
}

fn gguf_err(bytes: &[u8]) -> GgufError {
    let (result, peak) = peak_bytes(|| GgufFile::parse(bytes));
    // Never more than a small multiple of the input (plus a fixed allowance for maps).
    assert!(
        peak <= 64 * 1024 + 8 * bytes.len(),
        "allocated {peak} B for a {} B file",
        bytes.len()
    );
    result.expect_err("malformed GGUF parsed")
}

fn st_err(bytes: &[u8]) -> SafetensorsError {
    let (result, peak) = peak_bytes(|| SafetensorsHeader::parse(bytes));
    assert!(
        peak <= 64 * 1024 + 16 * bytes.len(),
        "allocated {peak} B for a {} B file",
        bytes.len()
    );
    result.expect_err("malformed safetensors parsed")
}

#[test]
fn every_truncation_of_a_gguf_is_an_error() {
    for fixture in ["all_types.gguf", "aligned256.gguf"] {
        let bytes = std::fs::read(synthetic(fixture)).unwrap();
        let full = GgufFile::parse(&bytes).unwrap();
        // The file may end in padding after its last tensor; cutting only padding leaves a
        // valid file with the same contents.
        let data_end = full
            .tensors()
            .iter()
            .map(|t| t.file_range.end)
            .max()
            .unwrap() as usize;
        for cut in 0..bytes.len() {
            if cut < data_end {
                gguf_err(&bytes[..cut]);
            } else {
                let parsed = GgufFile::parse(&bytes[..cut]).unwrap();
                assert_eq!(
                    (parsed.metadata(), parsed.tensors()),
                    (full.metadata(), full.tensors())
                );
            }
        }
    }
    // The header-only reader and the loader on truncated files (a sample of cut points).
    let bytes = std::fs::read(synthetic("admitted.gguf")).unwrap();
    let dir = TempDir::new("cut-gguf");
    let path = dir.join("cut.gguf");
    for cut in (0..bytes.len()).step_by(97) {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        assert!(
            matches!(GgufFile::open(&path), Err(LoadError::Gguf { .. })),
            "cut {cut}"
        );
        assert!(
            matches!(peek_config(&path), Err(LoadError::Gguf { .. })),
            "cut {cut}"
        );
        assert!(
            matches!(
                load(&path, &LoadOptions::default()),
                Err(LoadError::Gguf { .. })
            ),
            "cut {cut}"
        );
    }
}

#[test]
fn every_truncation_of_a_safetensors_file_is_an_error() {
    for fixture in [
        "all_dtypes.safetensors",
        "sharded/model-00002-of-00002.safetensors",
    ] {
        let bytes = std::fs::read(synthetic(fixture)).unwrap();
        assert!(SafetensorsHeader::parse(&bytes).is_ok());
        for cut in 0..bytes.len() {
            st_err(&bytes[..cut]);
        }
    }
    let dir = TempDir::new("cut-st");
    dir.copy_dir(&synthetic("sharded"));
    let shard = dir.join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    for cut in (0..bytes.len()).step_by(7) {
        std::fs::write(&shard, &bytes[..cut]).unwrap();
        assert!(
            matches!(
                load(dir.path(), &LoadOptions::default()),
                Err(LoadError::Safetensors { .. })
            ),
            "cut {cut}"
        );
    }
}

/// A minimal valid file: one F32 tensor of 4 elements at offset 0.
fn one_tensor_gguf() -> GgufBytes {
    let mut g = GgufBytes::header(3, 1, 1);
    g.kv_str("general.architecture", "x")
        .tensor("w", &[4], 0, 0)
        .pad_to(32)
        .zeros(16);
    g
}

#[test]
fn crafted_gguf_baseline_parses() {
    let parsed = GgufFile::parse(&one_tensor_gguf().bytes()).unwrap();
    assert_eq!(parsed.tensors()[0].shape, [4]);
    // Empty arrays, zero tensors and a zero-size tensor are fine.
    let mut g = GgufBytes::header(3, 1, 1);
    g.str(b"empty")
        .u32(9)
        .u32(4)
        .u64(0)
        .tensor("z", &[0, 3], 0, 0)
        .pad_to(32);
    let parsed = GgufFile::parse(&g.bytes()).unwrap();
    assert_eq!(parsed.tensors()[0].size_bytes(), 0);
    assert_eq!(parsed.tensors()[0].shape, [3, 0]);
}

#[test]
fn huge_declared_lengths_and_counts_are_refused_without_allocating() {
    // The measure itself sees allocations.
    let (v, peak) = peak_bytes(|| vec![1u8; 1 << 20]);
    assert!(peak >= 1 << 20 && v.len() == 1 << 20);
    // A key length of 2^60.
    let mut g = GgufBytes::header(3, 0, 1);
    g.u64(1 << 60).raw(b"k").zeros(16);
    assert!(
        matches!(gguf_err(&g.bytes()), GgufError::Truncated { what: "metadata key", needed_bytes, .. } if needed_bytes == 1 << 60)
    );
    // A string value of 2^60 bytes.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"k").u32(8).u64(1 << 60).raw(b"abc").zeros(16);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::Truncated {
            what: "string value",
            ..
        }
    ));
    // Arrays of 2^62 u32, strings, nested arrays; u64::MAX u64s (the size overflows).
    for (elem_type, count) in [
        (4u32, 1u64 << 62),
        (8, 1 << 62),
        (9, 1 << 62),
        (10, u64::MAX),
        (0, 1 << 40),
    ] {
        let mut g = GgufBytes::header(3, 0, 1);
        g.str(b"arr").u32(9).u32(elem_type).u64(count).zeros(64);
        let err = gguf_err(&g.bytes());
        assert!(
            matches!(err, GgufError::CountTooLarge { count: c, .. } if c == count),
            "{elem_type}: {err:?}"
        );
    }
    // 2^40 tensors, 2^40 metadata entries.
    let g = GgufBytes::header(3, 1 << 40, 0);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::CountTooLarge {
            what: "tensor info",
            ..
        }
    ));
    let g = GgufBytes::header(3, 0, 1 << 40);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::CountTooLarge {
            what: "metadata entry",
            ..
        }
    ));
    // An inner array count that lies, under an honest outer one.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"nest").u32(9).u32(9).u64(1).u32(6).u64(1 << 61);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::CountTooLarge { .. }
    ));
    // A tensor name length that lies.
    let mut g = GgufBytes::header(3, 1, 0);
    g.u64(u64::MAX).zeros(40);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::Truncated {
            what: "tensor name",
            ..
        }
    ));
}

#[test]
fn bad_header_fields_are_typed() {
    assert!(
        matches!(gguf_err(b"GGML\x03\0\0\0"), GgufError::BadMagic { magic } if &magic == b"GGML")
    );
    let be = GgufBytes::header(3u32.swap_bytes(), 0, 0);
    assert!(matches!(
        gguf_err(&be.bytes()),
        GgufError::BigEndian { swapped_version: 3 }
    ));
    for version in [0, 1, 4, 0xFFFF_FFFF] {
        let g = GgufBytes::header(version, 0, 0);
        assert!(matches!(
            gguf_err(&g.bytes()),
            GgufError::UnsupportedVersion { .. } | GgufError::BigEndian { .. }
        ));
    }
    // Unknown value types, at the top and inside an array.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"k").u32(13).u32(0);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::UnknownValueType { type_id: 13, .. }
    ));
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"k").u32(9).u32(77).u64(1).zeros(8);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::UnknownValueType { type_id: 77, .. }
    ));
    // A boolean that is neither 0 nor 1.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"b").u32(7).u8(2);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::InvalidBool { byte: 2, .. }
    ));
    // Invalid UTF-8 in a key and in a value.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"\xff\xfe").u32(4).u32(1);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::InvalidUtf8 { .. }
    ));
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"k").u32(8).str(b"\xc3");
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::InvalidUtf8 { .. }
    ));
    // A repeated key.
    let mut g = GgufBytes::header(3, 0, 2);
    g.kv_u32("k", 1).kv_u32("k", 2);
    assert!(matches!(gguf_err(&g.bytes()), GgufError::DuplicateKey { key } if key == "k"));
    // Arrays nested deeper than the parser follows.
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"deep").u32(9);
    for _ in 0..20 {
        g.u32(9).u64(1);
    }
    g.u32(4).u64(1).u32(0);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::ArrayTooDeep { .. }
    ));
}

#[test]
fn bad_alignment_is_typed() {
    for (alignment, check) in [(0u32, 0u32), (3, 3), (48, 48)] {
        let mut g = GgufBytes::header(3, 0, 1);
        g.kv_u32("general.alignment", alignment);
        let err = gguf_err(&g.bytes());
        assert!(
            matches!(err, GgufError::AlignmentValue { alignment_bytes } if alignment_bytes == check),
            "{err:?}"
        );
    }
    let mut g = GgufBytes::header(3, 0, 1);
    g.str(b"general.alignment").u32(10).u64(32);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::AlignmentType { found: "u64" }
    ));
    let mut g = GgufBytes::header(3, 0, 1);
    g.kv_str("general.alignment", "32");
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::AlignmentType { found: "string" }
    ));
    // A tensor offset that is not a multiple of the alignment.
    let mut g = GgufBytes::header(3, 1, 0);
    g.tensor("w", &[4], 0, 16).pad_to(32).zeros(64);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::MisalignedTensor {
            offset_bytes: 16,
            alignment_bytes: 32,
            ..
        }
    ));
}

#[test]
fn bad_tensor_infos_are_typed() {
    let data = |g: &mut GgufBytes| {
        g.pad_to(32).zeros(256);
    };
    // Too many dimensions.
    let mut g = GgufBytes::header(3, 1, 0);
    g.tensor("w", &[1, 1, 1, 1, 1], 0, 0);
    data(&mut g);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::TooManyDims { n_dims: 5, .. }
    ));
    // Unknown (retired and never assigned) ggml types.
    for type_id in [4, 5, 31, 42, 1000] {
        let mut g = GgufBytes::header(3, 1, 0);
        g.tensor("w", &[4], type_id, 0);
        data(&mut g);
        let err = gguf_err(&g.bytes());
        assert!(
            matches!(&err, GgufError::UnknownGgmlType { tensor, type_id: t } if tensor == "w" && *t == type_id)
        );
    }
    // Dims whose product overflows, also when a zero dimension makes the tensor empty (found
    // by fuzzing: the reversed shape's product overflowed after the check passed).
    for dims in [
        [1 << 40, 1 << 40, 1],
        [0, 1 << 40, 1 << 40],
        [1 << 40, 0, 1 << 40],
    ] {
        let mut g = GgufBytes::header(3, 1, 0);
        g.tensor("w", &dims, 0, 0);
        data(&mut g);
        assert!(
            matches!(gguf_err(&g.bytes()), GgufError::SizeOverflow { .. }),
            "{dims:?}"
        );
    }
    // A Q4_0 row of 16 elements: half a block.
    let mut g = GgufBytes::header(3, 1, 0);
    g.tensor("q", &[16, 2], 2, 0);
    data(&mut g);
    assert!(matches!(
        gguf_err(&g.bytes()),
        GgufError::PartialBlock {
            row_elems: 16,
            block_elems: 32,
            ..
        }
    ));
    // Data past the end of the file, and an offset that overflows.
    for offset in [224, 1 << 63] {
        let mut g = GgufBytes::header(3, 1, 0);
        g.tensor("w", &[16], 0, offset);
        data(&mut g);
        assert!(
            matches!(gguf_err(&g.bytes()), GgufError::TensorOutOfBounds { .. }),
            "offset {offset}"
        );
    }
    // Overlapping tensors, and a repeated name.
    let mut g = GgufBytes::header(3, 2, 0);
    g.tensor("a", &[16], 0, 0).tensor("b", &[16], 0, 32);
    data(&mut g);
    assert!(
        matches!(gguf_err(&g.bytes()), GgufError::TensorOverlap { first, second } if first == "a" && second == "b")
    );
    let mut g = GgufBytes::header(3, 2, 0);
    g.tensor("a", &[4], 0, 0).tensor("a", &[4], 0, 32);
    data(&mut g);
    assert!(matches!(gguf_err(&g.bytes()), GgufError::DuplicateTensor { tensor } if tensor == "a"));
}

#[test]
fn crafted_safetensors_errors_are_typed() {
    let f32x2 = [0u8; 8];
    let ok = |h: &str, d: &[u8]| SafetensorsHeader::parse(&safetensors_bytes(h, d));
    assert!(
        ok(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#,
            &f32x2
        )
        .is_ok()
    );
    // Shorter than the length field; a header that runs past the end; one above the limit.
    assert!(matches!(
        st_err(b"\x05\0\0"),
        SafetensorsError::Truncated { file_len_bytes: 3 }
    ));
    let mut b = 1000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert!(matches!(
        st_err(&b),
        SafetensorsError::HeaderPastEnd {
            header_len_bytes: 1000,
            available_bytes: 2
        }
    ));
    let mut b = (1u64 << 62).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    assert!(matches!(
        st_err(&b),
        SafetensorsError::HeaderTooLarge { .. }
    ));
    let err = |h: &str, d: &[u8]| st_err(&safetensors_bytes(h, d));
    // Not a JSON object (including JSON nested past serde_json's recursion limit).
    for h in ["", "[]", "{", "nul", "{\"a\":1,}"] {
        assert!(
            matches!(err(h, &[]), SafetensorsError::HeaderJson { .. }),
            "{h:?}"
        );
    }
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
    assert!(matches!(
        err(&deep, &[]),
        SafetensorsError::HeaderJson { .. }
    ));
    // Malformed entries.
    for h in [
        r#"{"a":{"shape":[2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":3,"shape":[2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}}"#,
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}"#,
        r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}}"#,
        r#"{"a":7}"#,
    ] {
        assert!(
            matches!(err(h, &f32x2), SafetensorsError::EntryField { .. }),
            "{h}"
        );
    }
    assert!(matches!(
        err(r#"{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,8]}}"#, &f32x2),
        SafetensorsError::UnknownDtype { dtype, .. } if dtype == "F4"
    ));
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#,
            &f32x2
        ),
        SafetensorsError::OffsetsReversed { .. }
    ));
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}}"#,
            &f32x2
        ),
        SafetensorsError::OutOfBounds { .. }
    ));
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#,
            &f32x2
        ),
        SafetensorsError::LengthMismatch {
            expected_bytes: 12,
            actual_bytes: 8,
            ..
        }
    ));
    for shape in [
        "[4294967296,4294967296]",
        "[0,4294967296,4294967296]",
        "[4294967296,4294967296,0]",
    ] {
        let h = format!(
            r#"{{"a":{{"dtype":"F64","shape":{shape},"data_offsets":[0,0]}},"b":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}}"#
        );
        assert!(
            matches!(err(&h, &f32x2), SafetensorsError::SizeOverflow { .. }),
            "{shape}"
        );
    }
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &f32x2
        ),
        SafetensorsError::Overlap { .. }
    ));
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &f32x2
        ),
        SafetensorsError::DuplicateTensor { tensor } if tensor == "a"
    ));
    // Holes: between tensors, and trailing bytes no tensor covers.
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &f32x2
        ),
        SafetensorsError::Hole {
            start_bytes: 0,
            end_bytes: 4
        }
    ));
    assert!(matches!(
        err(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
            &f32x2
        ),
        SafetensorsError::Hole {
            start_bytes: 4,
            end_bytes: 8
        }
    ));
    assert!(matches!(
        err(r#"{"__metadata__":{"k":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#, &f32x2),
        SafetensorsError::MetadataEntry { key } if key == "k"
    ));
}
