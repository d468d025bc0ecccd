use poot_formats::DenseType;

/// A safetensors file that cannot be read. Nothing in a malformed file panics the parser or
/// makes it allocate more than the file holds.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// The file is shorter than the 8-byte header length that starts every safetensors file.
    #[error("the file is {file_len_bytes} B, shorter than the 8-byte header length")]
    Truncated { file_len_bytes: u64 },

    /// The declared header length runs past the end of the file.
    #[error(
        "the header is declared as {header_len_bytes} B, but only {available_bytes} B follow the length field"
    )]
    HeaderPastEnd {
        header_len_bytes: u64,
        available_bytes: u64,
    },

    /// The declared header length is above the limit the reference implementation also sets.
    #[error("the header is declared as {header_len_bytes} B, above the {max_bytes} B limit")]
    HeaderTooLarge {
        header_len_bytes: u64,
        max_bytes: u64,
    },

    /// The header is not a JSON object.
    #[error("the header is not a JSON object: {source}")]
    HeaderJson {
        #[source]
        source: serde_json::Error,
    },

    /// A tensor name (or `__metadata__`) appears twice in the header.
    #[error("`{tensor}` appears twice in the header")]
    DuplicateTensor { tensor: String },

    /// `__metadata__` is not an object of strings.
    #[error("`__metadata__` must map strings to strings; `{key}` does not")]
    MetadataEntry { key: String },

    /// A tensor entry lacks a field, or the field has the wrong JSON type.
    #[error("tensor `{tensor}`: `{field}` is missing or malformed (expected {expected})")]
    EntryField {
        tensor: String,
        field: &'static str,
        expected: &'static str,
    },

    /// A tensor's dtype is not one poot stores (`F8_E4M3FNUZ`, `C64`, `F4`, ...).
    #[error("tensor `{tensor}` has dtype `{dtype}`, which poot does not read")]
    UnknownDtype { tensor: String, dtype: String },

    /// A tensor's element count or byte size overflows 64 bits.
    #[error("tensor `{tensor}` with shape {shape:?} overflows 64-bit sizes")]
    SizeOverflow { tensor: String, shape: Vec<u64> },

    /// A tensor's data offsets are reversed (begin after end).
    #[error("tensor `{tensor}`: data_offsets [{begin_bytes}, {end_bytes}] are reversed")]
    OffsetsReversed {
        tensor: String,
        begin_bytes: u64,
        end_bytes: u64,
    },

    /// A tensor's bytes lie past the end of the data section.
    #[error(
        "tensor `{tensor}`: data ends at {end_bytes} B, past the {data_len_bytes} B data section"
    )]
    OutOfBounds {
        tensor: String,
        end_bytes: u64,
        data_len_bytes: u64,
    },

    /// A tensor's byte length is not its element count times its dtype's size.
    #[error(
        "tensor `{tensor}` ({dtype:?} {shape:?}) needs {expected_bytes} B but its offsets span {actual_bytes} B"
    )]
    LengthMismatch {
        tensor: String,
        dtype: DenseType,
        shape: Vec<u64>,
        expected_bytes: u64,
        actual_bytes: u64,
    },

    /// Two tensors' byte ranges overlap.
    #[error("tensors `{first}` and `{second}` overlap")]
    Overlap { first: String, second: String },

    /// Bytes of the data section belong to no tensor. The format forbids holes (a file with
    /// unindexed bytes could be two files at once).
    #[error("data bytes {start_bytes}..{end_bytes} belong to no tensor")]
    Hole { start_bytes: u64, end_bytes: u64 },
}
