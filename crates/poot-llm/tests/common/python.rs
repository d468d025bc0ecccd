//! The Python the reference generators run under.

#![allow(dead_code)] // not every test binary that includes `common` generates checkpoints

use std::process::Command;

use super::models::cache;

/// A Python that imports what the checkpoint generators need ($POOT_PYTHON, the cache's venv,
/// then `python3`), or why there is none.
pub fn generator_python() -> Result<String, String> {
    let mut candidates: Vec<String> = std::env::var("POOT_PYTHON").into_iter().collect();
    candidates.push(cache().join("venv/bin/python").display().to_string());
    candidates.push("python3".to_owned());
    for py in &candidates {
        let ok = Command::new(py)
            .args(["-c", "import numpy, torch, transformers, safetensors"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(py.clone());
        }
    }
    Err(format!(
        "none of {candidates:?} imports numpy, torch, transformers and safetensors (scripts/pyenv.sh)"
    ))
}
