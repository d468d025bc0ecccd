//! The entry points: [`load`] a checkpoint into a [`Checkpoint`], or [`peek_config`] at its
//! config without touching its weights.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::LoadError;
use crate::format_table::GgmlAdmission;
use crate::gguf::{GgufFile, GgufMetadata, gguf_error};
use crate::integrity::Verifier;
use crate::mapped_file::MappedFile;
use crate::options::LoadOptions;
use crate::quantization::QuantizationConfig;
use crate::quantized_linear::{self, LinearWeight};
use crate::safetensors::{SHARD_INDEX_FILE, SafetensorsHeader, ShardIndex};
use crate::side_files::{self, SideFiles};
use crate::store::{StoredTensor, WeightStore};

/// The single-file weights of an unsharded Hugging Face checkpoint.
pub const SAFETENSORS_FILE: &str = "model.safetensors";
/// A Hugging Face checkpoint's model config.
pub const CONFIG_FILE: &str = "config.json";

/// Where a checkpoint's model config comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ConfigSource {
    /// `config.json` of a Hugging Face directory (a JSON object).
    HuggingFace(Value),
    /// The metadata of a GGUF file.
    Gguf(GgufMetadata),
}

impl ConfigSource {
    pub fn as_hugging_face(&self) -> Option<&Value> {
        match self {
            ConfigSource::HuggingFace(v) => Some(v),
            ConfigSource::Gguf(_) => None,
        }
    }

    pub fn as_gguf(&self) -> Option<&GgufMetadata> {
        match self {
            ConfigSource::HuggingFace(_) => None,
            ConfigSource::Gguf(m) => Some(m),
        }
    }
}

/// A loaded checkpoint: its weights as stored, its config, the verified side files, and for a
/// Hugging Face checkpoint its quantization config.
#[derive(Debug)]
pub struct Checkpoint {
    store: WeightStore,
    config: ConfigSource,
    side_files: SideFiles,
    quantization: Option<QuantizationConfig>,
}

impl Checkpoint {
    pub fn store(&self) -> &WeightStore {
        &self.store
    }

    pub fn config(&self) -> &ConfigSource {
        &self.config
    }

    /// The verified side files (empty for a GGUF, which holds everything inside).
    pub fn side_files(&self) -> &SideFiles {
        &self.side_files
    }

    /// The verified bytes of a side file (`tokenizer.json`, `tokenizer_config.json`, ...) as
    /// the load read and hashed them, or `None` when the checkpoint has no such file. Parse
    /// these bytes rather than reading the file again. See [`crate::SIDE_FILES`].
    pub fn read_side_file(&self, name: &str) -> Option<&[u8]> {
        self.side_files.get(name)
    }

    /// The Hugging Face quantization config, when the checkpoint is quantized.
    pub fn quantization(&self) -> Option<&QuantizationConfig> {
        self.quantization.as_ref()
    }

    /// The weight of the linear layer at `prefix`, dense or as packed components.
    pub fn linear(&self, prefix: &str) -> Result<LinearWeight<'_>, LoadError> {
        quantized_linear::linear(&self.store, self.quantization.as_ref(), prefix)
    }

    pub fn into_parts(
        self,
    ) -> (
        WeightStore,
        ConfigSource,
        SideFiles,
        Option<QuantizationConfig>,
    ) {
        (self.store, self.config, self.side_files, self.quantization)
    }
}

/// Loads a checkpoint: a directory is a Hugging Face checkpoint (`config.json` and
/// `model.safetensors` or a sharded `model.safetensors.index.json`), a file is a GGUF.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Checkpoint, LoadError> {
    let verifier = Verifier::new(options.integrity.as_ref());
    if path_kind(path)? == PathKind::Directory {
        load_hugging_face(path, verifier)
    } else {
        load_gguf(path, verifier)
    }
}

/// Reads only a checkpoint's config: `config.json` of a directory (no weight file is opened),
/// or the header and metadata of a GGUF (read from its start, the tensor data is neither read
/// nor mapped). This is what a registry resolves the family from before weights are loaded.
/// It checks no manifest: the config a [`load`] returns is the verified one.
pub fn peek_config(path: &Path) -> Result<ConfigSource, LoadError> {
    if path_kind(path)? == PathKind::Directory {
        let config_path = path.join(CONFIG_FILE);
        if side_files::regular_file_len(&config_path)?.is_none() {
            return Err(LoadError::MissingConfig {
                dir: path.to_path_buf(),
            });
        }
        let bytes = std::fs::read(&config_path).map_err(|source| LoadError::Io {
            path: config_path.clone(),
            source,
        })?;
        parse_config(&config_path, &bytes).map(ConfigSource::HuggingFace)
    } else {
        GgufFile::open(path).map(|g| ConfigSource::Gguf(g.into_metadata()))
    }
}

#[derive(PartialEq, Eq)]
enum PathKind {
    Directory,
    File,
}

fn path_kind(path: &Path) -> Result<PathKind, LoadError> {
    let meta = std::fs::metadata(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        Ok(PathKind::Directory)
    } else if meta.is_file() {
        Ok(PathKind::File)
    } else {
        Err(LoadError::NotACheckpoint {
            path: path.to_path_buf(),
        })
    }
}

fn parse_config(path: &Path, bytes: &[u8]) -> Result<Value, LoadError> {
    let value: Value = serde_json::from_slice(bytes).map_err(|source| LoadError::ConfigJson {
        path: path.to_path_buf(),
        source,
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(LoadError::ConfigNotObject {
            path: path.to_path_buf(),
        })
    }
}

/// The name a GGUF is listed under in a manifest: its file name.
fn gguf_manifest_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.to_string_lossy().into_owned(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Maps a weight file after checking it against the manifest (listed, length, SHA-256 of the
/// mapped bytes); nothing in it has been parsed yet.
fn map_verified(path: &Path, name: &str, verifier: Verifier<'_>) -> Result<MappedFile, LoadError> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = File::open(path)
        .and_then(|f| f.metadata())
        .map_err(io)?
        .len();
    verifier.check_length(name, len)?;
    let mapped = MappedFile::open(path, name.to_owned())?;
    verifier.check_bytes(name, mapped.bytes())?;
    Ok(mapped)
}

fn load_gguf(path: &Path, verifier: Verifier<'_>) -> Result<Checkpoint, LoadError> {
    let mapped = map_verified(path, &gguf_manifest_name(path), verifier)?;
    let gguf = GgufFile::parse(mapped.bytes()).map_err(|e| gguf_error(path, e))?;
    let mut tensors = Vec::with_capacity(gguf.tensors().len());
    push_gguf_tensors(&gguf, 0, &mut tensors)?;
    let mut files = vec![mapped];
    // A split GGUF: the other parts' tensors, each from its own file; the metadata is the
    // first part's.
    for (k, part) in gguf_parts(path, gguf.metadata())?.iter().enumerate() {
        let mapped = map_verified(part, &gguf_manifest_name(part), verifier)?;
        let parsed = GgufFile::parse(mapped.bytes()).map_err(|e| gguf_error(part, e))?;
        push_gguf_tensors(&parsed, k + 1, &mut tensors)?;
        files.push(mapped);
    }
    let store = WeightStore::new(files, tensors)?;
    Ok(Checkpoint {
        store,
        config: ConfigSource::Gguf(gguf.into_metadata()),
        side_files: SideFiles::default(),
        quantization: None,
    })
}

/// The tensors of `gguf`, read from file `file` of the store.
fn push_gguf_tensors(
    gguf: &GgufFile,
    file: usize,
    tensors: &mut Vec<StoredTensor>,
) -> Result<(), LoadError> {
    for t in gguf.tensors() {
        let admission = GgmlAdmission::of(t.ggml_type);
        let stored_type =
            admission
                .stored_type()
                .ok_or_else(|| LoadError::UnsupportedGgmlType {
                    tensor: t.name.clone(),
                    ggml_type: t.ggml_type,
                })?;
        tensors.push(StoredTensor {
            name: t.name.clone(),
            shape: t.shape.clone(),
            stored_type,
            file,
            file_range: t.file_range.clone(),
        });
    }
    Ok(())
}

/// The other parts of a split GGUF whose first part is `path` (llama.cpp's
/// `NAME-00001-of-0000N.gguf` with `split.count` N), in order beside it; none for a whole file.
fn gguf_parts(path: &Path, metadata: &GgufMetadata) -> Result<Vec<PathBuf>, LoadError> {
    if !metadata.contains("split.count") {
        return Ok(Vec::new());
    }
    let count = metadata.get_u32("split.count")?;
    if count <= 1 {
        return Ok(Vec::new());
    }
    let no = if metadata.contains("split.no") {
        metadata.get_u32("split.no")?
    } else {
        0
    };
    let name = gguf_manifest_name(path);
    let split_error = |detail: String| LoadError::SplitGguf {
        path: path.to_path_buf(),
        detail,
    };
    let suffix = format!("-{:05}-of-{count:05}.gguf", u64::from(no) + 1);
    let Some(base) = name.strip_suffix(&suffix) else {
        return Err(split_error(format!(
            "a split GGUF of {count} parts whose name does not end in `{suffix}`, so its other parts cannot be found"
        )));
    };
    if no != 0 {
        return Err(split_error(format!(
            "part {} of a split GGUF of {count}; load the first part, `{base}-00001-of-{count:05}.gguf`",
            u64::from(no) + 1
        )));
    }
    Ok((2..=count)
        .map(|k| path.with_file_name(format!("{base}-{k:05}-of-{count:05}.gguf")))
        .collect())
}

/// The weight files of a Hugging Face directory and, when sharded, the index.
fn weight_files(
    dir: &Path,
    index_bytes: Option<&[u8]>,
) -> Result<(Vec<String>, Option<ShardIndex>), LoadError> {
    if let Some(bytes) = index_bytes {
        let index = ShardIndex::parse(bytes).map_err(|source| LoadError::ShardIndex {
            path: dir.join(SHARD_INDEX_FILE),
            source,
        })?;
        let shards = index.shards().into_iter().map(str::to_owned).collect();
        return Ok((shards, Some(index)));
    }
    if side_files::regular_file_len(&dir.join(SAFETENSORS_FILE))?.is_some() {
        return Ok((vec![SAFETENSORS_FILE.to_owned()], None));
    }
    Err(LoadError::NoWeights {
        dir: dir.to_path_buf(),
    })
}

fn load_hugging_face(dir: &Path, verifier: Verifier<'_>) -> Result<Checkpoint, LoadError> {
    let side_files = SideFiles::read(dir, verifier)?;
    let config_bytes = side_files
        .get(CONFIG_FILE)
        .ok_or_else(|| LoadError::MissingConfig {
            dir: dir.to_path_buf(),
        })?;
    let config = parse_config(&dir.join(CONFIG_FILE), config_bytes)?;
    let quantize_config = match side_files.get("quantize_config.json") {
        Some(bytes) => Some(parse_config(&dir.join("quantize_config.json"), bytes)?),
        None => None,
    };
    let quantization = QuantizationConfig::from_hf(&config, quantize_config.as_ref())?;

    let (names, index) = weight_files(dir, side_files.get(SHARD_INDEX_FILE))?;
    // Every weight file is verified before any header is parsed.
    let mut files = Vec::with_capacity(names.len());
    for name in &names {
        files.push(map_verified(&dir.join(name), name, verifier)?);
    }

    let mut tensors = Vec::new();
    let mut found_in_shards: BTreeMap<&str, &str> = BTreeMap::new();
    for (file_index, file) in files.iter().enumerate() {
        let path = dir.join(file.name());
        let header =
            SafetensorsHeader::parse(file.bytes()).map_err(|source| LoadError::Safetensors {
                path: path.clone(),
                source,
            })?;
        for t in header.tensors {
            if let Some(index) = &index {
                let indexed = index.weight_map.get(&t.name);
                if indexed.map(String::as_str) != Some(file.name()) {
                    return Err(LoadError::ShardTensorMismatch {
                        tensor: t.name,
                        shard: file.name().to_owned(),
                        indexed_shard: indexed.cloned(),
                    });
                }
            }
            tensors.push(StoredTensor {
                name: t.name,
                shape: t.shape,
                stored_type: poot_formats::StoredType::Dense(t.dtype),
                file: file_index,
                file_range: t.file_range,
            });
        }
    }
    if let Some(index) = &index {
        for t in &tensors {
            if let Some(f) = files.get(t.file) {
                found_in_shards.insert(t.name.as_str(), f.name());
            }
        }
        if let Some((tensor, shard)) = index
            .weight_map
            .iter()
            .find(|(t, _)| !found_in_shards.contains_key(t.as_str()))
        {
            return Err(LoadError::IndexedTensorMissing {
                tensor: tensor.clone(),
                shard: shard.clone(),
            });
        }
    }
    let store = WeightStore::new(files, tensors)?;
    quantized_linear::check_all(&store, quantization.as_ref())?;
    Ok(Checkpoint {
        store,
        config: ConfigSource::HuggingFace(config),
        side_files,
        quantization,
    })
}

/// The files (relative names) a load of `path` reads, for recording a manifest.
pub(crate) fn files_read_by_load(path: &Path) -> Result<Vec<String>, LoadError> {
    if path_kind(path)? != PathKind::Directory {
        let mut names = vec![gguf_manifest_name(path)];
        if let ConfigSource::Gguf(metadata) = peek_config(path)? {
            names.extend(
                gguf_parts(path, &metadata)?
                    .iter()
                    .map(|p| gguf_manifest_name(p)),
            );
        }
        return Ok(names);
    }
    let mut names = side_files::present(path)?;
    let index_path = path.join(SHARD_INDEX_FILE);
    let index_bytes = if names.iter().any(|n| n == SHARD_INDEX_FILE) {
        Some(std::fs::read(&index_path).map_err(|source| LoadError::Io {
            path: index_path.clone(),
            source,
        })?)
    } else {
        None
    };
    let (weights, _) = weight_files(path, index_bytes.as_deref())?;
    names.extend(weights);
    Ok(names)
}

/// The path of a file named in a manifest, for a checkpoint at `root` (a GGUF's parts lie
/// beside its first).
pub(crate) fn file_path(root: &Path, name: &str) -> PathBuf {
    if root.is_dir() {
        root.join(name)
    } else {
        root.with_file_name(name)
    }
}
