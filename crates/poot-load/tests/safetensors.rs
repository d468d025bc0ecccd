//! safetensors files written by the safetensors package over torch
//! (scripts/ref/make_load_fixtures.py), read by our parser and compared with what the package
//! reads back.
// Helpers unwrap too: a failure there is the test failing (clippy.toml's
// allow-unwrap-in-tests covers only #[test] bodies).
#![allow(clippy::unwrap_used)]

mod common;

use common::{TempDir, read_json, sha256_hex, synthetic};
use poot_formats::{DenseType, StoredType};
use poot_load::safetensors::{SafetensorsError, SafetensorsHeader, ShardIndexError};
use poot_load::{ConfigSource, LoadError, LoadOptions, QuantError, load};

#[test]
fn every_dtype_matches_the_safetensors_package() {
    let exp = read_json(&synthetic("all_dtypes.json"));
    let bytes = std::fs::read(synthetic("all_dtypes.safetensors")).unwrap();
    let header = SafetensorsHeader::parse(&bytes).unwrap();
    let meta = exp["metadata"].as_object().unwrap();
    assert_eq!(header.metadata.len(), meta.len());
    for (k, v) in meta {
        assert_eq!(header.metadata.get(k).map(String::as_str), v.as_str());
    }
    let want = exp["tensors"].as_array().unwrap();
    assert_eq!(header.tensors.len(), want.len());
    // Every dtype poot stores is in the file once.
    let mut dtypes: Vec<&str> = header.tensors.iter().map(|t| t.dtype.name()).collect();
    dtypes.sort_unstable();
    let mut all: Vec<&str> = DenseType::ALL.iter().map(|d| d.name()).collect();
    all.sort_unstable();
    assert_eq!(dtypes, all);

    for w in want {
        let name = w["name"].as_str().unwrap();
        let info = header.tensors.iter().find(|t| t.name == name).unwrap();
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(info.shape, shape, "{name}");
        assert_eq!(info.dtype.name(), w["type"].as_str().unwrap(), "{name}");
        let range = info.file_range.start as usize..info.file_range.end as usize;
        assert_eq!(
            sha256_hex(&bytes[range]),
            w["sha256"].as_str().unwrap(),
            "{name}"
        );
    }

    // As a checkpoint, the FP8 tensors (no `.weight` with a scale sibling) refuse the load:
    // they are never handed out as unscaled dense weights.
    let dir = TempDir::new("all-dtypes");
    std::fs::copy(
        synthetic("all_dtypes.safetensors"),
        dir.join("model.safetensors"),
    )
    .unwrap();
    std::fs::write(dir.join("config.json"), br#"{"model_type": "test"}"#).unwrap();
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::Quant(QuantError::Fp8WithoutScale { tensor }) if tensor == "f8_e4m3.tensor"),
        "{err:?}"
    );
}

#[test]
fn dense_tensors_load_as_stored_words() {
    let exp = read_json(&synthetic("sharded.json"));
    let ck = load(&synthetic("sharded"), &LoadOptions::default()).unwrap();
    for w in exp["tensors"].as_array().unwrap() {
        let t = ck.store().tensor(w["name"].as_str().unwrap()).unwrap();
        let StoredType::Dense(d) = t.stored_type() else {
            panic!("safetensors are dense")
        };
        // BF16/F16 stay 16-bit words: no widened copy.
        assert_eq!(t.size_bytes(), t.n_elems() * d.size_bytes() as u64);
    }
    assert_eq!(
        ck.store()
            .tensor("model.embed.weight")
            .unwrap()
            .stored_type(),
        StoredType::Dense(DenseType::BF16)
    );
    let ConfigSource::HuggingFace(config) = ck.config() else {
        panic!("a directory's config is config.json")
    };
    assert_eq!(config["model_type"], "llama");
    assert!(ck.quantization().is_none());
}

#[test]
fn an_unknown_dtype_is_refused_by_name() {
    let bytes = std::fs::read(synthetic("unknown_dtype_c64.safetensors")).unwrap();
    match SafetensorsHeader::parse(&bytes) {
        Err(SafetensorsError::UnknownDtype { tensor, dtype }) => {
            assert_eq!(tensor, "z.c64");
            assert_eq!(dtype, "C64");
        }
        other => panic!("expected an unknown dtype, got {other:?}"),
    }
}

#[test]
fn a_sharded_checkpoint_loads_every_shard() {
    let exp = read_json(&synthetic("sharded.json"));
    let ck = load(&synthetic("sharded"), &LoadOptions::default()).unwrap();
    let want = exp["tensors"].as_array().unwrap();
    let names: Vec<&str> = ck.store().names().collect();
    let want_names: Vec<&str> = want.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, want_names);
    for w in want {
        let t = ck.store().tensor(w["name"].as_str().unwrap()).unwrap();
        assert_eq!(t.file(), w["file"].as_str().unwrap());
        assert_eq!(t.stored_type().name(), w["type"].as_str().unwrap());
        assert_eq!(sha256_hex(t.bytes()), w["sha256"].as_str().unwrap());
    }
    let files: Vec<&str> = ck.store().files().collect();
    assert_eq!(
        files,
        [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors"
        ]
    );
    // Side files are read once and handed out as bytes.
    let tokenizer = ck.read_side_file("tokenizer.json").unwrap();
    assert_eq!(
        tokenizer,
        std::fs::read(synthetic("sharded/tokenizer.json"))
            .unwrap()
            .as_slice()
    );
    let names: Vec<&str> = ck.side_files().names().collect();
    assert_eq!(
        names,
        [
            "config.json",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    assert!(ck.read_side_file("vocab.txt").is_none());
}

/// A copy of the sharded fixture with its index replaced.
fn sharded_with_index(index: &str) -> TempDir {
    let dir = TempDir::new("shards");
    dir.copy_dir(&synthetic("sharded"));
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    dir
}

#[test]
fn shard_index_inconsistencies_are_typed() {
    let s1 = "model-00001-of-00002.safetensors";
    let s2 = "model-00002-of-00002.safetensors";
    // A tensor the index puts in the other shard.
    let dir = sharded_with_index(&format!(
        r#"{{"weight_map": {{"model.embed.weight": "{s2}", "model.layers.0.w.weight": "{s1}",
            "model.layers.1.w.weight": "{s2}", "lm_head.weight": "{s2}"}}}}"#
    ));
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::ShardTensorMismatch { tensor, shard, indexed_shard: Some(i) }
            if tensor == "model.embed.weight" && shard == s1 && i == s2),
        "{err:?}"
    );
    // A tensor the index lists but no shard holds.
    let dir = sharded_with_index(&format!(
        r#"{{"weight_map": {{"model.embed.weight": "{s1}", "model.layers.0.w.weight": "{s1}",
            "model.layers.1.w.weight": "{s2}", "lm_head.weight": "{s2}", "ghost.weight": "{s2}"}}}}"#
    ));
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::IndexedTensorMissing { tensor, .. } if tensor == "ghost.weight"),
        "{err:?}"
    );
    // A tensor a shard holds that the index omits.
    let dir = sharded_with_index(&format!(
        r#"{{"weight_map": {{"model.embed.weight": "{s1}", "model.layers.0.w.weight": "{s1}",
            "model.layers.1.w.weight": "{s2}"}}}}"#
    ));
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::ShardTensorMismatch { tensor, indexed_shard: None, .. } if tensor == "lm_head.weight"),
        "{err:?}"
    );
    // A shard path that leaves the directory.
    let dir = sharded_with_index(r#"{"weight_map": {"a": "../model.safetensors"}}"#);
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::ShardIndex { source: ShardIndexError::ShardName { shard, .. }, .. } if shard == "../model.safetensors"),
        "{err:?}"
    );
    // A repeated tensor, a missing weight map, a non-string entry, and not JSON.
    for (index, check) in [
        (
            r#"{"weight_map": {"a": "x.safetensors", "a": "y.safetensors"}}"#,
            "repeat",
        ),
        (r#"{"metadata": {}}"#, "no map"),
        (r#"{"weight_map": {"a": 3}}"#, "not a string"),
        ("{", "not json"),
    ] {
        let dir = sharded_with_index(index);
        let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
        let LoadError::ShardIndex { source, .. } = &err else {
            panic!("{check}: {err:?}")
        };
        let ok = match check {
            "repeat" => {
                matches!(source, ShardIndexError::DuplicateTensor { tensor } if tensor == "a")
            }
            "no map" => matches!(source, ShardIndexError::NoWeightMap),
            "not a string" => matches!(source, ShardIndexError::EntryNotString { .. }),
            _ => matches!(source, ShardIndexError::Json { .. }),
        };
        assert!(ok, "{check}: {source:?}");
    }
    // A shard the index names that is missing.
    let dir = sharded_with_index(r#"{"weight_map": {"a": "model-00003-of-00003.safetensors"}}"#);
    let err = load(dir.path(), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::Io { path, .. } if path.ends_with("model-00003-of-00003.safetensors")),
        "{err:?}"
    );
}

#[test]
fn a_directory_without_weights_or_config_is_typed() {
    let dir = TempDir::new("empty");
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::MissingConfig { .. })
    ));
    std::fs::write(dir.join("config.json"), "{}").unwrap();
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::NoWeights { .. })
    ));
    std::fs::write(dir.join("config.json"), "[1, 2]").unwrap();
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::ConfigNotObject { .. })
    ));
    std::fs::write(dir.join("config.json"), "{oops").unwrap();
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::ConfigJson { .. })
    ));
    assert!(matches!(
        load(&dir.join("nothing-here"), &LoadOptions::default()),
        Err(LoadError::Io { .. })
    ));
}
