use std::ops::Range;

use poot_formats::GgmlType;

/// One tensor as a GGUF file describes it.
///
/// `shape` is outermost-first (row-major, numpy order): GGUF lists dimensions innermost-first
/// (ggml's `ne[0]` is the contiguous one), and the parser reverses them so that every tensor
/// in a `WeightStore` has the same convention whatever file it came from. A GGUF matrix with
/// `ne = [in, out]` is therefore `shape = [out, in]`, rows of `in` contiguous elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    pub name: String,
    /// Outermost-first; see the type's docs.
    pub shape: Vec<u64>,
    pub ggml_type: GgmlType,
    /// The offset the file records, relative to the start of the data section.
    pub data_offset_bytes: u64,
    /// Where the tensor's bytes are in the file (absolute offsets).
    pub file_range: Range<u64>,
}

impl GgufTensorInfo {
    pub fn n_elems(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn size_bytes(&self) -> u64 {
        self.file_range.end - self.file_range.start
    }
}
