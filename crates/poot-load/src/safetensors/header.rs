use std::collections::BTreeMap;
use std::ops::Range;

use poot_formats::DenseType;
use serde_json::Value;

use super::error::SafetensorsError;
use crate::json_object::ObjectEntries;
use crate::shape::checked_n_elems;

/// The header length limit of the reference implementation (the `safetensors` crate): a larger
/// header is refused before it is read.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// One tensor as a safetensors header describes it. The shape is outermost-first (row-major),
/// as the format stores it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsTensorInfo {
    pub name: String,
    pub dtype: DenseType,
    pub shape: Vec<u64>,
    /// Where the tensor's bytes are in the file (absolute offsets).
    pub file_range: Range<u64>,
}

/// A parsed and checked safetensors header: every tensor's dtype known, its byte length equal
/// to its shape's element count times the dtype size, and the tensors tiling the data section
/// exactly (in bounds, no overlap, no hole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsHeader {
    /// `__metadata__`, when present.
    pub metadata: BTreeMap<String, String>,
    /// In header order.
    pub tensors: Vec<SafetensorsTensorInfo>,
    /// Where the data section starts (8 + the header length).
    pub data_offset_bytes: u64,
}

impl SafetensorsHeader {
    /// Parses the header of a whole safetensors file held in memory (or mapped).
    pub fn parse(file: &[u8]) -> Result<SafetensorsHeader, SafetensorsError> {
        let file_len = file.len() as u64;
        let (len_field, rest) =
            file.split_first_chunk::<8>()
                .ok_or(SafetensorsError::Truncated {
                    file_len_bytes: file_len,
                })?;
        let header_len = u64::from_le_bytes(*len_field);
        if header_len > MAX_HEADER_BYTES {
            return Err(SafetensorsError::HeaderTooLarge {
                header_len_bytes: header_len,
                max_bytes: MAX_HEADER_BYTES,
            });
        }
        let header_bytes = usize::try_from(header_len)
            .ok()
            .and_then(|n| rest.get(..n))
            .ok_or(SafetensorsError::HeaderPastEnd {
                header_len_bytes: header_len,
                available_bytes: rest.len() as u64,
            })?;
        let data_offset_bytes = 8 + header_len;
        let data_len = file_len - data_offset_bytes;

        let entries = ObjectEntries::parse(header_bytes)
            .map_err(|source| SafetensorsError::HeaderJson { source })?;
        if let Some(tensor) = entries.first_repeated_key() {
            return Err(SafetensorsError::DuplicateTensor {
                tensor: tensor.to_owned(),
            });
        }
        let mut metadata = BTreeMap::new();
        let mut tensors = Vec::with_capacity(entries.0.len());
        for (name, value) in entries.0 {
            if name == "__metadata__" {
                metadata = parse_metadata(value)?;
                continue;
            }
            let (dtype, shape, begin, end) = parse_entry(&name, &value)?;
            if begin > end {
                return Err(SafetensorsError::OffsetsReversed {
                    tensor: name,
                    begin_bytes: begin,
                    end_bytes: end,
                });
            }
            if end > data_len {
                return Err(SafetensorsError::OutOfBounds {
                    tensor: name,
                    end_bytes: end,
                    data_len_bytes: data_len,
                });
            }
            let expected_bytes = checked_n_elems(&shape)
                .and_then(|n| n.checked_mul(dtype.size_bytes() as u64))
                .ok_or_else(|| SafetensorsError::SizeOverflow {
                    tensor: name.clone(),
                    shape: shape.clone(),
                })?;
            if expected_bytes != end - begin {
                return Err(SafetensorsError::LengthMismatch {
                    tensor: name,
                    dtype,
                    shape,
                    expected_bytes,
                    actual_bytes: end - begin,
                });
            }
            tensors.push(SafetensorsTensorInfo {
                name,
                dtype,
                shape,
                file_range: data_offset_bytes + begin..data_offset_bytes + end,
            });
        }
        check_tiling(&tensors, data_offset_bytes, file_len)?;
        Ok(SafetensorsHeader {
            metadata,
            tensors,
            data_offset_bytes,
        })
    }
}

fn parse_metadata(value: Value) -> Result<BTreeMap<String, String>, SafetensorsError> {
    let Value::Object(map) = value else {
        return Err(SafetensorsError::MetadataEntry {
            key: "__metadata__".to_owned(),
        });
    };
    map.into_iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s)),
            _ => Err(SafetensorsError::MetadataEntry { key: k }),
        })
        .collect()
}

fn parse_entry(
    name: &str,
    value: &Value,
) -> Result<(DenseType, Vec<u64>, u64, u64), SafetensorsError> {
    let field = |field: &'static str, expected: &'static str| SafetensorsError::EntryField {
        tensor: name.to_owned(),
        field,
        expected,
    };
    let dtype_name = value
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| field("dtype", "a string"))?;
    let dtype =
        DenseType::from_safetensors(dtype_name).ok_or_else(|| SafetensorsError::UnknownDtype {
            tensor: name.to_owned(),
            dtype: dtype_name.to_owned(),
        })?;
    let shape = value
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|dims| dims.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .ok_or_else(|| field("shape", "an array of non-negative integers"))?;
    let offsets = value
        .get("data_offsets")
        .and_then(Value::as_array)
        .and_then(|o| o.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>());
    let Some([begin, end]) = offsets.as_deref() else {
        return Err(field("data_offsets", "two non-negative integers"));
    };
    Ok((dtype, shape, *begin, *end))
}

/// The tensors must cover the data section exactly, as the format requires.
fn check_tiling(
    tensors: &[SafetensorsTensorInfo],
    data_offset_bytes: u64,
    file_len: u64,
) -> Result<(), SafetensorsError> {
    let mut order: Vec<&SafetensorsTensorInfo> = tensors.iter().collect();
    order.sort_by_key(|t| (t.file_range.start, t.file_range.end));
    let mut covered_to = data_offset_bytes;
    let mut previous: Option<&SafetensorsTensorInfo> = None;
    for t in order {
        if t.file_range.start > covered_to {
            return Err(SafetensorsError::Hole {
                start_bytes: covered_to - data_offset_bytes,
                end_bytes: t.file_range.start - data_offset_bytes,
            });
        }
        if let Some(p) = previous
            && t.file_range.start < covered_to
            && !t.file_range.is_empty()
        {
            return Err(SafetensorsError::Overlap {
                first: p.name.clone(),
                second: t.name.clone(),
            });
        }
        if t.file_range.end > covered_to {
            covered_to = t.file_range.end;
            previous = Some(t);
        }
    }
    if covered_to < file_len {
        return Err(SafetensorsError::Hole {
            start_bytes: covered_to - data_offset_bytes,
            end_bytes: file_len - data_offset_bytes,
        });
    }
    Ok(())
}
