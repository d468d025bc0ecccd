//! The placement flags: `--tensor-parallel` and `--pipeline-stages` are one or the other, a
//! pipeline with more stages than the model has layers is refused before any device opens, and
//! a group on a backend without groups (or a machine without the GPUs) is a one-line refusal.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

fn serve(extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_poot-serve"))
        .arg("--model")
        .arg(common::fixture())
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(extra)
        .env(
            "XDG_RUNTIME_DIR",
            std::env::var("XDG_RUNTIME_DIR").unwrap_or("/tmp".into()),
        )
        .output()
        .unwrap()
}

fn refused(o: &Output, mentions: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains(mentions), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("listening"), "{err}");
}

#[test]
fn both_placements_at_once_are_a_usage_error() {
    let o = serve(&["--tensor-parallel", "2", "--pipeline-stages", "2"]);
    refused(&o, "cannot be used with");
    assert_eq!(o.status.code(), Some(2), "clap's usage error");
    for bad in ["0", "65", "x"] {
        refused(&serve(&["--pipeline-stages", bad]), "--pipeline-stages");
        refused(&serve(&["--tensor-parallel", bad]), "--tensor-parallel");
    }
}

#[test]
fn more_stages_than_layers_are_refused_before_the_devices_open() {
    let o = serve(&["--pipeline-stages", "3", "--backend", "ptx"]);
    refused(
        &o,
        "--pipeline-stages 3: a pipeline of 3 stages over 2 layers",
    );
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("backend ptx on"),
        "the devices opened"
    );
}

#[test]
fn a_group_on_wgpu_or_without_cuda_is_refused_in_one_line() {
    for flag in ["--tensor-parallel", "--pipeline-stages"] {
        let o = serve(&[flag, "2", "--backend", "wgpu"]);
        refused(&o, "does not run a group of devices");
        if poot_llm::open_executor(poot_llm::BackendChoice::Ptx).is_err() {
            refused(&serve(&[flag, "2", "--backend", "ptx"]), "ptx");
        }
    }
}
