//! GGUF files written by gguf-py (scripts/ref/make_load_fixtures.py), read by our parser and
//! compared with what gguf-py wrote and read back.
// Helpers unwrap too: a failure there is the test failing (clippy.toml's
// allow-unwrap-in-tests covers only #[test] bodies).
#![allow(clippy::unwrap_used)]

mod common;

use std::borrow::Cow;

use common::{check_metadata, read_json, sha256_hex, synthetic};
use poot_formats::{GgmlType, StoredType};
use poot_load::gguf::{GgufFile, MetaArray, MetaValue};
use poot_load::{ConfigSource, LoadError, LoadOptions, load, peek_config};
use serde_json::Value;

fn check_against(parsed: &GgufFile, exp: &Value, version: u32) {
    assert_eq!(parsed.version(), version);
    assert_eq!(parsed.alignment_bytes(), exp["alignment"].as_u64().unwrap());
    assert_eq!(
        parsed.data_offset_bytes(),
        exp["data_offset"].as_u64().unwrap()
    );
    assert_eq!(parsed.file_len_bytes(), exp["file_len"].as_u64().unwrap());
    check_metadata(parsed.metadata(), &exp["metadata"], true);
    let want = exp["tensors"].as_array().unwrap();
    assert_eq!(parsed.tensors().len(), want.len());
    for (t, w) in parsed.tensors().iter().zip(want) {
        assert_eq!(t.name, w["name"].as_str().unwrap());
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape, shape, "{}", t.name);
        assert_eq!(
            t.ggml_type.name(),
            w["type"].as_str().unwrap(),
            "{}",
            t.name
        );
        assert_eq!(t.size_bytes(), w["n_bytes"].as_u64().unwrap(), "{}", t.name);
        assert_eq!(
            t.file_range.start,
            w["file_offset"].as_u64().unwrap(),
            "{}",
            t.name
        );
    }
}

#[test]
fn every_ggml_type_and_metadata_type_matches_gguf_py() {
    let exp = read_json(&synthetic("all_types.json"));
    let path = synthetic("all_types.gguf");
    let opened = GgufFile::open(&path).unwrap();
    check_against(&opened, &exp, 3);
    // The header-only reader and the whole-file parser agree.
    let parsed = GgufFile::parse(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(opened, parsed);
    // Every id ggml has assigned is in the file once.
    let mut types: Vec<GgmlType> = parsed.tensors().iter().map(|t| t.ggml_type).collect();
    types.sort_by_key(|t| t.id());
    assert_eq!(types, GgmlType::ALL.to_vec());
}

#[test]
fn version_2_reads_like_version_3() {
    let exp = read_json(&synthetic("all_types.json"));
    let v2 = GgufFile::open(&synthetic("all_types_v2.gguf")).unwrap();
    check_against(&v2, &exp, 2);
}

#[test]
fn custom_alignment_places_the_data_section() {
    let exp = read_json(&synthetic("aligned256.json"));
    let parsed = GgufFile::open(&synthetic("aligned256.gguf")).unwrap();
    assert_eq!(parsed.alignment_bytes(), 256);
    assert_eq!(parsed.data_offset_bytes() % 256, 0);
    check_against(&parsed, &exp, 3);
    let ck = load(&synthetic("aligned256.gguf"), &LoadOptions::default()).unwrap();
    for w in exp["tensors"].as_array().unwrap() {
        let t = ck.store().tensor(w["name"].as_str().unwrap()).unwrap();
        assert_eq!(sha256_hex(t.bytes()), w["sha256"].as_str().unwrap());
    }
}

#[test]
fn admitted_types_load_exactly_as_stored() {
    let exp = read_json(&synthetic("admitted.json"));
    let ck = load(&synthetic("admitted.gguf"), &LoadOptions::default()).unwrap();
    let store = ck.store();
    let want = exp["tensors"].as_array().unwrap();
    assert_eq!(store.len(), want.len());
    let mut total = 0;
    for w in want {
        let name = w["name"].as_str().unwrap();
        let t = store.tensor(name).unwrap();
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
        assert_eq!(
            t.stored_type().name(),
            w["type"].as_str().unwrap(),
            "{name}"
        );
        let ggml = GgmlType::ALL
            .into_iter()
            .find(|g| g.name() == w["type"].as_str().unwrap())
            .unwrap();
        // GGUF's unpacked types become dense words; packed ones stay ggml blocks.
        match t.stored_type() {
            StoredType::Dense(_) => assert_eq!(ggml.block_elems(), 1, "{name}"),
            StoredType::Ggml(g) => assert_eq!(g, ggml, "{name}"),
        }
        assert_eq!(t.size_bytes(), w["n_bytes"].as_u64().unwrap(), "{name}");
        assert_eq!(
            sha256_hex(t.bytes()),
            w["sha256"].as_str().unwrap(),
            "{name}"
        );
        assert_eq!(t.file(), "admitted.gguf");
        total += t.size_bytes();
    }
    assert_eq!(store.total_bytes(), total);
    // Iteration is in name order.
    let names: Vec<&str> = store.names().collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted);
    assert_eq!(store.iter().count(), store.len());
    let ConfigSource::Gguf(meta) = ck.config() else {
        panic!("a GGUF's config is its metadata")
    };
    assert_eq!(meta.architecture().unwrap(), "poot-test");
    assert!(ck.side_files().names().next().is_none());
    assert!(ck.read_side_file("tokenizer.json").is_none());
}

#[test]
fn row_views_match_numpy_row_slices() {
    let exp = read_json(&synthetic("admitted.json"));
    let ck = load(&synthetic("admitted.gguf"), &LoadOptions::default()).unwrap();
    for s in exp["row_slices"].as_array().unwrap() {
        let name = s["name"].as_str().unwrap();
        let (start, end) = (s["start"].as_u64().unwrap(), s["end"].as_u64().unwrap());
        let t = ck.store().tensor(name).unwrap();
        let rows = t.rows(start..end).unwrap();
        assert_eq!(
            sha256_hex(rows.bytes()),
            s["sha256"].as_str().unwrap(),
            "{name} rows {start}..{end}"
        );
        assert_eq!(rows.shape()[0], end - start);
        assert_eq!(&rows.shape()[1..], &t.shape()[1..]);
        assert_eq!(rows.stored_type(), t.stored_type());
        // Zero copy: the view points into the tensor's own bytes.
        let offset = rows.bytes().as_ptr() as usize - t.bytes().as_ptr() as usize;
        assert_eq!(offset as u64, start * t.row_bytes().unwrap());
    }
    // split_rows gives the same three parts.
    let qkv = ck.store().tensor("blk.0.attn_qkv.weight").unwrap();
    assert_eq!(qkv.stored_type(), StoredType::Ggml(GgmlType::Q8_0));
    let parts = qkv.split_rows(&[4, 4, 4]).unwrap();
    for (p, r) in parts.iter().zip([0..4, 4..8, 8..12]) {
        assert_eq!(p, &qkv.rows(r).unwrap());
    }
    // Out-of-range requests are typed errors.
    assert!(matches!(
        qkv.rows(10..13),
        Err(LoadError::RowRange { n_rows: 12, .. })
    ));
    #[allow(clippy::reversed_empty_ranges)]
    let reversed = qkv.rows(5..4);
    assert!(matches!(reversed, Err(LoadError::RowRange { .. })));
    assert!(matches!(
        qkv.split_rows(&[4, 4]),
        Err(LoadError::RowSplit { n_rows: 12, .. })
    ));
    assert!(matches!(
        qkv.split_rows(&[u64::MAX, 13]),
        Err(LoadError::RowSplit { .. })
    ));
}

#[test]
fn unsupported_ggml_types_are_refused_by_tensor_and_type() {
    let refused = [
        GgmlType::Q8_1,
        GgmlType::Q8_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_S,
        GgmlType::IQ1_S,
        GgmlType::IQ1_M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
    ];
    for ty in refused {
        let lower = ty.name().to_lowercase();
        let path = synthetic(&format!("refused_{lower}.gguf"));
        // The header is fine (a tokenizer can still read the metadata) ...
        let header = GgufFile::open(&path).unwrap();
        assert_eq!(header.tensors()[1].ggml_type, ty);
        assert!(matches!(peek_config(&path), Ok(ConfigSource::Gguf(_))));
        // ... but the load refuses the tensor, never reading it as dense weights.
        let err = load(&path, &LoadOptions::default()).unwrap_err();
        let want_tensor = format!("blk.0.{lower}.weight");
        match &err {
            LoadError::UnsupportedGgmlType { tensor, ggml_type } => {
                assert_eq!(tensor, &want_tensor);
                assert_eq!(*ggml_type, ty);
            }
            other => panic!("{ty:?}: expected a refusal, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(&want_tensor) && message.contains(ty.name()),
            "{message}"
        );
    }
    // The file with every type is refused at its first unsupported tensor.
    let err = load(&synthetic("all_types.gguf"), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(
            err,
            LoadError::UnsupportedGgmlType {
                ggml_type: GgmlType::Q8_1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn typed_metadata_getters() {
    let gguf = GgufFile::open(&synthetic("all_types.gguf")).unwrap();
    let m = gguf.metadata();
    assert_eq!(m.architecture().unwrap(), "poot-test");
    assert_eq!(
        m.get_str("test.string").unwrap(),
        "héllo, 世界 \n\t\"quoted\""
    );
    assert_eq!(m.get_str("test.empty_string").unwrap(), "");
    // get_u32 takes any integer type whose value fits.
    assert_eq!(m.get_u32("test.u8").unwrap(), 200);
    assert_eq!(m.get_u32("test.u16").unwrap(), 60000);
    assert_eq!(m.get_u32("test.u32").unwrap(), 4_000_000_000);
    assert_eq!(m.get_u64("test.u64").unwrap(), (1 << 63) + 12345);
    let err = m.get_u32("test.u64").unwrap_err();
    assert!(
        matches!(&err, LoadError::MetadataOutOfRange { key, index: None, .. } if key == "test.u64"),
        "{err:?}"
    );
    assert!(matches!(
        m.get_u32("test.i8"),
        Err(LoadError::MetadataOutOfRange { value: -100, .. })
    ));
    let err = m.get_u32("test.string").unwrap_err();
    assert!(
        matches!(&err, LoadError::MetadataType { key, expected: "u32", found: "string" } if key == "test.string"),
        "{err:?}"
    );
    assert!(matches!(
        m.get_u32("test.bool_true"),
        Err(LoadError::MetadataType { found: "bool", .. })
    ));
    let err = m.get_u32("no.such.key").unwrap_err();
    assert!(matches!(&err, LoadError::MissingMetadata { key } if key == "no.such.key"));
    assert!(err.to_string().contains("no.such.key"));
    // get_f32 takes f32 or f64.
    assert_eq!(m.get_f32("test.f32").unwrap(), 0.1f32);
    assert_eq!(m.get_f32("test.f64").unwrap(), -1234.5678e-30f64 as f32);
    assert!(matches!(
        m.get_f32("test.u32"),
        Err(LoadError::MetadataType { .. })
    ));
    assert!(m.get_bool("test.bool_true").unwrap());
    assert!(!m.get_bool("test.bool_false").unwrap());
    assert!(matches!(
        m.get_bool("test.u8"),
        Err(LoadError::MetadataType { .. })
    ));
    // Arrays.
    assert_eq!(
        m.get_string_array("test.arr_string").unwrap(),
        ["a", "", "ünï", "<|im_start|>"]
    );
    assert!(matches!(
        m.get_string_array("test.arr_i32"),
        Err(LoadError::MetadataType {
            found: "array of i32",
            ..
        })
    ));
    assert!(matches!(
        m.get_string_array("test.string"),
        Err(LoadError::MetadataType {
            found: "string",
            ..
        })
    ));
    assert!(matches!(
        m.get_f32_array("test.arr_f32").unwrap(),
        Cow::Borrowed([1.5, -0.25, 3.0e38])
    ));
    assert_eq!(
        m.get_f32_array("test.arr_f64").unwrap().as_ref(),
        [1e-300f64 as f32, -2.5]
    );
    assert!(matches!(
        m.get_i32_array("test.arr_i32").unwrap(),
        Cow::Borrowed([-1, 0, 2147483647])
    ));
    assert_eq!(
        m.get_i32_array("test.arr_i8").unwrap().as_ref(),
        [-128, 0, 127]
    );
    assert_eq!(
        m.get_i32_array("test.arr_u16").unwrap().as_ref(),
        [0, 65535]
    );
    assert!(matches!(
        m.get_i32_array("test.arr_u32"),
        Err(LoadError::MetadataOutOfRange {
            index: Some(2),
            value: 4294967295,
            ..
        })
    ));
    assert!(matches!(
        m.get_u32_array("test.arr_u32").unwrap(),
        Cow::Borrowed([1, 2, 4294967295])
    ));
    assert_eq!(
        m.get_u32_array("test.arr_u8").unwrap().as_ref(),
        [0, 1, 255]
    );
    assert!(matches!(
        m.get_u32_array("test.arr_i32"),
        Err(LoadError::MetadataOutOfRange {
            index: Some(0),
            value: -1,
            ..
        })
    ));
    assert!(matches!(
        m.get_u32_array("test.arr_f32"),
        Err(LoadError::MetadataType { .. })
    ));
    // Nested arrays keep each inner array's own type.
    let Some(MetaValue::Array(MetaArray::Array(inner))) = m.get("test.nested_string") else {
        panic!()
    };
    assert_eq!(
        inner,
        &[
            MetaArray::String(vec!["x".into(), "y".into()]),
            MetaArray::String(vec!["z".into()])
        ]
    );
}
