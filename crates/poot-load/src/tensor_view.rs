use std::ops::Range;

use poot_formats::StoredType;

use crate::LoadError;

/// A borrowed, zero-copy view of one stored tensor: its bytes exactly as the file holds them.
///
/// `shape` is outermost-first (row-major) for every source: GGUF's innermost-first dims are
/// reversed at parse. A packed (ggml) tensor's innermost dimension is a whole number of
/// blocks, so any range of rows is whole blocks. The bytes have no alignment beyond 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorView<'a> {
    name: &'a str,
    file: &'a str,
    shape: Vec<u64>,
    stored_type: StoredType,
    bytes: &'a [u8],
}

impl<'a> TensorView<'a> {
    pub(crate) fn new(
        name: &'a str,
        file: &'a str,
        shape: Vec<u64>,
        stored_type: StoredType,
        bytes: &'a [u8],
    ) -> TensorView<'a> {
        TensorView {
            name,
            file,
            shape,
            stored_type,
            bytes,
        }
    }

    /// The tensor's name in the checkpoint (a row view keeps its tensor's name).
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// The file the tensor is stored in, relative to the checkpoint.
    pub fn file(&self) -> &'a str {
        self.file
    }

    /// Outermost-first.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    pub fn stored_type(&self) -> StoredType {
        self.stored_type
    }

    /// The stored bytes, borrowed from the mapped file.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    pub fn n_elems(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Number of rows: the outermost dimension.
    pub fn n_rows(&self) -> Result<u64, LoadError> {
        self.shape
            .first()
            .copied()
            .ok_or_else(|| LoadError::ScalarHasNoRows {
                tensor: self.name.to_owned(),
            })
    }

    /// Bytes in one row (everything below the outermost dimension).
    pub fn row_bytes(&self) -> Result<u64, LoadError> {
        self.n_rows()?;
        let row_elems: u64 = self.shape.iter().skip(1).product();
        self.stored_type
            .bytes_for(row_elems)
            .ok_or_else(|| LoadError::PartialBlockRow {
                tensor: self.name.to_owned(),
                stored_type: self.stored_type,
                row_elems,
            })
    }

    /// A zero-copy view of rows `rows` (along the outermost dimension). For a packed tensor
    /// this is whole rows of blocks.
    pub fn rows(&self, rows: Range<u64>) -> Result<TensorView<'a>, LoadError> {
        let n_rows = self.n_rows()?;
        if rows.start > rows.end || rows.end > n_rows {
            return Err(LoadError::RowRange {
                tensor: self.name.to_owned(),
                start: rows.start,
                end: rows.end,
                n_rows,
            });
        }
        let row_bytes = self.row_bytes()?;
        // In range: `end <= n_rows` and the tensor holds `n_rows * row_bytes` bytes.
        let start = usize::try_from(rows.start * row_bytes).ok();
        let end = usize::try_from(rows.end * row_bytes).ok();
        let bytes = start
            .zip(end)
            .and_then(|(s, e)| self.bytes.get(s..e))
            .ok_or_else(|| LoadError::RowRange {
                tensor: self.name.to_owned(),
                start: rows.start,
                end: rows.end,
                n_rows,
            })?;
        let mut shape = self.shape.clone();
        if let Some(outer) = shape.first_mut() {
            *outer = rows.end - rows.start;
        }
        Ok(TensorView {
            name: self.name,
            file: self.file,
            shape,
            stored_type: self.stored_type,
            bytes,
        })
    }

    /// Splits the rows into consecutive parts of the given sizes, which must add up to the
    /// row count: a fused QKV `[q + k + v, d]` tensor split with `&[q, k, v]`.
    pub fn split_rows(&self, part_rows: &[u64]) -> Result<Vec<TensorView<'a>>, LoadError> {
        let n_rows = self.n_rows()?;
        let total = part_rows
            .iter()
            .try_fold(0u64, |acc, &r| acc.checked_add(r));
        if total != Some(n_rows) {
            return Err(LoadError::RowSplit {
                tensor: self.name.to_owned(),
                part_rows: part_rows.to_vec(),
                n_rows,
            });
        }
        let mut start = 0;
        part_rows
            .iter()
            .map(|&r| {
                let view = self.rows(start..start + r);
                start += r;
                view
            })
            .collect()
    }
}
