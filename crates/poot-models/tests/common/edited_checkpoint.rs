//! A fixture checkpoint copied to a scratch directory with its config and safetensors header
//! edited, then built through the registry: how the bad-input tests make a checkpoint that
//! disagrees with itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use poot_load::LoadOptions;
use poot_models::test_support::family_fixtures::fixture;
use poot_models::{ModelError, Registry};
use serde_json::Value;

/// A fresh scratch directory.
pub fn scratch() -> PathBuf {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("poot-edited-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Loads `path` and builds its family; the family key on success.
pub fn build(path: &Path) -> Result<String, ModelError> {
    let ck = poot_load::load(path, &LoadOptions::default())?;
    let registry = Registry::builtin()?;
    let entry = registry.resolve(ck.config())?;
    (entry.build)(ck.config(), &ck).map(|p| p.model.config().family.to_string())
}

/// The `family` fixture with its config edited by `edit` and its safetensors header by
/// `header` (a same-length rename or retype, so the data offsets stay valid).
pub fn build_hf(
    family: &str,
    edit: impl FnOnce(&mut Value),
    header: impl FnOnce(String) -> String,
) -> Result<String, ModelError> {
    build_edited(&fixture(family).unwrap().path(), edit, header)
}

/// The checkpoint directory `src` edited as [`build_hf`] edits a family's fixture.
pub fn build_edited(
    src: &Path,
    edit: impl FnOnce(&mut Value),
    header: impl FnOnce(String) -> String,
) -> Result<String, ModelError> {
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    let dir = scratch();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_vec(&config).unwrap(),
    )
    .unwrap();
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let text = String::from_utf8(bytes[8..8 + len].to_vec()).unwrap();
    let edited = header(text.clone());
    assert_eq!(edited.len(), text.len(), "a header edit keeps its length");
    let mut out = bytes[..8].to_vec();
    out.extend(edited.as_bytes());
    out.extend(&bytes[8 + len..]);
    std::fs::write(dir.join("model.safetensors"), out).unwrap();
    let built = build(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    built
}
