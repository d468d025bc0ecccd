//! Whole-checkpoint behaviour: real checkpoints against gguf-py and the safetensors package,
//! integrity manifests, config peeking, and Hugging Face quantized linears.
// Helpers unwrap too: a failure there is the test failing (clippy.toml's
// allow-unwrap-in-tests covers only #[test] bodies).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;

use common::{
    TempDir, check_metadata, ends_sha256, fixtures, read_json, real_model, synthetic,
    write_safetensors,
};
use poot_formats::{DenseType, StoredType};
use poot_load::gguf::GgufFile;
use poot_load::{
    ConfigSource, Fp8ScaleLayout, Fp8ScaleName, IntegrityError, LinearWeight, LoadError,
    LoadOptions, Manifest, ManifestEntry, QuantComponents, QuantError, QuantMethod, load,
    peek_config,
};
use serde_json::Value;

fn shape_of(w: &Value) -> Vec<u64> {
    w["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect()
}

// ---- Real checkpoints -------------------------------------------------------------------

fn check_real_gguf(model_file: &str, fixture: &str) {
    let Some(path) = real_model(model_file) else {
        return;
    };
    let exp = read_json(&fixtures().join("real").join(fixture));
    let header = GgufFile::open(&path).unwrap();
    assert_eq!(header.version() as u64, exp["version"].as_u64().unwrap());
    assert_eq!(header.alignment_bytes(), exp["alignment"].as_u64().unwrap());
    assert_eq!(
        header.data_offset_bytes(),
        exp["data_offset"].as_u64().unwrap()
    );
    assert_eq!(header.file_len_bytes(), exp["file_len"].as_u64().unwrap());
    check_metadata(header.metadata(), &exp["metadata"], true);

    // The facts a family and a tokenizer read first.
    let meta = header.metadata();
    let find = |key: &str| {
        exp["metadata"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["key"] == key)
            .unwrap()
            .clone()
    };
    let arch = meta.architecture().unwrap();
    assert_eq!(arch, find("general.architecture")["value"]);
    let context = meta.get_u32(&format!("{arch}.context_length")).unwrap();
    assert_eq!(
        u64::from(context),
        find(&format!("{arch}.context_length"))["value"]
            .as_u64()
            .unwrap()
    );
    let blocks = meta.get_u32(&format!("{arch}.block_count")).unwrap();
    assert_eq!(
        u64::from(blocks),
        find(&format!("{arch}.block_count"))["value"]
            .as_u64()
            .unwrap()
    );
    let tokens = meta.get_string_array("tokenizer.ggml.tokens").unwrap();
    let want_tokens = find("tokenizer.ggml.tokens");
    assert_eq!(tokens.len() as u64, want_tokens["len"].as_u64().unwrap());
    for (t, w) in tokens.iter().zip(want_tokens["head"].as_array().unwrap()) {
        assert_eq!(t, w.as_str().unwrap());
    }
    assert_eq!(
        meta.get_i32_array("tokenizer.ggml.token_type")
            .unwrap()
            .len(),
        tokens.len()
    );

    let want = exp["tensors"].as_array().unwrap();
    assert_eq!(header.tensors().len(), want.len());
    for (t, w) in header.tensors().iter().zip(want) {
        assert_eq!(t.name, w["name"].as_str().unwrap());
        assert_eq!(t.shape, shape_of(w), "{}", t.name);
        assert_eq!(
            t.ggml_type.name(),
            w["type"].as_str().unwrap(),
            "{}",
            t.name
        );
        assert_eq!(
            t.file_range.start,
            w["file_offset"].as_u64().unwrap(),
            "{}",
            t.name
        );
    }

    let ck = load(&path, &LoadOptions::default()).unwrap();
    assert_eq!(ck.store().len(), want.len());
    let mut total = 0;
    for w in want {
        let t = ck.store().tensor(w["name"].as_str().unwrap()).unwrap();
        assert_eq!(t.shape(), shape_of(w).as_slice(), "{}", t.name());
        assert_eq!(
            t.stored_type().name(),
            w["type"].as_str().unwrap(),
            "{}",
            t.name()
        );
        assert_eq!(
            t.size_bytes(),
            w["n_bytes"].as_u64().unwrap(),
            "{}",
            t.name()
        );
        assert_eq!(
            ends_sha256(t.bytes()),
            w["ends_sha256"].as_str().unwrap(),
            "{}",
            t.name()
        );
        total += t.size_bytes();
    }
    assert_eq!(ck.store().total_bytes(), total);
    let ConfigSource::Gguf(loaded_meta) = ck.config() else {
        panic!("GGUF config")
    };
    assert_eq!(loaded_meta, header.metadata());
    assert_eq!(
        peek_config(&path).unwrap(),
        ConfigSource::Gguf(header.metadata().clone())
    );
}

#[test]
fn smollm2_q4_1_gguf_matches_gguf_py() {
    check_real_gguf(
        "smollm2-135m-instruct-q4_1.gguf",
        "smollm2-135m-instruct-q4_1.json",
    );
}

#[test]
fn gemma3_q4_k_m_gguf_matches_gguf_py() {
    check_real_gguf("gemma3-270m-q4_k_m.gguf", "gemma3-270m-q4_k_m.json");
}

#[test]
fn minilm_safetensors_matches_the_safetensors_package() {
    let Some(dir) = real_model("all-minilm-l6-v2") else {
        return;
    };
    let exp = read_json(&fixtures().join("real/all-minilm-l6-v2.json"));
    let ck = load(&dir, &LoadOptions::default()).unwrap();
    let want = exp["tensors"].as_array().unwrap();
    let names: Vec<&str> = ck.store().names().collect();
    let want_names: Vec<&str> = want.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(names, want_names);
    for w in want {
        let t = ck.store().tensor(w["name"].as_str().unwrap()).unwrap();
        assert_eq!(t.shape(), shape_of(w).as_slice(), "{}", t.name());
        assert_eq!(
            t.stored_type().name(),
            w["type"].as_str().unwrap(),
            "{}",
            t.name()
        );
        assert_eq!(
            t.size_bytes(),
            w["n_bytes"].as_u64().unwrap(),
            "{}",
            t.name()
        );
        assert_eq!(
            ends_sha256(t.bytes()),
            w["ends_sha256"].as_str().unwrap(),
            "{}",
            t.name()
        );
    }
    let ConfigSource::HuggingFace(config) = ck.config() else {
        panic!("HF config")
    };
    for (k, v) in exp["config"].as_object().unwrap() {
        assert_eq!(&config[k], v, "{k}");
    }
    assert_eq!(peek_config(&dir).unwrap(), ck.config().clone());
    // The sentence-transformers and tokenizer side files were read and verified.
    for name in [
        "tokenizer.json",
        "vocab.txt",
        "modules.json",
        "1_Pooling/config.json",
    ] {
        let bytes = ck
            .read_side_file(name)
            .unwrap_or_else(|| panic!("{name} not read"));
        assert_eq!(
            bytes,
            std::fs::read(dir.join(name)).unwrap().as_slice(),
            "{name}"
        );
    }
    assert!(ck.read_side_file("README.md").is_none());
}

// ---- Integrity --------------------------------------------------------------------------

fn sharded_copy() -> TempDir {
    let dir = TempDir::new("integrity");
    dir.copy_dir(&synthetic("sharded"));
    dir
}

fn with(manifest: &Manifest) -> LoadOptions {
    LoadOptions {
        integrity: Some(manifest.clone()),
    }
}

fn integrity_err(path: &Path, manifest: &Manifest) -> IntegrityError {
    match load(path, &with(manifest)) {
        Err(LoadError::Integrity(e)) => e,
        other => panic!("expected an integrity error, got {other:?}"),
    }
}

#[test]
fn a_recorded_manifest_round_trips_and_verifies() {
    let dir = sharded_copy();
    let manifest = Manifest::record(dir.path()).unwrap();
    let names: Vec<&str> = manifest.iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    let tokenizer = std::fs::read(dir.join("tokenizer.json")).unwrap();
    assert_eq!(
        manifest.get("tokenizer.json"),
        Some(&ManifestEntry::of_bytes(&tokenizer))
    );
    let json = manifest.to_json();
    assert_eq!(Manifest::from_json(json.as_bytes()).unwrap(), manifest);
    let ck = load(dir.path(), &with(&manifest)).unwrap();
    assert_eq!(
        ck.read_side_file("tokenizer.json").unwrap(),
        tokenizer.as_slice()
    );
    assert_eq!(ck.store().len(), 4);
}

#[test]
fn a_modified_tokenizer_fails_the_load() {
    let dir = sharded_copy();
    let manifest = Manifest::record(dir.path()).unwrap();
    let mut tokenizer = std::fs::read(dir.join("tokenizer.json")).unwrap();
    tokenizer[3] ^= 1; // same length, different bytes
    std::fs::write(dir.join("tokenizer.json"), &tokenizer).unwrap();
    let err = integrity_err(dir.path(), &manifest);
    assert!(
        matches!(&err, IntegrityError::DigestMismatch { file, .. } if file == "tokenizer.json"),
        "{err:?}"
    );
}

#[test]
fn weight_files_are_checked_before_any_tensor_is_read() {
    let dir = sharded_copy();
    let manifest = Manifest::record(dir.path()).unwrap();
    let shard = dir.join("model-00002-of-00002.safetensors");
    let original = std::fs::read(&shard).unwrap();
    // Break the shard's header but keep its length: the load fails on the digest, not on the
    // header, so the digest was checked first.
    let mut broken = original.clone();
    broken[8] = b'!';
    std::fs::write(&shard, &broken).unwrap();
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::Safetensors { .. })
    ));
    let err = integrity_err(dir.path(), &manifest);
    assert!(
        matches!(&err, IntegrityError::DigestMismatch { file, .. } if file == "model-00002-of-00002.safetensors"),
        "{err:?}"
    );
    // A longer file fails on its length.
    let mut longer = original.clone();
    longer.push(0);
    std::fs::write(&shard, &longer).unwrap();
    let err = integrity_err(dir.path(), &manifest);
    assert!(
        matches!(&err, IntegrityError::LengthMismatch { expected_bytes, actual_bytes, .. }
            if *actual_bytes == *expected_bytes + 1),
        "{err:?}"
    );
}

#[test]
fn an_unlisted_file_is_refused() {
    let dir = sharded_copy();
    let full = Manifest::record(dir.path()).unwrap();
    for omitted in [
        "tokenizer_config.json",
        "model-00001-of-00002.safetensors",
        "model.safetensors.index.json",
    ] {
        let mut partial = Manifest::new();
        for (name, entry) in full.iter().filter(|(n, _)| *n != omitted) {
            partial.insert(name, *entry);
        }
        let err = integrity_err(dir.path(), &partial);
        assert!(
            matches!(&err, IntegrityError::Unlisted { file } if file == omitted),
            "{omitted}: {err:?}"
        );
        assert!(LoadError::from(err).to_string().contains(omitted));
    }
    // A side file added after the manifest was recorded is read, so it must be listed.
    std::fs::write(dir.join("generation_config.json"), "{}").unwrap();
    let err = integrity_err(dir.path(), &full);
    assert!(matches!(&err, IntegrityError::Unlisted { file } if file == "generation_config.json"));
    // A file the load never reads need not be listed.
    std::fs::remove_file(dir.join("generation_config.json")).unwrap();
    std::fs::write(dir.join("README.md"), "hello").unwrap();
    load(dir.path(), &with(&full)).unwrap();
}

#[test]
fn a_gguf_is_verified_under_its_file_name() {
    let path = synthetic("aligned256.gguf");
    let manifest = Manifest::record(&path).unwrap();
    assert_eq!(
        manifest.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        ["aligned256.gguf"]
    );
    load(&path, &with(&manifest)).unwrap();
    let mut wrong = Manifest::new();
    let entry = manifest.get("aligned256.gguf").unwrap();
    wrong.insert(
        "aligned256.gguf",
        ManifestEntry {
            sha256: [0; 32],
            ..*entry
        },
    );
    assert!(matches!(
        integrity_err(&path, &wrong),
        IntegrityError::DigestMismatch { .. }
    ));
    let mut other = Manifest::new();
    other.insert("model.gguf", *entry);
    assert!(
        matches!(integrity_err(&path, &other), IntegrityError::Unlisted { file } if file == "aligned256.gguf")
    );
}

#[test]
fn malformed_manifests_are_typed() {
    let digest = "ab".repeat(32);
    let ok = format!(
        r#"{{"poot_manifest": 1, "files": {{"a": {{"length_bytes": 3, "sha256": "{digest}"}}}}}}"#
    );
    let m = Manifest::from_json(ok.as_bytes()).unwrap();
    assert_eq!(m.get("a").unwrap().length_bytes, 3);
    let cases: Vec<(String, &str)> = vec![
        ("{".into(), "json"),
        (r#"{"files": {}}"#.into(), "json"),
        (r#"{"poot_manifest": 2, "files": {}}"#.into(), "version"),
        (
            r#"{"poot_manifest": 1, "files": {}, "extra": 1}"#.into(),
            "json",
        ),
        (
            format!(
                r#"{{"poot_manifest": 1, "files": {{"a": {{"length_bytes": 3, "sha256": "{digest}"}}, "a": {{"length_bytes": 3, "sha256": "{digest}"}}}}}}"#
            ),
            "repeat",
        ),
        (
            r#"{"poot_manifest": 1, "files": {"a": {"length_bytes": 3}}}"#.into(),
            "entry",
        ),
        (
            format!(
                r#"{{"poot_manifest": 1, "files": {{"a": {{"length_bytes": 3, "sha256": "{digest}", "x": 1}}}}}}"#
            ),
            "entry",
        ),
        (
            r#"{"poot_manifest": 1, "files": {"a": {"length_bytes": 3, "sha256": "abc"}}}"#.into(),
            "digest",
        ),
        (
            format!(
                r#"{{"poot_manifest": 1, "files": {{"a": {{"length_bytes": 3, "sha256": "{}"}}}}}}"#,
                "AB".repeat(32)
            ),
            "digest",
        ),
    ];
    for (json, kind) in cases {
        let err = Manifest::from_json(json.as_bytes()).unwrap_err();
        let LoadError::Integrity(e) = &err else {
            panic!("{json}: {err:?}")
        };
        let ok = match kind {
            "json" => matches!(e, IntegrityError::ManifestJson { .. }),
            "version" => matches!(
                e,
                IntegrityError::ManifestVersion {
                    found: 2,
                    supported: 1
                }
            ),
            "repeat" => matches!(e, IntegrityError::ManifestRepeatedFile { file } if file == "a"),
            "entry" => matches!(e, IntegrityError::ManifestEntry { file, .. } if file == "a"),
            _ => matches!(e, IntegrityError::ManifestDigest { file, .. } if file == "a"),
        };
        assert!(ok, "{kind}: {json}: {e:?}");
    }
}

// ---- Peeking at the config ----------------------------------------------------------------

#[test]
fn peek_reads_only_the_config() {
    let dir = TempDir::new("peek");
    std::fs::write(
        dir.join("config.json"),
        br#"{"model_type": "llama", "num_hidden_layers": 2}"#,
    )
    .unwrap();
    // No weight file at all: peek works, load does not.
    let ConfigSource::HuggingFace(config) = peek_config(dir.path()).unwrap() else {
        panic!()
    };
    assert_eq!(config["num_hidden_layers"], 2);
    assert!(matches!(
        load(dir.path(), &LoadOptions::default()),
        Err(LoadError::NoWeights { .. })
    ));
    // A weight file that cannot be opened (a dangling link) or parsed: peek never touches it.
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.join("missing-target"), dir.join("model.safetensors"))
            .unwrap();
        peek_config(dir.path()).unwrap();
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    }
    std::fs::write(dir.join("model.safetensors"), b"not a safetensors file").unwrap();
    std::fs::write(dir.join("model.safetensors.index.json"), b"not json").unwrap();
    assert_eq!(
        peek_config(dir.path()).unwrap(),
        ConfigSource::HuggingFace(config)
    );
    assert!(load(dir.path(), &LoadOptions::default()).is_err());
    // A directory without config.json.
    std::fs::remove_file(dir.join("config.json")).unwrap();
    assert!(matches!(
        peek_config(dir.path()),
        Err(LoadError::MissingConfig { .. })
    ));
    // A GGUF's config is its metadata, read from the header alone.
    let ConfigSource::Gguf(meta) = peek_config(&synthetic("all_types.gguf")).unwrap() else {
        panic!()
    };
    assert_eq!(meta.architecture().unwrap(), "poot-test");
}

// ---- Hugging Face quantized linears -------------------------------------------------------

fn quantized(fixture: &str) -> poot_load::Checkpoint {
    load(&synthetic(fixture), &LoadOptions::default()).unwrap()
}

#[test]
fn gptq_components_as_stored() {
    let ck = quantized("gptq");
    let q = ck.quantization().unwrap();
    assert_eq!(
        (q.method, q.bits, q.group_size, q.act_order, q.sym),
        (QuantMethod::Gptq, 4, Some(16), true, Some(true))
    );
    let LinearWeight::Quantized(l) = ck.linear("layer.q_proj").unwrap() else {
        panic!("GPTQ linear")
    };
    assert_eq!((l.in_features, l.out_features, l.act_order), (64, 32, true));
    let QuantComponents::Gptq {
        qweight,
        qzeros,
        scales,
        g_idx,
    } = &l.components
    else {
        panic!()
    };
    assert_eq!(qweight.shape(), [8, 32]);
    assert_eq!(qzeros.shape(), [4, 4]);
    assert_eq!(scales.stored_type(), StoredType::Dense(DenseType::F16));
    assert_eq!(g_idx.as_ref().unwrap().shape(), [64]);
    assert_eq!(
        qweight.bytes(),
        ck.store().tensor("layer.q_proj.qweight").unwrap().bytes()
    );
    // An unquantized module is dense as stored.
    let LinearWeight::Dense(head) = ck.linear("lm_head").unwrap() else {
        panic!("dense lm_head")
    };
    assert_eq!(head.stored_type(), StoredType::Dense(DenseType::BF16));
    assert!(
        matches!(ck.linear("nope"), Err(LoadError::TensorNotFound { tensor }) if tensor == "nope.weight")
    );
}

#[test]
fn awq_components_as_stored() {
    let ck = quantized("awq");
    let LinearWeight::Quantized(l) = ck.linear("layer.q_proj").unwrap() else {
        panic!("AWQ linear")
    };
    assert_eq!(
        (l.method, l.bits, l.group_size),
        (QuantMethod::Awq, 4, Some(16))
    );
    assert_eq!((l.in_features, l.out_features), (64, 32));
    assert!(matches!(l.components, QuantComponents::Awq { .. }));
}

#[test]
fn fp8_weights_come_with_their_scales() {
    let ck = quantized("fp8_block");
    let LinearWeight::Quantized(l) = ck.linear("layer.q_proj").unwrap() else {
        panic!("FP8 linear")
    };
    let QuantComponents::Fp8 {
        weight,
        scale,
        scale_name,
        scale_layout,
    } = &l.components
    else {
        panic!()
    };
    assert_eq!(weight.stored_type(), StoredType::Dense(DenseType::F8E4M3));
    assert_eq!(scale.shape(), [2, 4]);
    assert_eq!(*scale_name, Fp8ScaleName::WeightScaleInv);
    assert_eq!(*scale_layout, Fp8ScaleLayout::Block { rows: 16, cols: 16 });

    let ck = quantized("fp8_channel");
    let q = ck.quantization().unwrap();
    assert_eq!(
        (q.method, q.method_name.as_str()),
        (QuantMethod::Fp8, "compressed-tensors")
    );
    assert_eq!(q.modules_not_quantized, ["lm_head"]);
    let LinearWeight::Quantized(l) = ck.linear("layer.q_proj").unwrap() else {
        panic!("FP8 linear")
    };
    let QuantComponents::Fp8 {
        scale_name,
        scale_layout,
        ..
    } = &l.components
    else {
        panic!()
    };
    assert_eq!(
        (*scale_name, *scale_layout),
        (Fp8ScaleName::WeightScale, Fp8ScaleLayout::PerChannel)
    );
    assert!(matches!(
        ck.linear("lm_head").unwrap(),
        LinearWeight::Dense(_)
    ));
}

#[test]
fn an_fp8_weight_without_a_scale_is_a_layout_error() {
    let err = load(&synthetic("fp8_noscale"), &LoadOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LoadError::Quant(QuantError::Fp8WithoutScale { tensor }) if tensor == "layer.q_proj.weight"),
        "{err:?}"
    );
}

/// A copy of a quantized fixture with its config.json replaced.
fn with_config(fixture: &str, config: &str) -> TempDir {
    let dir = TempDir::new("quant");
    dir.copy_dir(&synthetic(fixture));
    std::fs::write(dir.join("config.json"), config).unwrap();
    dir
}

fn quant_err(dir: &TempDir) -> QuantError {
    match load(dir.path(), &LoadOptions::default()) {
        Err(LoadError::Quant(e)) => e,
        other => panic!("expected a quantization error, got {other:?}"),
    }
}

#[test]
fn quantization_configs_poot_cannot_read_are_refused() {
    let cases = [
        (
            "gptq",
            r#"{"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": true}}"#,
            "method",
        ),
        (
            "gptq",
            r#"{"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": 16}}"#,
            "bits",
        ),
        (
            "gptq",
            r#"{"quantization_config": {"quant_method": "gptq", "group_size": 16}}"#,
            "field",
        ),
        (
            "gptq",
            r#"{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 16, "checkpoint_format": "gptq_v2"}}"#,
            "variant",
        ),
        (
            "awq",
            r#"{"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 16, "version": "gemv"}}"#,
            "variant",
        ),
        (
            "fp8_block",
            r#"{"quantization_config": {"quant_method": "fp8", "fmt": "e5m2"}}"#,
            "variant",
        ),
        (
            "fp8_channel",
            r#"{"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}}"#,
            "variant",
        ),
        (
            "gptq",
            r#"{"quantization_config": {"quant_method": 4}}"#,
            "field",
        ),
    ];
    for (fixture, config, kind) in cases {
        let err = quant_err(&with_config(fixture, config));
        let ok = match kind {
            "method" => {
                matches!(&err, QuantError::UnsupportedMethod { method } if method == "bitsandbytes")
            }
            "bits" => matches!(err, QuantError::UnsupportedBits { bits: 8, .. }),
            "variant" => matches!(err, QuantError::UnsupportedVariant { .. }),
            _ => matches!(err, QuantError::ConfigField { .. }),
        };
        assert!(ok, "{config}: {err:?}");
    }
}

#[test]
fn quantized_layouts_that_disagree_are_typed() {
    // Packed components without a GPTQ/AWQ config.
    let err = quant_err(&with_config("gptq", r#"{"model_type": "llama"}"#));
    assert!(
        matches!(&err, QuantError::ComponentsWithoutConfig { prefix } if prefix == "layer.q_proj"),
        "{err:?}"
    );
    // A group size the scales do not have.
    let err = quant_err(&with_config(
        "gptq",
        r#"{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": true}}"#,
    ));
    assert!(
        matches!(&err, QuantError::ComponentShape { tensor, expected, found }
            if tensor == "layer.q_proj.scales" && expected == &[2, 32] && found == &[4, 32]),
        "{err:?}"
    );
    // A block size the FP8 scale does not fit.
    let err = quant_err(&with_config(
        "fp8_block",
        r#"{"quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 32]}}"#,
    ));
    assert!(matches!(err, QuantError::Fp8ScaleShape { .. }), "{err:?}");
    // The AutoGPTQ quantize_config.json is read when config.json has no quantization_config.
    let dir = with_config("gptq", r#"{"model_type": "llama"}"#);
    std::fs::write(
        dir.join("quantize_config.json"),
        r#"{"bits": 4, "group_size": 16, "desc_act": true}"#,
    )
    .unwrap();
    let ck = load(dir.path(), &LoadOptions::default()).unwrap();
    assert_eq!(ck.quantization().unwrap().method, QuantMethod::Gptq);

    // Crafted layouts: act-order without g_idx, a wrong component dtype, an E5M2 weight.
    let i32s = |n: usize| vec![0u8; 4 * n];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            write_safetensors(&[
                ("l.qweight", "I32", &[8, 32], &i32s(256)),
                ("l.qzeros", "I32", &[4, 4], &i32s(16)),
                ("l.scales", "F16", &[4, 32], &[0u8; 256]),
            ]),
            "g_idx",
        ),
        (
            write_safetensors(&[
                ("l.g_idx", "I32", &[64], &i32s(64)),
                ("l.qweight", "I32", &[8, 32], &i32s(256)),
                ("l.qzeros", "I32", &[4, 4], &i32s(16)),
                ("l.scales", "I8", &[4, 32], &[0u8; 128]),
            ]),
            "type",
        ),
        (
            write_safetensors(&[
                ("l.weight", "F8_E5M2", &[4, 4], &[0u8; 16]),
                ("l.weight_scale", "F32", &[], &[0u8; 4]),
            ]),
            "type",
        ),
    ];
    let gptq = r#"{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": true}}"#;
    for (file, kind) in cases {
        let dir = TempDir::new("crafted-quant");
        std::fs::write(dir.join("config.json"), gptq).unwrap();
        std::fs::write(dir.join("model.safetensors"), file).unwrap();
        let err = quant_err(&dir);
        let ok = match kind {
            "g_idx" => matches!(
                err,
                QuantError::MissingComponent {
                    component: "g_idx",
                    ..
                }
            ),
            _ => matches!(err, QuantError::ComponentType { .. }),
        };
        assert!(ok, "{kind}: {err:?}");
    }
}

// ---- Quantized linears as component formats ---------------------------------------------

/// The linear at `prefix` as a component format, its components checked to be the format's
/// (required ones, and `g_idx` when it is read) in the format's order.
fn packed<'c>(
    ck: &'c poot_load::Checkpoint,
    prefix: &str,
) -> Result<poot_load::PackedLinear<'c>, QuantError> {
    let LinearWeight::Quantized(l) = ck.linear(prefix).unwrap() else {
        panic!("{prefix} is quantized")
    };
    let p = l.packed()?;
    let want: Vec<&str> = p
        .format
        .components(p.shape)
        .unwrap()
        .iter()
        .filter(|c| {
            c.presence == poot_formats::Presence::Required
                || p.components.iter().any(|(r, _)| *r == c.name)
        })
        .map(|c| c.name)
        .collect();
    let got: Vec<&str> = p.components.iter().map(|(r, _)| *r).collect();
    assert_eq!(got, want, "{prefix}: components in the format's order");
    Ok(p)
}

#[test]
fn quantized_linears_map_to_component_formats() {
    use poot_formats::{Fp8Scaling, GroupSize, MatrixShape, PackedFormat, ScaleType};
    let ck = quantized("gptq");
    let p = packed(&ck, "layer.q_proj").unwrap();
    let PackedFormat::Gptq(g) = p.format else {
        panic!("{}", p.format)
    };
    assert!(g.act_order);
    assert_eq!(g.group, GroupSize::Elems(16.try_into().unwrap()));
    assert_eq!(p.shape, MatrixShape::new(32, 64));

    let ck = quantized("awq");
    let p = packed(&ck, "layer.q_proj").unwrap();
    assert!(matches!(p.format, PackedFormat::Awq(_)), "{}", p.format);

    let ck = quantized("fp8_channel");
    let p = packed(&ck, "layer.q_proj").unwrap();
    let PackedFormat::Fp8(f) = p.format else {
        panic!("{}", p.format)
    };
    assert_eq!(
        (f.scaling, f.scale_type),
        (Fp8Scaling::PerChannel, ScaleType::BF16)
    );

    // 16x16 scale blocks load, but have no component format: refused by name when bound.
    let ck = quantized("fp8_block");
    let err = packed(&ck, "layer.q_proj").unwrap_err();
    assert!(
        matches!(&err, QuantError::UnsupportedLayout { prefix, .. } if prefix == "layer.q_proj"),
        "{err:?}"
    );
    assert!(err.to_string().contains("16x16"), "{err}");
}

/// GPTQ without act-order: a `g_idx` that is the default grouping is left out of the
/// component format; one that is not is read (so the decode follows the stored groups).
#[test]
fn a_gptq_g_idx_is_read_only_when_it_regroups() {
    let config = r#"{"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 16, "desc_act": false}}"#;
    for (g_idx, reads) in [
        ((0..64).map(|k| k / 16).collect::<Vec<i32>>(), false),
        ((0..64).map(|k| k % 4).collect::<Vec<i32>>(), true),
    ] {
        let dir = TempDir::new("gptq-gidx");
        std::fs::write(dir.join("config.json"), config).unwrap();
        let bytes: Vec<u8> = g_idx.iter().flat_map(|g| g.to_le_bytes()).collect();
        let file = write_safetensors(&[
            ("l.g_idx", "I32", &[64], &bytes),
            ("l.qweight", "I32", &[8, 32], &[0u8; 1024]),
            ("l.qzeros", "I32", &[4, 4], &[0u8; 64]),
            ("l.scales", "F16", &[4, 32], &[0u8; 256]),
        ]);
        std::fs::write(dir.join("model.safetensors"), file).unwrap();
        let ck = load(dir.path(), &LoadOptions::default()).unwrap();
        let p = packed(&ck, "l").unwrap();
        let poot_formats::PackedFormat::Gptq(g) = p.format else {
            panic!("{}", p.format)
        };
        assert_eq!(g.act_order, reads, "{g_idx:?}");
    }
}

/// transformers' `mxfp4` (gpt-oss's released checkpoints): the config is read, the expert
/// stacks' blocks and scales stay plain U8 tensors for the family to bind, and every linear
/// reads dense.
#[test]
fn transformers_mxfp4_config_leaves_linears_dense() {
    let config = r#"{"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
        "model.embed_tokens", "lm_head"]}}"#;
    let dir = TempDir::new("mxfp4-experts");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let file = write_safetensors(&[
        ("e.gate_up_proj_blocks", "U8", &[2, 4, 1, 16], &[0u8; 128]),
        ("e.gate_up_proj_scales", "U8", &[2, 4, 1], &[127u8; 8]),
        ("lm_head.weight", "BF16", &[4, 64], &[0u8; 512]),
    ]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let ck = load(dir.path(), &LoadOptions::default()).unwrap();
    let q = ck.quantization().unwrap();
    assert_eq!(
        (q.method, q.method_name.as_str(), q.bits, q.group_size),
        (QuantMethod::Mxfp4Experts, "mxfp4", 4, Some(32))
    );
    assert_eq!(q.modules_not_quantized.len(), 4);
    assert!(matches!(
        ck.linear("lm_head").unwrap(),
        LinearWeight::Dense(_)
    ));
    assert_eq!(
        ck.store().get("e.gate_up_proj_blocks").unwrap().shape(),
        &[2, 4, 1, 16]
    );
}

/// compressed-tensors MXFP4: E2M1 codes with per-32 E8M0 scales, as stored.
#[test]
fn mxfp4_pack_quantized_linears_load_as_stored() {
    let config = r#"{"model_type": "llama", "quantization_config": {"quant_method": "compressed-tensors",
        "format": "mxfp4-pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}}},
        "ignore": ["lm_head"]}}"#;
    let dir = TempDir::new("mxfp4");
    std::fs::write(dir.join("config.json"), config).unwrap();
    let packed_bytes: Vec<u8> = (0..16 * 32).map(|i| i as u8).collect();
    let file = write_safetensors(&[
        ("l.weight_packed", "U8", &[16, 32], &packed_bytes),
        ("l.weight_scale", "U8", &[16, 2], &[127u8; 32]),
        ("lm_head.weight", "BF16", &[4, 64], &[0u8; 512]),
    ]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let ck = load(dir.path(), &LoadOptions::default()).unwrap();
    let q = ck.quantization().unwrap();
    assert_eq!(
        (q.method, q.bits, q.group_size),
        (QuantMethod::Mxfp4, 4, Some(32))
    );
    assert_eq!(q.modules_not_quantized, ["lm_head"]);
    let LinearWeight::Quantized(l) = ck.linear("l").unwrap() else {
        panic!("MXFP4 linear")
    };
    assert_eq!((l.in_features, l.out_features), (64, 16));
    let QuantComponents::Fp4 { weight_packed, .. } = &l.components else {
        panic!()
    };
    assert_eq!(weight_packed.bytes(), packed_bytes.as_slice());
    let p = l.packed().unwrap();
    assert_eq!(p.format, poot_formats::PackedFormat::Fp4E2M1);
    assert_eq!(p.components.len(), 2);
    assert!(matches!(
        ck.linear("lm_head").unwrap(),
        LinearWeight::Dense(_)
    ));

    // A scale that is not E8M0 bytes, and a group size the MX layout does not have.
    let file = write_safetensors(&[
        ("l.weight_packed", "U8", &[16, 32], &packed_bytes),
        ("l.weight_scale", "F8_E4M3", &[16, 4], &[0u8; 64]),
    ]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    assert!(matches!(quant_err(&dir), QuantError::ComponentType { .. }));
    std::fs::write(
        dir.join("config.json"),
        config.replace("\"group_size\": 32", "\"group_size\": 16"),
    )
    .unwrap();
    assert!(matches!(
        quant_err(&dir),
        QuantError::UnsupportedVariant { .. }
    ));
    // Packed FP4 components without an MXFP4 config.
    std::fs::write(dir.join("config.json"), r#"{"model_type": "llama"}"#).unwrap();
    assert!(matches!(
        quant_err(&dir),
        QuantError::ComponentsWithoutConfig { .. }
    ));
}

/// With a block size configured, a weight no larger than one block has a [1, 1] scale: one
/// block, not a per-tensor scale.
#[test]
fn a_one_block_fp8_scale_is_per_block() {
    let dir = TempDir::new("fp8-one-block");
    std::fs::write(
        dir.join("config.json"),
        r#"{"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}"#,
    )
    .unwrap();
    let file = write_safetensors(&[
        ("l.weight", "F8_E4M3", &[64, 96], &[0u8; 64 * 96]),
        ("l.weight_scale_inv", "F32", &[1, 1], &[0u8; 4]),
    ]);
    std::fs::write(dir.join("model.safetensors"), file).unwrap();
    let ck = load(dir.path(), &LoadOptions::default()).unwrap();
    let LinearWeight::Quantized(l) = ck.linear("l").unwrap() else {
        panic!("FP8 linear")
    };
    let QuantComponents::Fp8 { scale_layout, .. } = &l.components else {
        panic!()
    };
    assert_eq!(
        *scale_layout,
        Fp8ScaleLayout::Block {
            rows: 128,
            cols: 128
        }
    );
    let p = packed(&ck, "l").unwrap();
    assert!(matches!(
        p.format,
        poot_formats::PackedFormat::Fp8(poot_formats::Fp8Format {
            scaling: poot_formats::Fp8Scaling::Block128,
            ..
        })
    ));
}
