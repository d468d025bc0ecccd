//! Any bytes as a Hugging Face directory: the first two bytes give the length of a
//! `config.json`, the rest is `model.safetensors`. `load` returns a checkpoint or a typed
//! error (quantization configs and quantized layouts included), and every linear of a loaded
//! checkpoint resolves to a view or a typed error.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use poot_load::{LoadOptions, load};

fn scratch() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("poot-fuzz-hf-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((len, rest)) = data.split_first_chunk::<2>() else { return };
    let config_len = usize::from(u16::from_le_bytes(*len)).min(rest.len());
    let (config, weights) = rest.split_at(config_len);
    let dir = scratch();
    if std::fs::write(dir.join("config.json"), config).is_err()
        || std::fs::write(dir.join("model.safetensors"), weights).is_err()
    {
        return;
    }
    let Ok(ck) = load(dir, &LoadOptions::default()) else { return };
    for name in ck.store().names() {
        let prefix = name.rsplit_once('.').map_or(name, |(p, _)| p);
        let _ = ck.linear(prefix);
    }
});
