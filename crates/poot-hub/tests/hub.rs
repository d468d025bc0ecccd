//! The Hub client against the fake Hub on the loopback interface: the cache layout
//! `huggingface_hub` shares, index-driven shards, GGUF quantizations and split files, digests,
//! the integrity manifest, offline use, and every refusal typed.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

#[path = "../../poot-models/tests/common/tiny_gguf.rs"]
mod tiny_gguf;

use poot_hub::fake::{FakeHub, FakeRepo};
use poot_hub::{Hub, HubError, HubSettings, RepoRef};
use poot_load::{LoadOptions, Manifest};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tiny_chat() -> PathBuf {
    fixtures().join("poot-serve/tests/fixtures/tiny-chat")
}

fn tiny_gguf() -> Vec<u8> {
    std::fs::read(fixtures().join("poot-models/tests/fixtures/tiny_llama.gguf")).unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("poot-hub-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn settings(endpoint: &str, cache: &Path, token: Option<&str>) -> HubSettings {
    HubSettings {
        endpoint: endpoint.to_owned(),
        token: token.map(str::to_owned),
        cache_dir: cache.to_owned(),
        offline: false,
    }
}

fn fetch(s: &HubSettings, spec: &str, revision: &str) -> Result<poot_hub::Fetched, HubError> {
    Hub::new(s.clone())?.fetch(&RepoRef::parse(spec).unwrap(), revision, &mut ())
}

#[test]
fn a_safetensors_repository_lands_in_the_shared_cache_layout_and_opens_offline_later() {
    let repo = FakeRepo::from_dir(&tiny_chat())
        .unwrap()
        .file("README.md", "# tiny chat")
        .file("pytorch_model.bin", vec![0u8; 64]);
    let commit = repo.commit();
    let hub = FakeHub::start(vec![("org/tiny-chat", repo)], None).unwrap();
    let cache = temp_dir("layout");
    let s = settings(&hub.endpoint(), &cache, None);
    let got = fetch(&s, "org/tiny-chat", "main").unwrap();
    let repo_dir = cache.join("models--org--tiny-chat");
    assert_eq!(got.path, repo_dir.join("snapshots").join(&commit));
    assert_eq!(got.commit, commit);
    assert!(!got.from_cache_only);
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    let mut downloaded = got.downloaded.clone();
    downloaded.sort();
    assert_eq!(
        downloaded,
        [
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json"
        ]
    );
    for name in &downloaded {
        let link = got.path.join(name);
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{name} is a link into blobs/"
        );
        assert_eq!(
            std::fs::read(&link).unwrap(),
            std::fs::read(tiny_chat().join(name)).unwrap(),
            "{name}"
        );
    }
    // An LFS file's blob is named by its SHA-256, as huggingface_hub names it.
    let weights = std::fs::read(tiny_chat().join("model.safetensors")).unwrap();
    let sha = poot_load::ManifestEntry::of_bytes(&weights).sha256;
    assert!(repo_dir.join("blobs").join(hex(&sha)).is_file());
    // The loader opens the snapshot folder.
    let checkpoint = poot_load::load(&got.path, &LoadOptions::default()).unwrap();
    assert!(checkpoint.read_side_file("tokenizer.json").is_some());

    // A second fetch downloads nothing.
    let before = hub.downloads();
    let again = fetch(&s, "org/tiny-chat", "main").unwrap();
    assert!(again.downloaded.is_empty());
    assert_eq!(hub.downloads(), before);
    // With the Hub gone, the cached revision still opens; offline never asks.
    let endpoint = hub.endpoint();
    drop(hub);
    let offline = fetch(&s, "org/tiny-chat", "main").unwrap();
    assert!(offline.from_cache_only);
    assert_eq!(offline.path, got.path);
    let mut off = s.clone();
    off.offline = true;
    assert_eq!(
        fetch(&off, "org/tiny-chat", &commit).unwrap().path,
        got.path
    );
    match fetch(&off, "org/other", "main") {
        Err(HubError::NotCached { detail, .. }) => assert!(detail.contains("HF_HUB_OFFLINE")),
        other => panic!("{other:?}"),
    }
    match fetch(&s, "org/other", "main") {
        Err(e @ HubError::Unreachable { .. }) => assert!(e.to_string().contains(&endpoint), "{e}"),
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(cache).unwrap();
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// tiny-chat's `model.safetensors` cut into two shards and an index.
fn sharded_tiny_chat() -> FakeRepo {
    let bytes = std::fs::read(tiny_chat().join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let names: Vec<&String> = header.keys().filter(|k| *k != "__metadata__").collect();
    let mut repo = FakeRepo::new();
    for f in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        repo = repo.file(f, std::fs::read(tiny_chat().join(f)).unwrap());
    }
    let mut weight_map = serde_json::Map::new();
    let halves = names.split_at(names.len() / 2);
    for (i, part) in [halves.0, halves.1].into_iter().enumerate() {
        let shard = format!("model-0000{}-of-00002.safetensors", i + 1);
        let mut head = serde_json::Map::new();
        let mut body = Vec::new();
        for name in part {
            let mut meta = header[name.as_str()].clone();
            let offsets = meta["data_offsets"].as_array().unwrap();
            let (a, b) = (
                offsets[0].as_u64().unwrap() as usize,
                offsets[1].as_u64().unwrap() as usize,
            );
            let start = body.len();
            body.extend_from_slice(&data[a..b]);
            meta["data_offsets"] = serde_json::json!([start, body.len()]);
            head.insert((*name).clone(), meta);
            weight_map.insert((*name).clone(), shard.clone().into());
        }
        let mut head = serde_json::Value::Object(head).to_string().into_bytes();
        while !head.len().is_multiple_of(8) {
            head.push(b' ');
        }
        let mut file = (head.len() as u64).to_le_bytes().to_vec();
        file.extend(head);
        file.extend(body);
        repo = repo.file(&shard, file);
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    repo.file("model.safetensors.index.json", index.to_string())
}

#[test]
fn a_sharded_checkpoint_fetches_the_shards_its_index_names() {
    let repo = sharded_tiny_chat().file("model-00009-of-00009.safetensors", vec![1u8; 16]);
    let hub = FakeHub::start(vec![("org/sharded", repo)], None).unwrap();
    let cache = temp_dir("sharded");
    let got = fetch(
        &settings(&hub.endpoint(), &cache, None),
        "org/sharded",
        "main",
    )
    .unwrap();
    assert!(
        got.downloaded
            .contains(&"model-00001-of-00002.safetensors".to_owned())
    );
    assert!(
        got.downloaded
            .contains(&"model-00002-of-00002.safetensors".to_owned())
    );
    // A shard the index does not name is not fetched.
    assert!(!got.path.join("model-00009-of-00009.safetensors").exists());
    let sharded = poot_load::load(&got.path, &LoadOptions::default()).unwrap();
    let whole = poot_load::load(&tiny_chat(), &LoadOptions::default()).unwrap();
    let mut a: Vec<&str> = sharded.store().names().collect();
    let mut b: Vec<&str> = whole.store().names().collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    std::fs::remove_dir_all(cache).unwrap();
}

/// The tiny Llama GGUF as llama.cpp's gguf-split writes it in two parts.
fn split_tiny_gguf() -> (Vec<u8>, Vec<u8>) {
    use tiny_gguf::{Meta, TinyGguf};
    let whole = TinyGguf::llama();
    let mut first = whole.clone();
    first.tensors.truncate(4);
    let mut second = TinyGguf {
        tensors: whole.tensors[4..].to_vec(),
        ..TinyGguf::default()
    };
    for (no, part) in [&mut first, &mut second].into_iter().enumerate() {
        part.set("split.no", Meta::U32(no as u32));
        part.set("split.count", Meta::U32(2));
        part.set("split.tensors.count", Meta::I32(whole.tensors.len() as i32));
    }
    (first.bytes(), second.bytes())
}

fn gguf_repo() -> FakeRepo {
    let tiny = tiny_gguf();
    let mut f16 = tiny.clone();
    f16.push(0);
    let (part1, part2) = split_tiny_gguf();
    FakeRepo::new()
        .file("README.md", "GGUF quantizations")
        .file("Tiny-Q8_0.gguf", tiny.clone())
        .file("Tiny-F16.gguf", f16)
        .file("Q4_0/Tiny-Q4_0-00001-of-00002.gguf", part1)
        .file("Q4_0/Tiny-Q4_0-00002-of-00002.gguf", part2)
}

#[test]
fn a_gguf_is_fetched_by_quantization_and_a_split_one_whole() {
    let hub = FakeHub::start(vec![("org/Tiny-GGUF", gguf_repo())], None).unwrap();
    let cache = temp_dir("gguf");
    let s = settings(&hub.endpoint(), &cache, None);
    let got = fetch(&s, "org/Tiny-GGUF:q8_0", "main").unwrap();
    assert_eq!(got.downloaded, ["Tiny-Q8_0.gguf"]);
    assert_eq!(got.path.file_name().unwrap(), "Tiny-Q8_0.gguf");
    assert_eq!(std::fs::read(&got.path).unwrap(), tiny_gguf());
    assert!(
        !hub.requests().iter().any(|r| r.contains("F16")),
        "only the chosen quantization is downloaded"
    );
    let split = fetch(&s, "org/Tiny-GGUF:Q4_0", "main").unwrap();
    assert_eq!(
        split.downloaded,
        [
            "Q4_0/Tiny-Q4_0-00001-of-00002.gguf",
            "Q4_0/Tiny-Q4_0-00002-of-00002.gguf"
        ]
    );
    assert!(split.path.ends_with("Q4_0/Tiny-Q4_0-00001-of-00002.gguf"));
    // The loader opens the split file from its first part, every tensor there.
    let loaded = poot_load::load(&split.path, &LoadOptions::default()).unwrap();
    let whole = poot_load::load(&got.path, &LoadOptions::default()).unwrap();
    assert_eq!(loaded.store().len(), whole.store().len());
    match fetch(&s, "org/Tiny-GGUF:Q5_K_M", "main") {
        Err(e @ HubError::NoSuchQuant { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("Q5_K_M") && text.contains("F16, Q4_0, Q8_0"),
                "{text}"
            );
        }
        other => panic!("{other:?}"),
    }
    match fetch(&s, "org/Tiny-GGUF", "main") {
        Err(e @ HubError::QuantNeeded { .. }) => {
            assert!(e.to_string().contains("org/Tiny-GGUF:QUANT"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn missing_repositories_revisions_and_gated_access_are_typed() {
    let hub = FakeHub::start(
        vec![
            ("org/tiny-chat", FakeRepo::from_dir(&tiny_chat()).unwrap()),
            (
                "org/gated",
                FakeRepo::from_dir(&tiny_chat()).unwrap().gated(),
            ),
        ],
        Some("hf_right"),
    )
    .unwrap();
    let cache = temp_dir("errors");
    let s = settings(&hub.endpoint(), &cache, None);
    match fetch(&s, "org/nothing-here", "main") {
        Err(e @ HubError::RepoNotFound { .. }) => {
            assert!(e.to_string().contains("org/nothing-here"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        fetch(&s, "org/tiny-chat", "v9"),
        Err(HubError::RevisionNotFound { .. })
    ));
    match fetch(&s, "org/gated", "main") {
        Err(
            e @ HubError::Gated {
                status: 401,
                token_sent: false,
                ..
            },
        ) => {
            assert!(e.to_string().contains("HF_TOKEN"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let wrong = settings(&hub.endpoint(), &cache, Some("hf_wrong"));
    assert!(matches!(
        fetch(&wrong, "org/gated", "main"),
        Err(HubError::Gated {
            status: 403,
            token_sent: true,
            ..
        })
    ));
    let right = settings(&hub.endpoint(), &cache, Some("hf_right"));
    fetch(&right, "org/gated", "main").unwrap();
    // Nothing listens on a port just released: the network is unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gone = settings(&format!("http://{closed}"), &cache, None);
    assert!(matches!(
        fetch(&gone, "org/never-fetched", "main"),
        Err(HubError::Unreachable { .. })
    ));
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_download_whose_digest_differs_from_the_listing_is_refused_and_removed() {
    let repo = FakeRepo::from_dir(&tiny_chat())
        .unwrap()
        .listing_lies_about("model.safetensors", &"ab".repeat(32));
    let hub = FakeHub::start(vec![("org/liar", repo)], None).unwrap();
    let cache = temp_dir("digest");
    let s = settings(&hub.endpoint(), &cache, None);
    match fetch(&s, "org/liar", "main") {
        Err(e @ HubError::DigestMismatch { .. }) => {
            assert!(e.to_string().contains("model.safetensors"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    let snapshots = cache.join("models--org--liar/snapshots");
    let commit = std::fs::read_dir(&snapshots)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert!(!commit.join("model.safetensors").exists());
    // Tried again, it is downloaded again (and refused again), never taken from the cache.
    assert!(matches!(
        fetch(&s, "org/liar", "main"),
        Err(HubError::DigestMismatch { .. })
    ));
    std::fs::remove_dir_all(cache).unwrap();
}

#[test]
fn a_repository_manifest_is_fetched_and_checks_the_load() {
    let recorded = Manifest::record(&tiny_chat()).unwrap().to_json();
    let repo = FakeRepo::from_dir(&tiny_chat())
        .unwrap()
        .file(poot_hub::MANIFEST_FILE, recorded.clone());
    let mut tampered: serde_json::Value = serde_json::from_str(&recorded).unwrap();
    tampered["files"]["tokenizer.json"]["sha256"] = "0".repeat(64).into();
    let bad = FakeRepo::from_dir(&tiny_chat())
        .unwrap()
        .file(poot_hub::MANIFEST_FILE, tampered.to_string());
    let hub = FakeHub::start(vec![("org/good", repo), ("org/bad", bad)], None).unwrap();
    let cache = temp_dir("manifest");
    let s = settings(&hub.endpoint(), &cache, None);
    for (id, ok) in [("org/good", true), ("org/bad", false)] {
        let got = fetch(&s, id, "main").unwrap();
        let manifest = Manifest::from_json(&std::fs::read(got.manifest.unwrap()).unwrap()).unwrap();
        let options = LoadOptions {
            integrity: Some(manifest),
        };
        let loaded = poot_load::load(&got.path, &options);
        assert_eq!(loaded.is_ok(), ok, "{id}: {:?}", loaded.err());
    }
    std::fs::remove_dir_all(cache).unwrap();
}
