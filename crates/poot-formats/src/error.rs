use crate::{BlockFormat, DenseType, GgmlType, PackedFormat};

/// Why a stored weight format cannot be described or decoded as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The ggml type has no packed format in poot (Q8_1, Q8_K, IQ2_XXS, IQ2_S, IQ1_S, IQ1_M,
    /// TQ1_0, TQ2_0, NVFP4, Q1_0). A reader refuses the tensor by name and type; it is never read
    /// as dense weights.
    #[error("ggml type {ggml_type:?} (id {id}) has no packed format in poot")]
    Unsupported { ggml_type: GgmlType, id: u32 },

    /// A byte run handed to a block decode is not a whole number of blocks. The tensor's stored
    /// size disagrees with its type: the checkpoint is truncated or its type is misread.
    #[error("{format:?}: {n_bytes} B is not a whole number of {block_bytes} B blocks")]
    NotWholeBlocks {
        format: BlockFormat,
        n_bytes: usize,
        block_bytes: usize,
    },

    /// A dense byte run is not a whole number of its type's words: the tensor is truncated or its
    /// dtype is misread.
    #[error("{dtype:?}: {n_bytes} B is not a whole number of words")]
    NotWholeWords { dtype: DenseType, n_bytes: usize },

    /// The output slice does not hold exactly the number of elements the input decodes to. This
    /// is a caller error: size the output from the input.
    #[error("decode writes {expected_elems} elements but the output holds {got_elems}")]
    OutputLength {
        expected_elems: usize,
        got_elems: usize,
    },

    /// A logical matrix dimension is not a multiple of what the format packs together (for
    /// example K for a GGUF block, N for GPTQ's packed zero points).
    #[error("{format}: {dim} = {elems} is not a multiple of {multiple}")]
    ShapeNotDivisible {
        format: PackedFormat,
        dim: MatrixDim,
        elems: usize,
        multiple: usize,
    },

    /// The matrix is too large for this machine's address space.
    #[error("{format}: a {n_rows} x {k_cols} matrix overflows the address space")]
    SizeOverflow {
        format: PackedFormat,
        n_rows: usize,
        k_cols: usize,
    },

    /// A component tensor the format needs (such as `qzeros` or `weight_scale_inv`) is absent.
    #[error("{format}: component `{component}` is missing")]
    MissingComponent {
        format: PackedFormat,
        component: &'static str,
    },

    /// A component tensor's byte length differs from what the logical shape needs.
    #[error(
        "{format}: component `{component}` holds {got_bytes} B, the shape needs {expected_bytes} B"
    )]
    ComponentBytes {
        format: PackedFormat,
        component: &'static str,
        expected_bytes: usize,
        got_bytes: usize,
    },

    /// A component tensor is stored with another dtype than the format defines.
    #[error("{format}: component `{component}` is {got:?}, the format stores {expected:?}")]
    ComponentDtype {
        format: PackedFormat,
        component: &'static str,
        expected: DenseType,
        got: DenseType,
    },

    /// A component tensor's shape differs from what the logical shape needs.
    #[error("{format}: component `{component}` has shape {got:?}, the format needs {expected:?}")]
    ComponentShape {
        format: PackedFormat,
        component: &'static str,
        expected: Vec<usize>,
        got: Vec<usize>,
    },

    /// A component's rank or a packed dimension cannot yield a logical matrix shape.
    #[error("{format}: component `{component}` with shape {dims:?} does not describe a matrix")]
    ComponentRank {
        format: PackedFormat,
        component: &'static str,
        dims: Vec<usize>,
    },

    /// GPTQ's `g_idx` assigns an input column to a group that has no scales or zeros. The
    /// checkpoint is inconsistent.
    #[error("{format}: g_idx[{k_col}] = {group} but the checkpoint has {n_groups} groups")]
    GroupIndexOutOfRange {
        format: PackedFormat,
        k_col: usize,
        group: i64,
        n_groups: usize,
    },

    /// A row index is past the matrix's last row.
    #[error("row {row} is out of range for a matrix of {n_rows} rows")]
    RowOutOfRange { row: usize, n_rows: usize },

    /// The dense type is not a floating-point type, so there is no f32 decode for it.
    #[error("dense type {dtype:?} is not a floating-point type")]
    NotFloat { dtype: DenseType },
}

/// One of the two logical dimensions of a weight matrix `[N rows (out features), K cols (in
/// features)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatrixDim {
    /// N: output features, the rows.
    Rows,
    /// K: input features, the columns (the reduction axis of a projection).
    Cols,
}

impl std::fmt::Display for MatrixDim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MatrixDim::Rows => "N (rows)",
            MatrixDim::Cols => "K (cols)",
        })
    }
}
