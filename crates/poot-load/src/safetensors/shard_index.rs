use std::collections::BTreeMap;

use serde_json::Value;

use crate::json_object::ObjectEntries;

/// The index as written; other top-level keys (`metadata`) are ignored.
#[derive(serde::Deserialize)]
struct RawIndex {
    #[serde(default)]
    weight_map: Option<ObjectEntries>,
}

/// The file that lists a sharded checkpoint's tensors.
pub const SHARD_INDEX_FILE: &str = "model.safetensors.index.json";

/// `model.safetensors.index.json` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ShardIndexError {
    /// The index is not a JSON object.
    #[error("not a JSON object: {source}")]
    Json {
        #[source]
        source: serde_json::Error,
    },

    /// The index has no `weight_map` object.
    #[error("no `weight_map` object")]
    NoWeightMap,

    /// A `weight_map` value is not a string.
    #[error("`weight_map` entry for `{tensor}` is not a file name string")]
    EntryNotString { tensor: String },

    /// A tensor is listed twice in `weight_map`.
    #[error("`weight_map` lists `{tensor}` twice")]
    DuplicateTensor { tensor: String },

    /// A shard is not a plain file name in the checkpoint directory (it has a path separator,
    /// is `..`, or is empty), so the index could make the load read files outside it.
    #[error("`weight_map` puts `{tensor}` in `{shard}`, which is not a plain file name")]
    ShardName { tensor: String, shard: String },
}

/// A sharded checkpoint's index: which shard file holds each tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIndex {
    /// Tensor name -> shard file name.
    pub weight_map: BTreeMap<String, String>,
}

impl ShardIndex {
    pub fn parse(bytes: &[u8]) -> Result<ShardIndex, ShardIndexError> {
        let raw: RawIndex =
            serde_json::from_slice(bytes).map_err(|source| ShardIndexError::Json { source })?;
        let entries = raw.weight_map.ok_or(ShardIndexError::NoWeightMap)?;
        let mut weight_map = BTreeMap::new();
        for (tensor, shard) in entries.0 {
            let Value::String(shard) = shard else {
                return Err(ShardIndexError::EntryNotString { tensor });
            };
            if !is_plain_file_name(&shard) {
                return Err(ShardIndexError::ShardName { tensor, shard });
            }
            if weight_map.contains_key(&tensor) {
                return Err(ShardIndexError::DuplicateTensor { tensor });
            }
            weight_map.insert(tensor, shard);
        }
        Ok(ShardIndex { weight_map })
    }

    /// The distinct shard files, sorted.
    pub fn shards(&self) -> Vec<&str> {
        let mut shards: Vec<&str> = self.weight_map.values().map(String::as_str).collect();
        shards.sort_unstable();
        shards.dedup();
        shards
    }
}

fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !name.contains(':')
}
