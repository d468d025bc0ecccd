//! Any bytes: the GGUF parser returns a value or a typed error, and a parsed file is
//! consistent (every tensor in bounds, no overlap); every typed getter answers on every key.
#![no_main]

use libfuzzer_sys::fuzz_target;
use poot_load::gguf::GgufFile;

fuzz_target!(|data: &[u8]| {
    let Ok(gguf) = GgufFile::parse(data) else { return };
    let len = data.len() as u64;
    assert!(gguf.data_offset_bytes() <= len || gguf.tensors().is_empty());
    let mut ranges: Vec<_> = gguf.tensors().iter().map(|t| t.file_range.clone()).filter(|r| !r.is_empty()).collect();
    ranges.sort_by_key(|r| r.start);
    for r in &ranges {
        assert!(r.start <= r.end && r.end <= len);
    }
    for w in ranges.windows(2) {
        assert!(w[0].end <= w[1].start);
    }
    for t in gguf.tensors() {
        assert_eq!(t.ggml_type.bytes_for(t.n_elems()), Some(t.size_bytes()));
    }
    let m = gguf.metadata();
    for (key, _) in m.iter() {
        let _ = (m.get_str(key), m.get_u32(key), m.get_u64(key), m.get_f32(key), m.get_bool(key));
        let _ = (m.get_string_array(key), m.get_f32_array(key), m.get_i32_array(key), m.get_u32_array(key));
    }
    let _ = m.architecture();
});
