//! A split GGUF (llama.cpp's `NAME-0000k-of-0000N.gguf`, `split.count` N) loads from its first
//! part as the whole file does, each tensor read from its own part; the manifest covers every
//! part; a later part opened alone, or a missing part, is refused naming it.

#![allow(clippy::unwrap_used)]

#[path = "../../poot-models/tests/common/tiny_gguf.rs"]
mod tiny_gguf;

mod common;

use common::TempDir;
use poot_load::{LoadError, LoadOptions, Manifest};
use tiny_gguf::{Meta, TinyGguf};

/// The tiny Llama whole, and split in two after its first `cut` tensors.
fn whole_and_parts(cut: usize) -> (TinyGguf, TinyGguf, TinyGguf) {
    let whole = TinyGguf::llama();
    let mut first = whole.clone();
    first.tensors.truncate(cut);
    first.set("split.no", Meta::U32(0));
    first.set("split.count", Meta::U32(2));
    first.set("split.tensors.count", Meta::I32(whole.tensors.len() as i32));
    let mut second = TinyGguf::default();
    second.set("split.no", Meta::U32(1));
    second.set("split.count", Meta::U32(2));
    second.set("split.tensors.count", Meta::I32(whole.tensors.len() as i32));
    second.tensors = whole.tensors[cut..].to_vec();
    (whole, first, second)
}

#[test]
fn a_split_gguf_loads_as_the_whole_file_does() {
    let dir = TempDir::new("split-gguf");
    let (whole, first, second) = whole_and_parts(5);
    std::fs::write(dir.join("tiny.gguf"), whole.bytes()).unwrap();
    let p1 = dir.join("tiny-00001-of-00002.gguf");
    let p2 = dir.join("tiny-00002-of-00002.gguf");
    std::fs::write(&p1, first.bytes()).unwrap();
    std::fs::write(&p2, second.bytes()).unwrap();

    let split = poot_load::load(&p1, &LoadOptions::default()).unwrap();
    let one = poot_load::load(&dir.join("tiny.gguf"), &LoadOptions::default()).unwrap();
    assert_eq!(split.store().len(), one.store().len());
    for t in one.store().iter() {
        let s = split.store().get(t.name()).unwrap();
        assert_eq!(s.shape(), t.shape(), "{}", t.name());
        assert_eq!(s.bytes(), t.bytes(), "{}", t.name());
    }
    let last = &whole.tensors.last().unwrap().0;
    assert_eq!(
        split.store().get(last).unwrap().file(),
        "tiny-00002-of-00002.gguf"
    );
    assert_eq!(
        split.config().as_gguf().unwrap().architecture().unwrap(),
        "llama"
    );

    // The manifest covers both parts; a wrong digest for the second fails the load naming it.
    let recorded = Manifest::record(&p1).unwrap();
    assert_eq!(recorded.len(), 2);
    let options = LoadOptions {
        integrity: Some(recorded.clone()),
    };
    poot_load::load(&p1, &options).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&recorded.to_json()).unwrap();
    json["files"]["tiny-00002-of-00002.gguf"]["sha256"] = "0".repeat(64).into();
    let tampered = LoadOptions {
        integrity: Some(Manifest::from_json(json.to_string().as_bytes()).unwrap()),
    };
    let err = poot_load::load(&p1, &tampered).unwrap_err();
    assert!(
        err.to_string().contains("tiny-00002-of-00002.gguf"),
        "{err}"
    );

    // The second part alone is refused, pointing at the first.
    match poot_load::load(&p2, &LoadOptions::default()) {
        Err(e @ LoadError::SplitGguf { .. }) => {
            assert!(e.to_string().contains("tiny-00001-of-00002.gguf"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // A missing part is an error naming it.
    std::fs::remove_file(&p2).unwrap();
    let err = poot_load::load(&p1, &LoadOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("tiny-00002-of-00002.gguf"),
        "{err}"
    );
    // A split file renamed out of the pattern cannot find its parts.
    let renamed = dir.join("renamed.gguf");
    std::fs::rename(&p1, &renamed).unwrap();
    assert!(matches!(
        poot_load::load(&renamed, &LoadOptions::default()),
        Err(LoadError::SplitGguf { .. })
    ));
}
