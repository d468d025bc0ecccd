//! GGUF block decodes on real tensors of the two real checkpoints, against gguf-py's decode of the
//! same tensors (SHA-256 of every value, per-row hashes and samples recorded by
//! scripts/ref/gen_format_fixtures.py). The tensor's bytes are read at the absolute offset the
//! fixture records; the test does not parse GGUF.

mod common;

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use common::{fixture_path, hex, sha256_f32, sha256_hex};
use poot_formats::{GgmlType, MatrixShape, PackedFormat, decode_block_row, decode_blocks};
use serde_json::Value;

fn models_dir() -> PathBuf {
    match std::env::var_os("POOT_CACHE") {
        Some(cache) => PathBuf::from(cache).join("models"),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot/models")
        }
    }
}

fn field<'a>(record: &'a Value, key: &str) -> &'a Value {
    record
        .get(key)
        .unwrap_or_else(|| panic!("fixture record lacks `{key}`"))
}

fn num(record: &Value, key: &str) -> usize {
    field(record, key)
        .as_u64()
        .unwrap_or_else(|| panic!("`{key}` is not a number")) as usize
}

fn text<'a>(record: &'a Value, key: &str) -> &'a str {
    field(record, key)
        .as_str()
        .unwrap_or_else(|| panic!("`{key}` is not a string"))
}

#[test]
fn real_tensors_match_gguf_py() {
    let json = std::fs::read_to_string(fixture_path("real_gguf_tensors.json"))
        .expect("fixture is committed");
    let records: Vec<Value> = serde_json::from_str(&json).expect("fixture is JSON");
    let mut types_seen = Vec::new();
    let mut checked = 0;
    for record in &records {
        let file = text(record, "file");
        let path = models_dir().join(file);
        if !path.exists() {
            eprintln!(
                "SKIP: {} is absent (scripts/fetch-models.sh fetches it)",
                path.display()
            );
            continue;
        }
        let name = text(record, "tensor");
        let ggml = GgmlType::from_id(num(record, "ggml_type_id") as u32).expect("a ggml id");
        assert_eq!(ggml.name(), text(record, "ggml_type"));
        let Ok(Some(PackedFormat::Block(format))) = ggml.packed_format() else {
            panic!("{name}: {ggml:?} has no block format");
        };
        let shape = MatrixShape::new(num(record, "n_rows"), num(record, "k_cols"));
        let n_bytes = num(record, "n_bytes");
        assert_eq!(
            ggml.bytes_for((shape.n_rows * shape.k_cols) as u64),
            Some(n_bytes as u64)
        );

        let mut bytes = vec![0u8; n_bytes];
        let mut f = File::open(&path).expect("checkpoint opens");
        f.seek(SeekFrom::Start(num(record, "offset_bytes") as u64))
            .expect("seek");
        f.read_exact(&mut bytes).expect("tensor bytes");
        assert_eq!(
            sha256_hex(&bytes),
            text(record, "raw_sha256"),
            "{file} {name}: stored bytes differ from the checkpoint the fixture was made from"
        );

        let mut out = vec![0f32; shape.n_rows * shape.k_cols];
        decode_blocks(format, &bytes, &mut out).expect("whole blocks");
        for sample in field(record, "samples").as_array().expect("samples") {
            let index = sample[0].as_u64().expect("index") as usize;
            let bits = sample[1].as_u64().expect("bits") as u32;
            assert_eq!(
                out[index].to_bits(),
                bits,
                "{name}[{index}]: {} vs {}",
                out[index],
                f32::from_bits(bits)
            );
        }
        assert_eq!(
            hex(&sha256_f32(&out)),
            text(record, "decoded_sha256"),
            "{file} {name}: decoded values"
        );

        let mut row = vec![0f32; shape.k_cols];
        for r in field(record, "rows").as_array().expect("rows") {
            let index = num(r, "row");
            decode_block_row(format, shape, &bytes, index, &mut row).expect("row in range");
            assert_eq!(
                hex(&sha256_f32(&row)),
                text(r, "sha256"),
                "{name} row {index}"
            );
            // The generic component decode reads the same row.
            let parts = [poot_formats::ComponentBytes::new("weight", &bytes)];
            PackedFormat::Block(format)
                .decode_row(shape, &parts, index, &mut row)
                .expect("row in range");
            assert_eq!(
                hex(&sha256_f32(&row)),
                text(r, "sha256"),
                "{name} row {index} (component decode)"
            );
        }
        eprintln!(
            "{file} {name} {ggml:?} [{}, {}]: bit-exact",
            shape.n_rows, shape.k_cols
        );
        types_seen.push(ggml);
        checked += 1;
    }
    if checked > 0 {
        for t in [
            GgmlType::Q4_1,
            GgmlType::Q4_K,
            GgmlType::Q5_0,
            GgmlType::Q8_0,
            GgmlType::Q6_K,
        ] {
            assert!(types_seen.contains(&t), "no real {t:?} tensor checked");
        }
    }
}
