//! GGUF (versions 2 and 3, little-endian): our own parser of the header, every metadata value
//! type, tensor infos and the data section's layout. It is written against a byte prefix of
//! the file and its full length, so it can read just the header ([`GgufFile::open`]) or
//! a whole mapped file ([`GgufFile::parse`]) with the same checks.

mod error;
mod file;
mod metadata;
mod tensor_info;

pub use error::{GgufError, GgufLocation};
pub(crate) use file::gguf_error;
pub use file::{GGUF_DEFAULT_ALIGNMENT_BYTES, GgufFile};
pub use metadata::{GgufMetadata, MetaArray, MetaValue};
pub use tensor_info::GgufTensorInfo;
