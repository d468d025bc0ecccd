use std::ops::Range;

use poot_formats::StoredType;

use crate::LoadError;
use crate::mapped_file::MappedFile;
use crate::tensor_view::TensorView;

/// One tensor's entry: where its bytes are in which mapped file.
pub(crate) struct StoredTensor {
    pub(crate) name: String,
    pub(crate) shape: Vec<u64>,
    pub(crate) stored_type: StoredType,
    /// Index into the store's files.
    pub(crate) file: usize,
    pub(crate) file_range: Range<u64>,
}

/// Every tensor of a checkpoint exactly as stored: memory-mapped files and, per tensor, its
/// name, outermost-first shape, [`StoredType`] and byte range. Nothing is copied or widened;
/// BF16/F16 stay 16-bit words, packed blocks stay blocks. Iteration is in name order, so it is
/// the same on every load whatever the file layout.
pub struct WeightStore {
    files: Vec<MappedFile>,
    /// Sorted by name, names unique.
    tensors: Vec<StoredTensor>,
    /// Per tensor, its byte range within its file, checked against the mapped length.
    ranges: Vec<Range<usize>>,
}

impl WeightStore {
    /// Builds a store; refuses a name that two files both hold.
    pub(crate) fn new(
        files: Vec<MappedFile>,
        mut tensors: Vec<StoredTensor>,
    ) -> Result<WeightStore, LoadError> {
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        for pair in tensors.windows(2) {
            if let [a, b] = pair
                && a.name == b.name
            {
                return Err(LoadError::DuplicateTensor {
                    tensor: a.name.clone(),
                    first_file: file_name(&files, a.file),
                    second_file: file_name(&files, b.file),
                });
            }
        }
        let mut ranges = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let file_len = files.get(t.file).map_or(0, |f| f.bytes().len());
            let range = usize::try_from(t.file_range.start)
                .ok()
                .zip(usize::try_from(t.file_range.end).ok())
                .filter(|&(s, e)| s <= e && e <= file_len)
                .ok_or_else(|| LoadError::TensorPastFileEnd {
                    tensor: t.name.clone(),
                    file: file_name(&files, t.file),
                    end_bytes: t.file_range.end,
                    file_len_bytes: file_len as u64,
                })?;
            ranges.push(range.0..range.1);
        }
        Ok(WeightStore {
            files,
            tensors,
            ranges,
        })
    }

    fn view(&self, index: usize) -> Option<TensorView<'_>> {
        let t = self.tensors.get(index)?;
        let file = self.files.get(t.file)?;
        let bytes = file.bytes().get(self.ranges.get(index)?.clone())?;
        Some(TensorView::new(
            &t.name,
            file.name(),
            t.shape.clone(),
            t.stored_type,
            bytes,
        ))
    }

    /// The tensor with this name, if the checkpoint has it.
    pub fn get(&self, name: &str) -> Option<TensorView<'_>> {
        let index = self
            .tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .ok()?;
        self.view(index)
    }

    /// The tensor with this name, or [`LoadError::TensorNotFound`] naming it.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, LoadError> {
        self.get(name).ok_or_else(|| LoadError::TensorNotFound {
            tensor: name.to_owned(),
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors
            .binary_search_by(|t| t.name.as_str().cmp(name))
            .is_ok()
    }

    /// Every tensor, in name order.
    pub fn iter(&self) -> impl Iterator<Item = TensorView<'_>> {
        (0..self.tensors.len()).filter_map(|i| self.view(i))
    }

    /// Every tensor name, in name order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.iter().map(|t| t.name.as_str())
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    /// The bytes all tensors occupy as stored.
    pub fn total_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .map(|t| t.file_range.end - t.file_range.start)
            .sum()
    }

    /// The weight files the store maps, relative to the checkpoint, in load order.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.files.iter().map(MappedFile::name)
    }
}

impl std::fmt::Debug for WeightStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WeightStore")
            .field(
                "files",
                &self.files.iter().map(MappedFile::name).collect::<Vec<_>>(),
            )
            .field("tensors", &self.tensors.len())
            .field("total_bytes", &self.total_bytes())
            .finish()
    }
}

fn file_name(files: &[MappedFile], index: usize) -> String {
    files
        .get(index)
        .map_or_else(String::new, |f| f.name().to_owned())
}
