//! safetensors: our own parser of the header (an 8-byte length and a JSON table of tensors),
//! and of the shard index of a sharded checkpoint.

mod error;
mod header;
mod shard_index;

pub use error::SafetensorsError;
pub use header::{MAX_HEADER_BYTES, SafetensorsHeader, SafetensorsTensorInfo};
pub use shard_index::{SHARD_INDEX_FILE, ShardIndex, ShardIndexError};
