use std::fmt;

use poot_formats::GgmlType;

/// Where in a GGUF file a parse error happened, for messages a user can act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GgufLocation {
    /// The fixed header: magic, version, tensor and metadata counts.
    Header,
    /// The key of the metadata entry with this index (0-based, file order).
    MetadataKey { index: u64 },
    /// The value of the metadata entry with this key.
    MetadataValue { key: String },
    /// The tensor info with this index (0-based, file order).
    TensorInfo { index: u64 },
}

impl fmt::Display for GgufLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufLocation::Header => write!(f, "header"),
            GgufLocation::MetadataKey { index } => write!(f, "metadata key #{index}"),
            GgufLocation::MetadataValue { key } => write!(f, "metadata value `{key}`"),
            GgufLocation::TensorInfo { index } => write!(f, "tensor info #{index}"),
        }
    }
}

/// A GGUF file that cannot be read. Every variant names where the problem is; nothing in a
/// malformed file panics the parser or makes it allocate more than the file holds.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GgufError {
    /// The file does not start with the GGUF magic (`GGUF`): it is not a GGUF file.
    #[error("not a GGUF file: the magic is {magic:02x?}, expected \"GGUF\"")]
    BadMagic { magic: [u8; 4] },

    /// The version field is byte-swapped: the file was written big-endian. Convert it with
    /// llama.cpp's `gguf_convert_endian.py`.
    #[error(
        "the file is a big-endian GGUF (version {swapped_version} byte-swapped); only little-endian is read"
    )]
    BigEndian { swapped_version: u32 },

    /// The GGUF version is not 2 or 3 (version 1 used 32-bit counts and is long obsolete).
    #[error("GGUF version {version} is not supported (versions 2 and 3 are)")]
    UnsupportedVersion { version: u32 },

    /// A field runs past the end of the file: the file is truncated or a length lies.
    #[error(
        "{at}: {what} at offset {offset} needs {needed_bytes} B, but the file ends at {file_len_bytes} B"
    )]
    Truncated {
        at: GgufLocation,
        what: &'static str,
        offset: u64,
        needed_bytes: u64,
        file_len_bytes: u64,
    },

    /// A declared count cannot fit in the rest of the file even at the smallest encoding of
    /// each item, so it is refused before anything is allocated for it.
    #[error(
        "{at}: {what} count {count} at offset {offset} cannot fit in the {remaining_bytes} B left in the file"
    )]
    CountTooLarge {
        at: GgufLocation,
        what: &'static str,
        count: u64,
        offset: u64,
        remaining_bytes: u64,
    },

    /// A string (key, value or tensor name) is not valid UTF-8.
    #[error("{at}: the string at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { at: GgufLocation, offset: u64 },

    /// A metadata value or array element has a type id GGUF does not define (0-12).
    #[error("{at}: unknown metadata value type {type_id} at offset {offset}")]
    UnknownValueType {
        at: GgufLocation,
        type_id: u32,
        offset: u64,
    },

    /// A boolean metadata value is neither 0 nor 1.
    #[error("{at}: boolean byte {byte} at offset {offset} is neither 0 nor 1")]
    InvalidBool {
        at: GgufLocation,
        byte: u8,
        offset: u64,
    },

    /// Arrays are nested deeper than the parser follows (real files nest at most twice).
    #[error("{at}: arrays nested deeper than {max_depth} levels")]
    ArrayTooDeep { at: GgufLocation, max_depth: usize },

    /// Two metadata entries have the same key.
    #[error("metadata key `{key}` appears twice")]
    DuplicateKey { key: String },

    /// `general.alignment` is not a u32.
    #[error("`general.alignment` must be a u32, found {found}")]
    AlignmentType { found: &'static str },

    /// `general.alignment` is zero or not a power of two.
    #[error("`general.alignment` is {alignment_bytes}, which is not a non-zero power of two")]
    AlignmentValue { alignment_bytes: u32 },

    /// Two tensor infos have the same name.
    #[error("tensor `{tensor}` is listed twice")]
    DuplicateTensor { tensor: String },

    /// A tensor has more dimensions than ggml supports (4).
    #[error("tensor `{tensor}` has {n_dims} dimensions; GGUF tensors have at most {max_dims}")]
    TooManyDims {
        tensor: String,
        n_dims: u32,
        max_dims: u32,
    },

    /// A tensor's ggml type id is not one ggml has assigned.
    #[error("tensor `{tensor}` has unknown ggml type id {type_id}")]
    UnknownGgmlType { tensor: String, type_id: u32 },

    /// A tensor's element count or byte size overflows 64 bits.
    #[error(
        "tensor `{tensor}` with dims {dims_innermost_first:?} (innermost first) overflows 64-bit sizes"
    )]
    SizeOverflow {
        tensor: String,
        dims_innermost_first: Vec<u64>,
    },

    /// A packed tensor's rows (innermost dimension) are not a whole number of blocks.
    #[error(
        "tensor `{tensor}` of type {ggml_type:?}: its row of {row_elems} elements is not a multiple of the {block_elems}-element block"
    )]
    PartialBlock {
        tensor: String,
        ggml_type: GgmlType,
        row_elems: u64,
        block_elems: u64,
    },

    /// A tensor's data offset is not a multiple of the file's alignment.
    #[error(
        "tensor `{tensor}`: data offset {offset_bytes} is not a multiple of the alignment {alignment_bytes}"
    )]
    MisalignedTensor {
        tensor: String,
        offset_bytes: u64,
        alignment_bytes: u64,
    },

    /// A tensor's bytes lie (partly) past the end of the file.
    #[error(
        "tensor `{tensor}`: bytes {start_bytes}..{end_bytes} lie past the end of the file ({file_len_bytes} B)"
    )]
    TensorOutOfBounds {
        tensor: String,
        start_bytes: u64,
        end_bytes: u64,
        file_len_bytes: u64,
    },

    /// Two tensors' byte ranges overlap.
    #[error("tensors `{first}` and `{second}` overlap in the data section")]
    TensorOverlap { first: String, second: String },
}
