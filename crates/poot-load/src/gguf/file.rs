use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use poot_formats::GgmlType;

use super::error::{GgufError, GgufLocation};
use super::metadata::{GgufMetadata, MetaArray, MetaValue};
use super::tensor_info::GgufTensorInfo;
use crate::LoadError;
use crate::shape::checked_n_elems;

/// The default data alignment when `general.alignment` is absent.
pub const GGUF_DEFAULT_ALIGNMENT_BYTES: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// Deepest array nesting the parser follows; real files nest at most twice. Bounding it keeps
/// the recursive value parser off the end of the stack on hostile input.
const MAX_ARRAY_DEPTH: usize = 8;
/// How much of a file [`GgufFile::open`] reads first; it reads more only when the header does
/// not fit (a large vocabulary can take several MiB).
const FIRST_READ_BYTES: u64 = 1 << 20;

const MAGIC: [u8; 4] = *b"GGUF";

// GGUF metadata value type ids.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

/// The smallest encoding of one value of a type, used to refuse counts the file cannot hold
/// before allocating for them (a string is at least its 8-byte length, an array at least its
/// 4-byte element type and 8-byte count).
fn min_encoded_bytes(type_id: u32) -> Option<u64> {
    match type_id {
        T_U8 | T_I8 | T_BOOL => Some(1),
        T_U16 | T_I16 => Some(2),
        T_U32 | T_I32 | T_F32 => Some(4),
        T_U64 | T_I64 | T_F64 | T_STRING => Some(8),
        T_ARRAY => Some(12),
        _ => None,
    }
}

/// A parsed GGUF header: metadata and tensor infos, checked for consistency with the file's
/// length (every tensor in bounds, aligned, non-overlapping). It holds no tensor bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufFile {
    version: u32,
    metadata: GgufMetadata,
    tensors: Vec<GgufTensorInfo>,
    alignment_bytes: u64,
    data_offset_bytes: u64,
    file_len_bytes: u64,
}

impl GgufFile {
    /// Reads the header, metadata and tensor infos of a GGUF file, reading only as much of
    /// the file as they take (never the tensor data, never a memory map).
    pub fn open(path: &Path) -> Result<GgufFile, LoadError> {
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let file_len_bytes = file.metadata().map_err(io)?.len();
        match read_header(&mut file, file_len_bytes, FIRST_READ_BYTES) {
            Ok(gguf) => Ok(gguf),
            Err(HeaderReadError::Io(source)) => Err(io(source)),
            Err(HeaderReadError::Gguf(source)) => Err(gguf_error(path, source)),
        }
    }

    /// Parses a whole GGUF file held in memory (or mapped).
    pub fn parse(bytes: &[u8]) -> Result<GgufFile, GgufError> {
        match parse(bytes, bytes.len() as u64) {
            Ok(gguf) => Ok(gguf),
            Err(Stop::Fail(e)) => Err(e),
            // Every length is checked against the file length first, and here the buffer is
            // the whole file, so the parser never asks for more.
            Err(Stop::NeedBytes(end)) => Err(GgufError::Truncated {
                at: GgufLocation::Header,
                what: "data",
                offset: bytes.len() as u64,
                needed_bytes: end.saturating_sub(bytes.len() as u64),
                file_len_bytes: bytes.len() as u64,
            }),
        }
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn metadata(&self) -> &GgufMetadata {
        &self.metadata
    }

    pub fn into_metadata(self) -> GgufMetadata {
        self.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// `general.alignment`, or 32 when absent.
    pub fn alignment_bytes(&self) -> u64 {
        self.alignment_bytes
    }

    /// Where the data section starts: the end of the tensor infos rounded up to the alignment.
    pub fn data_offset_bytes(&self) -> u64 {
        self.data_offset_bytes
    }

    pub fn file_len_bytes(&self) -> u64 {
        self.file_len_bytes
    }
}

pub(crate) fn gguf_error(path: &Path, source: GgufError) -> LoadError {
    LoadError::Gguf {
        path: PathBuf::from(path),
        source,
    }
}

/// Why reading a header from a stream failed.
enum HeaderReadError {
    Io(std::io::Error),
    Gguf(GgufError),
}

/// Parses the header of a `file_len` byte GGUF from `reader`, reading `first_read_bytes` first
/// and more only when the header runs past what was read. The bytes held never exceed the
/// file's length (a length that runs past the file fails the parse before it is read), and
/// doubling keeps the re-parses linear in the header size.
fn read_header(
    reader: &mut impl Read,
    file_len: u64,
    first_read_bytes: u64,
) -> Result<GgufFile, HeaderReadError> {
    let mut prefix = Vec::new();
    let mut want = file_len.min(first_read_bytes.max(1));
    loop {
        let have = prefix.len() as u64;
        if want > have {
            reader
                .take(want - have)
                .read_to_end(&mut prefix)
                .map_err(HeaderReadError::Io)?;
        }
        if (prefix.len() as u64) < want {
            // The file shrank since it was measured; asking again would never end.
            return Err(HeaderReadError::Io(std::io::Error::from(
                std::io::ErrorKind::UnexpectedEof,
            )));
        }
        match parse(&prefix, file_len) {
            Ok(gguf) => return Ok(gguf),
            Err(Stop::Fail(e)) => return Err(HeaderReadError::Gguf(e)),
            Err(Stop::NeedBytes(end)) => {
                want = end
                    .max((prefix.len() as u64).saturating_mul(2))
                    .min(file_len);
            }
        }
    }
}

/// Why a parse of a prefix stopped.
enum Stop {
    /// The prefix ends before this absolute offset, which is within the file: read more.
    NeedBytes(u64),
    /// The file is malformed.
    Fail(GgufError),
}

impl From<GgufError> for Stop {
    fn from(e: GgufError) -> Stop {
        Stop::Fail(e)
    }
}

/// A little-endian reader over a prefix of a file whose full length is known. Lengths are
/// checked against the file first (a lie is an error) and then against the prefix (a longer
/// prefix is requested).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    file_len: u64,
    at: GgufLocation,
}

impl<'a> Reader<'a> {
    fn offset(&self) -> u64 {
        self.pos as u64
    }

    fn remaining_in_file(&self) -> u64 {
        self.file_len.saturating_sub(self.offset())
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], Stop> {
        if n > self.remaining_in_file() {
            return Err(Stop::Fail(GgufError::Truncated {
                at: self.at.clone(),
                what,
                offset: self.offset(),
                needed_bytes: n,
                file_len_bytes: self.file_len,
            }));
        }
        let end = self.offset() + n;
        let slice = usize::try_from(end)
            .ok()
            .and_then(|end_idx| self.buf.get(self.pos..end_idx))
            .ok_or(Stop::NeedBytes(end))?;
        self.pos += slice.len();
        Ok(slice)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], Stop> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, Stop> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, Stop> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// Refuses a count of items that cannot fit in the rest of the file.
    fn check_count(&self, count: u64, min_item_bytes: u64, what: &'static str) -> Result<(), Stop> {
        let fits = count
            .checked_mul(min_item_bytes)
            .is_some_and(|needed| needed <= self.remaining_in_file());
        if fits {
            Ok(())
        } else {
            Err(Stop::Fail(GgufError::CountTooLarge {
                at: self.at.clone(),
                what,
                count,
                offset: self.offset(),
                remaining_bytes: self.remaining_in_file(),
            }))
        }
    }

    fn str(&mut self, what: &'static str) -> Result<&'a str, Stop> {
        let len = self.u64(what)?;
        let offset = self.offset();
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|_| {
            Stop::Fail(GgufError::InvalidUtf8 {
                at: self.at.clone(),
                offset,
            })
        })
    }

    fn value(&mut self, type_id: u32, depth: usize) -> Result<MetaValue, Stop> {
        let offset = self.offset();
        Ok(match type_id {
            T_U8 => MetaValue::U8(u8::from_le_bytes(self.array("u8 value")?)),
            T_I8 => MetaValue::I8(i8::from_le_bytes(self.array("i8 value")?)),
            T_U16 => MetaValue::U16(u16::from_le_bytes(self.array("u16 value")?)),
            T_I16 => MetaValue::I16(i16::from_le_bytes(self.array("i16 value")?)),
            T_U32 => MetaValue::U32(u32::from_le_bytes(self.array("u32 value")?)),
            T_I32 => MetaValue::I32(i32::from_le_bytes(self.array("i32 value")?)),
            T_U64 => MetaValue::U64(u64::from_le_bytes(self.array("u64 value")?)),
            T_I64 => MetaValue::I64(i64::from_le_bytes(self.array("i64 value")?)),
            T_F32 => MetaValue::F32(f32::from_le_bytes(self.array("f32 value")?)),
            T_F64 => MetaValue::F64(f64::from_le_bytes(self.array("f64 value")?)),
            T_BOOL => MetaValue::Bool(self.bool()?),
            T_STRING => MetaValue::String(self.str("string value")?.to_owned()),
            T_ARRAY => MetaValue::Array(self.meta_array(depth)?),
            _ => {
                return Err(Stop::Fail(GgufError::UnknownValueType {
                    at: self.at.clone(),
                    type_id,
                    offset,
                }));
            }
        })
    }

    fn bool(&mut self) -> Result<bool, Stop> {
        let offset = self.offset();
        match self.array::<1>("bool value")? {
            [0] => Ok(false),
            [1] => Ok(true),
            [byte] => Err(Stop::Fail(GgufError::InvalidBool {
                at: self.at.clone(),
                byte,
                offset,
            })),
        }
    }

    /// Reads `count` fixed-size elements in one bounded slice.
    fn fixed<const N: usize, T>(
        &mut self,
        count: u64,
        from_le: fn([u8; N]) -> T,
    ) -> Result<Vec<T>, Stop> {
        let n_bytes = count.saturating_mul(N as u64);
        let bytes = self.take(n_bytes, "array elements")?;
        Ok(bytes
            .chunks_exact(N)
            .map(|c| {
                let mut word = [0u8; N];
                word.copy_from_slice(c);
                from_le(word)
            })
            .collect())
    }

    fn meta_array(&mut self, depth: usize) -> Result<MetaArray, Stop> {
        let type_offset = self.offset();
        let elem_type = self.u32("array element type")?;
        let count = self.u64("array length")?;
        let min_bytes = min_encoded_bytes(elem_type).ok_or_else(|| {
            Stop::Fail(GgufError::UnknownValueType {
                at: self.at.clone(),
                type_id: elem_type,
                offset: type_offset,
            })
        })?;
        self.check_count(count, min_bytes, "array element")?;
        Ok(match elem_type {
            T_U8 => MetaArray::U8(self.fixed(count, u8::from_le_bytes)?),
            T_I8 => MetaArray::I8(self.fixed(count, i8::from_le_bytes)?),
            T_U16 => MetaArray::U16(self.fixed(count, u16::from_le_bytes)?),
            T_I16 => MetaArray::I16(self.fixed(count, i16::from_le_bytes)?),
            T_U32 => MetaArray::U32(self.fixed(count, u32::from_le_bytes)?),
            T_I32 => MetaArray::I32(self.fixed(count, i32::from_le_bytes)?),
            T_U64 => MetaArray::U64(self.fixed(count, u64::from_le_bytes)?),
            T_I64 => MetaArray::I64(self.fixed(count, i64::from_le_bytes)?),
            T_F32 => MetaArray::F32(self.fixed(count, f32::from_le_bytes)?),
            T_F64 => MetaArray::F64(self.fixed(count, f64::from_le_bytes)?),
            T_BOOL => {
                let mut out = Vec::new();
                for _ in 0..count {
                    out.push(self.bool()?);
                }
                MetaArray::Bool(out)
            }
            T_STRING => {
                let mut out = Vec::new();
                for _ in 0..count {
                    out.push(self.str("string element")?.to_owned());
                }
                MetaArray::String(out)
            }
            _ => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Stop::Fail(GgufError::ArrayTooDeep {
                        at: self.at.clone(),
                        max_depth: MAX_ARRAY_DEPTH,
                    }));
                }
                let mut out = Vec::new();
                for _ in 0..count {
                    out.push(self.meta_array(depth + 1)?);
                }
                MetaArray::Array(out)
            }
        })
    }
}

/// A tensor info as the file lists it, before the data section's position is known.
struct RawTensorInfo {
    name: String,
    dims_innermost_first: Vec<u64>,
    type_id: u32,
    offset_bytes: u64,
}

fn parse(buf: &[u8], file_len: u64) -> Result<GgufFile, Stop> {
    let mut r = Reader {
        buf,
        pos: 0,
        file_len,
        at: GgufLocation::Header,
    };
    let magic = r.array::<4>("magic")?;
    if magic != MAGIC {
        return Err(Stop::Fail(GgufError::BadMagic { magic }));
    }
    let version = r.u32("version")?;
    if version & 0xFFFF == 0 && version != 0 {
        return Err(Stop::Fail(GgufError::BigEndian {
            swapped_version: version.swap_bytes(),
        }));
    }
    if version != 2 && version != 3 {
        return Err(Stop::Fail(GgufError::UnsupportedVersion { version }));
    }
    let tensor_count = r.u64("tensor count")?;
    let kv_count = r.u64("metadata count")?;
    // A metadata entry is at least an 8-byte key length, a 4-byte type and a 1-byte value.
    r.check_count(kv_count, 13, "metadata entry")?;

    let mut metadata = GgufMetadata::default();
    for index in 0..kv_count {
        r.at = GgufLocation::MetadataKey { index };
        let key = r.str("metadata key")?;
        let type_offset = r.offset();
        let type_id = r.u32("metadata value type")?;
        r.at = GgufLocation::MetadataValue {
            key: key.to_owned(),
        };
        if min_encoded_bytes(type_id).is_none() {
            return Err(Stop::Fail(GgufError::UnknownValueType {
                at: r.at.clone(),
                type_id,
                offset: type_offset,
            }));
        }
        let value = r.value(type_id, 0)?;
        if !metadata.insert(key.to_owned(), value) {
            return Err(Stop::Fail(GgufError::DuplicateKey {
                key: key.to_owned(),
            }));
        }
    }

    // A tensor info is at least an 8-byte name length, a 4-byte rank, a 4-byte type and an
    // 8-byte offset.
    r.at = GgufLocation::Header;
    r.check_count(tensor_count, 24, "tensor info")?;
    let mut raw = Vec::new();
    for index in 0..tensor_count {
        r.at = GgufLocation::TensorInfo { index };
        let name = r.str("tensor name")?.to_owned();
        let n_dims = r.u32("tensor rank")?;
        if n_dims > MAX_DIMS {
            return Err(Stop::Fail(GgufError::TooManyDims {
                tensor: name,
                n_dims,
                max_dims: MAX_DIMS,
            }));
        }
        let mut dims_innermost_first = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims_innermost_first.push(r.u64("tensor dimension")?);
        }
        let type_id = r.u32("tensor type")?;
        let offset_bytes = r.u64("tensor data offset")?;
        raw.push(RawTensorInfo {
            name,
            dims_innermost_first,
            type_id,
            offset_bytes,
        });
    }

    let alignment_bytes = alignment(&metadata)?;
    let data_offset_bytes = r.offset().div_ceil(alignment_bytes) * alignment_bytes;
    let tensors = tensor_infos(raw, alignment_bytes, data_offset_bytes, file_len)?;
    Ok(GgufFile {
        version,
        metadata,
        tensors,
        alignment_bytes,
        data_offset_bytes,
        file_len_bytes: file_len,
    })
}

fn alignment(metadata: &GgufMetadata) -> Result<u64, GgufError> {
    match metadata.get("general.alignment") {
        None => Ok(GGUF_DEFAULT_ALIGNMENT_BYTES),
        Some(MetaValue::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some(MetaValue::U32(a)) => Err(GgufError::AlignmentValue {
            alignment_bytes: *a,
        }),
        Some(other) => Err(GgufError::AlignmentType {
            found: other.type_name(),
        }),
    }
}

fn tensor_infos(
    raw: Vec<RawTensorInfo>,
    alignment_bytes: u64,
    data_offset_bytes: u64,
    file_len: u64,
) -> Result<Vec<GgufTensorInfo>, GgufError> {
    let mut names = std::collections::HashSet::new();
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        if !names.insert(t.name.clone()) {
            return Err(GgufError::DuplicateTensor { tensor: t.name });
        }
        let ggml_type = GgmlType::from_id(t.type_id).ok_or_else(|| GgufError::UnknownGgmlType {
            tensor: t.name.clone(),
            type_id: t.type_id,
        })?;
        let overflow = || GgufError::SizeOverflow {
            tensor: t.name.clone(),
            dims_innermost_first: t.dims_innermost_first.clone(),
        };
        let n_elems = checked_n_elems(&t.dims_innermost_first).ok_or_else(overflow)?;
        let block_elems = ggml_type.block_elems() as u64;
        let row_elems = t.dims_innermost_first.first().copied().unwrap_or(1);
        if row_elems % block_elems != 0 {
            return Err(GgufError::PartialBlock {
                tensor: t.name,
                ggml_type,
                row_elems,
                block_elems,
            });
        }
        let size_bytes = ggml_type.bytes_for(n_elems).ok_or_else(overflow)?;
        if t.offset_bytes % alignment_bytes != 0 {
            return Err(GgufError::MisalignedTensor {
                tensor: t.name,
                offset_bytes: t.offset_bytes,
                alignment_bytes,
            });
        }
        let start = data_offset_bytes.checked_add(t.offset_bytes);
        let end = start.and_then(|s| s.checked_add(size_bytes));
        let (start, end) = match (start, end) {
            (Some(s), Some(e)) if e <= file_len => (s, e),
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name,
                    start_bytes: data_offset_bytes.saturating_add(t.offset_bytes),
                    end_bytes: data_offset_bytes
                        .saturating_add(t.offset_bytes)
                        .saturating_add(size_bytes),
                    file_len_bytes: file_len,
                });
            }
        };
        let mut shape = t.dims_innermost_first;
        shape.reverse();
        tensors.push(GgufTensorInfo {
            name: t.name,
            shape,
            ggml_type,
            data_offset_bytes: t.offset_bytes,
            file_range: start..end,
        });
    }
    check_no_overlap(&tensors)?;
    Ok(tensors)
}

fn check_no_overlap(tensors: &[GgufTensorInfo]) -> Result<(), GgufError> {
    let mut by_start: Vec<&GgufTensorInfo> =
        tensors.iter().filter(|t| t.size_bytes() > 0).collect();
    by_start.sort_by_key(|t| t.file_range.start);
    for pair in by_start.windows(2) {
        if let [a, b] = pair
            && b.file_range.start < a.file_range.end
        {
            return Err(GgufError::TensorOverlap {
                first: a.name.clone(),
                second: b.name.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(bytes: &[u8], first_read_bytes: u64) -> Result<GgufFile, GgufError> {
        match read_header(
            &mut std::io::Cursor::new(bytes),
            bytes.len() as u64,
            first_read_bytes,
        ) {
            Ok(g) => Ok(g),
            Err(HeaderReadError::Gguf(e)) => Err(e),
            Err(HeaderReadError::Io(e)) => panic!("an in-memory read failed: {e}"),
        }
    }

    /// Reading the header in small steps gives exactly what parsing the whole file gives, for
    /// the whole file and every truncation of it.
    #[test]
    fn stepwise_header_reads_agree_with_whole_file_parses() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/synthetic/all_types.gguf");
        let bytes = std::fs::read(path).expect("fixture");
        for first in [1, 7, 100, 4096] {
            assert_eq!(header_of(&bytes, first), GgufFile::parse(&bytes));
        }
        for cut in (0..bytes.len()).step_by(13) {
            let prefix = &bytes[..cut];
            assert_eq!(header_of(prefix, 5), GgufFile::parse(prefix), "cut {cut}");
        }
    }
}
