//! Any bytes: the safetensors header parser returns a value or a typed error, and a parsed
//! header tiles the data section exactly. The same bytes are also fed to the JSON readers
//! (shard index, integrity manifest, quantization config).
#![no_main]

use libfuzzer_sys::fuzz_target;
use poot_load::safetensors::{SafetensorsHeader, ShardIndex};
use poot_load::{Manifest, QuantizationConfig};

fuzz_target!(|data: &[u8]| {
    if let Ok(header) = SafetensorsHeader::parse(data) {
        let mut ranges: Vec<_> = header.tensors.iter().map(|t| t.file_range.clone()).collect();
        ranges.sort_by_key(|r| (r.start, r.end));
        let mut covered = header.data_offset_bytes;
        for r in ranges {
            assert!(r.start <= covered, "hole");
            covered = covered.max(r.end);
        }
        assert_eq!(covered, data.len() as u64);
        for t in &header.tensors {
            let n: u64 = t.shape.iter().product();
            assert_eq!(n * t.dtype.size_bytes() as u64, t.file_range.end - t.file_range.start);
        }
    }
    let _ = ShardIndex::parse(data);
    let _ = Manifest::from_json(data);
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = QuantizationConfig::parse(&value);
        let _ = QuantizationConfig::from_hf(&value, Some(&value));
    }
});
