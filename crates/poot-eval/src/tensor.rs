//! Host tensors: a [`TensorType`] and its elements, borrowed (a memory-mapped weight) or owned.

use std::borrow::Cow;

use half::{bf16, f16};
use poot_graph_ir::{ComponentFormat, DType, GgmlType, Shape, TensorType};

use crate::packed::{self, DecodeError};

/// One component of a component-format tensor: its role (`qweight`) and stored bytes.
pub type Component<'a> = (String, Cow<'a, [u8]>);

/// The elements of a host tensor, one variant per element type, row-major.
///
/// Dense data is held as typed words. Little-endian bytes handed to
/// [`HostTensor::from_le_bytes`] are borrowed in place when they are suitably aligned (and the
/// host is little-endian) and copied into words otherwise, so an unaligned memory-mapped f32
/// table still binds. `Packed` data is whole ggml blocks as stored, rows along the last axis;
/// `Components` data is the component tensors of a component-format weight, by role, as stored.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData<'a> {
    F32(Cow<'a, [f32]>),
    F16(Cow<'a, [f16]>),
    BF16(Cow<'a, [bf16]>),
    I32(Cow<'a, [i32]>),
    U32(Cow<'a, [u32]>),
    U8(Cow<'a, [u8]>),
    Bool(Cow<'a, [bool]>),
    Packed(Cow<'a, [u8]>),
    /// Each component's role (`qweight`) and stored bytes, in the format's order.
    Components(Vec<Component<'a>>),
}

impl<'a> TensorData<'a> {
    /// The element type name of this variant (`packed` for any block format).
    pub fn kind_name(&self) -> &'static str {
        match self {
            TensorData::F32(_) => "f32",
            TensorData::F16(_) => "f16",
            TensorData::BF16(_) => "bf16",
            TensorData::I32(_) => "i32",
            TensorData::U32(_) => "u32",
            TensorData::U8(_) => "u8",
            TensorData::Bool(_) => "bool",
            TensorData::Packed(_) => "packed",
            TensorData::Components(_) => "components",
        }
    }

    /// Elements for dense data, bytes for packed data (every component's together).
    pub fn len(&self) -> usize {
        match self {
            TensorData::F32(v) => v.len(),
            TensorData::F16(v) => v.len(),
            TensorData::BF16(v) => v.len(),
            TensorData::I32(v) => v.len(),
            TensorData::U32(v) => v.len(),
            TensorData::U8(v) | TensorData::Packed(v) => v.len(),
            TensorData::Bool(v) => v.len(),
            TensorData::Components(parts) => parts.iter().map(|(_, b)| b.len()).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether this variant can hold values of `dtype`.
    pub fn holds(&self, dtype: DType) -> bool {
        matches!(
            (self, dtype),
            (TensorData::F32(_), DType::F32)
                | (TensorData::F16(_), DType::F16)
                | (TensorData::BF16(_), DType::BF16)
                | (TensorData::I32(_), DType::I32)
                | (TensorData::U32(_), DType::U32)
                | (TensorData::U8(_), DType::U8)
                | (TensorData::Bool(_), DType::Bool)
                | (TensorData::Packed(_), DType::Packed(_))
                | (TensorData::Components(_), DType::Components(_))
        )
    }

    /// A borrowed view of the same elements.
    pub fn view(&self) -> TensorData<'_> {
        match self {
            TensorData::F32(v) => TensorData::F32(Cow::Borrowed(v)),
            TensorData::F16(v) => TensorData::F16(Cow::Borrowed(v)),
            TensorData::BF16(v) => TensorData::BF16(Cow::Borrowed(v)),
            TensorData::I32(v) => TensorData::I32(Cow::Borrowed(v)),
            TensorData::U32(v) => TensorData::U32(Cow::Borrowed(v)),
            TensorData::U8(v) => TensorData::U8(Cow::Borrowed(v)),
            TensorData::Bool(v) => TensorData::Bool(Cow::Borrowed(v)),
            TensorData::Packed(v) => TensorData::Packed(Cow::Borrowed(v)),
            TensorData::Components(parts) => TensorData::Components(
                parts
                    .iter()
                    .map(|(n, b)| (n.clone(), Cow::Borrowed(&b[..])))
                    .collect(),
            ),
        }
    }

    /// The same elements, owned (copies only what was borrowed).
    pub fn into_owned(self) -> TensorData<'static> {
        match self {
            TensorData::F32(v) => TensorData::F32(Cow::Owned(v.into_owned())),
            TensorData::F16(v) => TensorData::F16(Cow::Owned(v.into_owned())),
            TensorData::BF16(v) => TensorData::BF16(Cow::Owned(v.into_owned())),
            TensorData::I32(v) => TensorData::I32(Cow::Owned(v.into_owned())),
            TensorData::U32(v) => TensorData::U32(Cow::Owned(v.into_owned())),
            TensorData::U8(v) => TensorData::U8(Cow::Owned(v.into_owned())),
            TensorData::Bool(v) => TensorData::Bool(Cow::Owned(v.into_owned())),
            TensorData::Packed(v) => TensorData::Packed(Cow::Owned(v.into_owned())),
            TensorData::Components(parts) => TensorData::Components(
                parts
                    .into_iter()
                    .map(|(n, b)| (n, Cow::Owned(b.into_owned())))
                    .collect(),
            ),
        }
    }
}

/// Why a host tensor could not be built or read as asked.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// The data holds another element type than the tensor type names. Build the data for the
    /// type's dtype (or use [`HostTensor::from_le_bytes`]).
    #[error("a {ty} tensor cannot hold {data} data")]
    DataKind { ty: TensorType, data: &'static str },
    /// The data has a different element count than the shape needs.
    #[error("a {ty} tensor needs {expected} elements, got {found}")]
    ElemCount {
        ty: TensorType,
        expected: usize,
        found: usize,
    },
    /// Raw bytes whose length is not what the type occupies as stored.
    #[error("a {ty} tensor occupies {expected_bytes} bytes as stored, got {found_bytes}")]
    ByteLength {
        ty: TensorType,
        expected_bytes: u64,
        found_bytes: usize,
    },
    /// The type has no stored size: its element count overflows, or a packed shape is not whole
    /// blocks along its last axis.
    #[error("a {ty} tensor has no stored size (element count overflow, or not whole blocks)")]
    Unsized { ty: TensorType },
    /// A bool tensor's byte is neither 0 nor 1.
    #[error("bool element {index} is stored as byte {byte}, expected 0 or 1")]
    NotBool { index: usize, byte: u8 },
    /// A typed accessor was called on a tensor of another type. Cast in the graph, or use
    /// [`HostTensor::to_f32_vec`].
    #[error("asked for {requested} elements of a {found} tensor")]
    Access {
        requested: &'static str,
        found: DType,
    },
    /// A component-format tensor's components are not exactly the ones its format stores for
    /// its shape (one missing, one extra, or one of another size).
    #[error("a {ty} tensor stores components {expected:?}, got {found:?}")]
    Components {
        ty: TensorType,
        /// Each component the type needs: its role and bytes.
        expected: Vec<(String, usize)>,
        found: Vec<(String, usize)>,
    },
    /// A packed tensor that could not be decoded to f32.
    #[error("cannot decode a packed {ty} tensor: {source}")]
    Decode { ty: TensorType, source: DecodeError },
}

/// A tensor on the host: its type and its elements.
///
/// The data always agrees with the type: the right variant for the dtype and exactly the
/// shape's element count (or stored byte size for a packed type). Every constructor checks it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor<'a> {
    ty: TensorType,
    data: TensorData<'a>,
}

impl<'a> HostTensor<'a> {
    /// Pairs a type with its data, checking that they agree.
    pub fn new(ty: TensorType, data: TensorData<'a>) -> Result<HostTensor<'a>, TensorError> {
        if !data.holds(ty.dtype) {
            return Err(TensorError::DataKind {
                ty,
                data: data.kind_name(),
            });
        }
        match (ty.dtype, &data) {
            (DType::Components(format), TensorData::Components(parts)) => {
                let expected: Vec<(String, usize)> = format
                    .components(ty.dims())
                    .map_err(|_| TensorError::Unsized { ty: ty.clone() })?
                    .iter()
                    .map(|c| (c.name.to_string(), c.n_bytes().unwrap_or(usize::MAX)))
                    .collect();
                let found: Vec<(String, usize)> =
                    parts.iter().map(|(n, b)| (n.clone(), b.len())).collect();
                if expected != found {
                    return Err(TensorError::Components {
                        ty,
                        expected,
                        found,
                    });
                }
            }
            (DType::Packed(_), _) => {
                let expected_bytes = ty
                    .size_bytes()
                    .ok_or_else(|| TensorError::Unsized { ty: ty.clone() })?;
                if expected_bytes != data.len() as u64 {
                    return Err(TensorError::ByteLength {
                        ty,
                        expected_bytes,
                        found_bytes: data.len(),
                    });
                }
            }
            (_, _) => {
                let expected = ty
                    .shape
                    .n_elems()
                    .ok_or_else(|| TensorError::Unsized { ty: ty.clone() })?;
                if expected != data.len() {
                    return Err(TensorError::ElemCount {
                        ty,
                        expected,
                        found: data.len(),
                    });
                }
            }
        }
        Ok(HostTensor { ty, data })
    }

    pub fn f32(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [f32]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::F32, shape),
            TensorData::F32(v.into()),
        )
    }

    pub fn f16(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [f16]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::F16, shape),
            TensorData::F16(v.into()),
        )
    }

    pub fn bf16(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [bf16]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::BF16, shape),
            TensorData::BF16(v.into()),
        )
    }

    pub fn i32(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [i32]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::I32, shape),
            TensorData::I32(v.into()),
        )
    }

    pub fn u32(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [u32]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::U32, shape),
            TensorData::U32(v.into()),
        )
    }

    pub fn u8(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [u8]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(TensorType::new(DType::U8, shape), TensorData::U8(v.into()))
    }

    pub fn bool(
        shape: impl Into<Shape>,
        v: impl Into<Cow<'a, [bool]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::Bool, shape),
            TensorData::Bool(v.into()),
        )
    }

    /// A packed tensor from its stored ggml blocks (rows along the last axis).
    pub fn packed(
        format: GgmlType,
        shape: impl Into<Shape>,
        bytes: impl Into<Cow<'a, [u8]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::Packed(format), shape),
            TensorData::Packed(bytes.into()),
        )
    }

    /// A component-format weight from its component tensors' stored bytes, by role, in the
    /// format's order ([`poot_graph_ir::ComponentFormat::components`]).
    pub fn components(
        format: ComponentFormat,
        shape: impl Into<Shape>,
        parts: Vec<Component<'a>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(
            TensorType::new(DType::Components(format), shape),
            TensorData::Components(parts),
        )
    }

    /// A tensor of any type from its little-endian stored bytes (a checkpoint's bytes, a device
    /// readback). Borrowed bytes stay borrowed where they are aligned for the element type on a
    /// little-endian host; otherwise the words are copied out. Bool bytes must be 0 or 1. A
    /// component-format type reads its components back to back in the format's order (what
    /// [`HostTensor::to_le_bytes`] writes).
    pub fn from_le_bytes(
        ty: TensorType,
        bytes: impl Into<Cow<'a, [u8]>>,
    ) -> Result<HostTensor<'a>, TensorError> {
        let bytes = bytes.into();
        let expected_bytes = ty
            .size_bytes()
            .ok_or_else(|| TensorError::Unsized { ty: ty.clone() })?;
        if expected_bytes != bytes.len() as u64 {
            return Err(TensorError::ByteLength {
                ty,
                expected_bytes,
                found_bytes: bytes.len(),
            });
        }
        let data = match ty.dtype {
            DType::F32 => TensorData::F32(words(bytes)),
            DType::F16 => TensorData::F16(words(bytes)),
            DType::BF16 => TensorData::BF16(words(bytes)),
            DType::I32 => TensorData::I32(words(bytes)),
            DType::U32 => TensorData::U32(words(bytes)),
            DType::U8 => TensorData::U8(bytes),
            DType::Bool => TensorData::Bool(bools(bytes)?),
            DType::Packed(_) => TensorData::Packed(bytes),
            DType::Components(format) => {
                let specs = format
                    .components(ty.dims())
                    .map_err(|_| TensorError::Unsized { ty: ty.clone() })?;
                let mut parts = Vec::with_capacity(specs.len());
                let mut at = 0usize;
                for c in specs {
                    let n = c.n_bytes().unwrap_or(usize::MAX);
                    let end = at.saturating_add(n).min(bytes.len());
                    let part = match &bytes {
                        Cow::Borrowed(b) => Cow::Borrowed(&b[at..end]),
                        Cow::Owned(b) => Cow::Owned(b[at..end].to_vec()),
                    };
                    parts.push((c.name.to_string(), part));
                    at = end;
                }
                TensorData::Components(parts)
            }
        };
        HostTensor::new(ty, data)
    }

    pub fn ty(&self) -> &TensorType {
        &self.ty
    }

    pub fn dtype(&self) -> DType {
        self.ty.dtype
    }

    pub fn dims(&self) -> &[usize] {
        self.ty.dims()
    }

    pub fn data(&self) -> &TensorData<'a> {
        &self.data
    }

    pub fn into_data(self) -> TensorData<'a> {
        self.data
    }

    /// Whether the elements are borrowed rather than owned.
    pub fn is_borrowed(&self) -> bool {
        match &self.data {
            TensorData::F32(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::F16(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::BF16(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::I32(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::U32(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::U8(v) | TensorData::Packed(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::Bool(v) => matches!(v, Cow::Borrowed(_)),
            TensorData::Components(parts) => {
                parts.iter().all(|(_, b)| matches!(b, Cow::Borrowed(_)))
            }
        }
    }

    pub fn as_f32(&self) -> Result<&[f32], TensorError> {
        match &self.data {
            TensorData::F32(v) => Ok(v),
            _ => Err(self.access("f32")),
        }
    }

    pub fn as_f16(&self) -> Result<&[f16], TensorError> {
        match &self.data {
            TensorData::F16(v) => Ok(v),
            _ => Err(self.access("f16")),
        }
    }

    pub fn as_bf16(&self) -> Result<&[bf16], TensorError> {
        match &self.data {
            TensorData::BF16(v) => Ok(v),
            _ => Err(self.access("bf16")),
        }
    }

    pub fn as_i32(&self) -> Result<&[i32], TensorError> {
        match &self.data {
            TensorData::I32(v) => Ok(v),
            _ => Err(self.access("i32")),
        }
    }

    pub fn as_u32(&self) -> Result<&[u32], TensorError> {
        match &self.data {
            TensorData::U32(v) => Ok(v),
            _ => Err(self.access("u32")),
        }
    }

    pub fn as_u8(&self) -> Result<&[u8], TensorError> {
        match &self.data {
            TensorData::U8(v) => Ok(v),
            _ => Err(self.access("u8")),
        }
    }

    pub fn as_bool(&self) -> Result<&[bool], TensorError> {
        match &self.data {
            TensorData::Bool(v) => Ok(v),
            _ => Err(self.access("bool")),
        }
    }

    /// The stored blocks of a packed tensor.
    pub fn as_packed(&self) -> Result<&[u8], TensorError> {
        match &self.data {
            TensorData::Packed(v) => Ok(v),
            _ => Err(self.access("packed")),
        }
    }

    /// The components of a component-format tensor, by role, as stored.
    pub fn as_components(&self) -> Result<&[Component<'a>], TensorError> {
        match &self.data {
            TensorData::Components(parts) => Ok(parts),
            _ => Err(self.access("components")),
        }
    }

    /// The elements as f32: floats widen exactly, integers round to nearest, bools are 0 or 1,
    /// and packed blocks and components are decoded.
    pub fn to_f32_vec(&self) -> Result<Vec<f32>, TensorError> {
        Ok(match &self.data {
            TensorData::F32(v) => v.to_vec(),
            TensorData::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            TensorData::BF16(v) => v.iter().map(|x| x.to_f32()).collect(),
            TensorData::I32(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::U32(v) => v.iter().map(|&x| x as f32).collect(),
            TensorData::U8(v) => v.iter().map(|&x| f32::from(x)).collect(),
            TensorData::Bool(v) => v.iter().map(|&x| if x { 1.0 } else { 0.0 }).collect(),
            TensorData::Packed(bytes) => {
                let DType::Packed(format) = self.ty.dtype else {
                    return Err(self.access("packed"));
                };
                let n = self
                    .ty
                    .shape
                    .n_elems()
                    .ok_or_else(|| TensorError::Unsized {
                        ty: self.ty.clone(),
                    })?;
                let mut out = vec![0.0; n];
                packed::decode(format, bytes, &mut out).map_err(|source| TensorError::Decode {
                    ty: self.ty.clone(),
                    source,
                })?;
                out
            }
            TensorData::Components(parts) => {
                let (DType::Components(format), &[n, k]) = (self.ty.dtype, self.dims()) else {
                    return Err(self.access("components"));
                };
                let mut out = vec![0.0; n.saturating_mul(k)];
                if k > 0 {
                    for (row, dst) in out.chunks_exact_mut(k).enumerate() {
                        packed::decode_components_row(
                            format,
                            poot_formats::MatrixShape::new(n, k),
                            parts,
                            row,
                            dst,
                        )
                        .map_err(|source| TensorError::Decode {
                            ty: self.ty.clone(),
                            source,
                        })?;
                    }
                }
                out
            }
        })
    }

    /// The elements as stored little-endian bytes (what [`HostTensor::from_le_bytes`] reads).
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match &self.data {
            TensorData::F32(v) => le_bytes(v),
            TensorData::F16(v) => le_bytes(v),
            TensorData::BF16(v) => le_bytes(v),
            TensorData::I32(v) => le_bytes(v),
            TensorData::U32(v) => le_bytes(v),
            TensorData::U8(v) | TensorData::Packed(v) => v.to_vec(),
            TensorData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
            TensorData::Components(parts) => {
                parts.iter().flat_map(|(_, b)| b.iter()).copied().collect()
            }
        }
    }

    /// A borrowed view of this tensor.
    pub fn view(&self) -> HostTensor<'_> {
        HostTensor {
            ty: self.ty.clone(),
            data: self.data.view(),
        }
    }

    /// The same tensor, owning its elements.
    pub fn into_owned(self) -> HostTensor<'static> {
        HostTensor {
            ty: self.ty,
            data: self.data.into_owned(),
        }
    }

    /// The same elements under another type with the same dtype and element count (a reshape).
    pub fn retyped(self, ty: TensorType) -> Result<HostTensor<'a>, TensorError> {
        HostTensor::new(ty, self.data)
    }

    fn access(&self, requested: &'static str) -> TensorError {
        TensorError::Access {
            requested,
            found: self.ty.dtype,
        }
    }
}

/// A fixed-width element stored little-endian.
trait Word: bytemuck::Pod {
    /// Converts between little-endian and native order (an involution: the identity on a
    /// little-endian host, a byte swap on a big-endian one).
    fn swap_le(self) -> Self;
}

impl Word for f32 {
    fn swap_le(self) -> f32 {
        f32::from_bits(u32::from_le(self.to_bits()))
    }
}

impl Word for i32 {
    fn swap_le(self) -> i32 {
        i32::from_le(self)
    }
}

impl Word for u32 {
    fn swap_le(self) -> u32 {
        u32::from_le(self)
    }
}

impl Word for f16 {
    fn swap_le(self) -> f16 {
        f16::from_bits(u16::from_le(self.to_bits()))
    }
}

impl Word for bf16 {
    fn swap_le(self) -> bf16 {
        bf16::from_bits(u16::from_le(self.to_bits()))
    }
}

fn words<T: Word>(bytes: Cow<'_, [u8]>) -> Cow<'_, [T]> {
    if cfg!(target_endian = "little")
        && let Cow::Borrowed(b) = bytes
        && let Ok(typed) = bytemuck::try_cast_slice::<u8, T>(b)
    {
        return Cow::Borrowed(typed);
    }
    Cow::Owned(
        bytes
            .chunks_exact(size_of::<T>())
            .map(|c| bytemuck::pod_read_unaligned::<T>(c).swap_le())
            .collect(),
    )
}

fn bools(bytes: Cow<'_, [u8]>) -> Result<Cow<'_, [bool]>, TensorError> {
    if let Some((index, &byte)) = bytes.iter().enumerate().find(|(_, b)| **b > 1) {
        return Err(TensorError::NotBool { index, byte });
    }
    Ok(match bytes {
        Cow::Borrowed(b) => match bytemuck::checked::try_cast_slice::<u8, bool>(b) {
            Ok(v) => Cow::Borrowed(v),
            Err(_) => Cow::Owned(b.iter().map(|&x| x == 1).collect()),
        },
        Cow::Owned(b) => Cow::Owned(b.iter().map(|&x| x == 1).collect()),
    })
}

fn le_bytes<T: Word>(v: &[T]) -> Vec<u8> {
    let mut out = Vec::with_capacity(std::mem::size_of_val(v));
    for &x in v {
        out.extend_from_slice(bytemuck::bytes_of(&x.swap_le()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unaligned_bytes_are_copied_and_aligned_bytes_borrowed() {
        let vals = [1.5f32, -2.0, 3.25];
        let mut buf = [0u8; 13];
        for (i, v) in vals.iter().enumerate() {
            buf[1 + 4 * i..5 + 4 * i].copy_from_slice(&v.to_le_bytes());
        }
        let ty = TensorType::new(DType::F32, [3]);
        let unaligned = HostTensor::from_le_bytes(ty.clone(), &buf[1..]).unwrap();
        assert_eq!(unaligned.as_f32().unwrap(), &vals);
        let aligned: &[u8] = bytemuck::cast_slice(&vals);
        let t = HostTensor::from_le_bytes(ty, aligned).unwrap();
        assert!(t.is_borrowed());
        assert_eq!(t.to_le_bytes(), aligned);
    }

    #[test]
    fn constructors_check_counts_and_kinds() {
        assert!(matches!(
            HostTensor::f32([2, 2], vec![0.0; 3]),
            Err(TensorError::ElemCount {
                expected: 4,
                found: 3,
                ..
            })
        ));
        let err = HostTensor::new(
            TensorType::new(DType::I32, [1]),
            TensorData::F32(vec![0.0].into()),
        );
        assert!(matches!(
            err,
            Err(TensorError::DataKind { data: "f32", .. })
        ));
        let t = HostTensor::i32([2], vec![1, 2]).unwrap();
        assert!(matches!(
            t.as_f32(),
            Err(TensorError::Access {
                requested: "f32",
                found: DType::I32
            })
        ));
        let bad = HostTensor::from_le_bytes(TensorType::new(DType::Bool, [2]), vec![1u8, 2]);
        assert_eq!(bad, Err(TensorError::NotBool { index: 1, byte: 2 }));
        let short = HostTensor::from_le_bytes(TensorType::new(DType::F16, [2]), vec![0u8; 3]);
        assert!(matches!(
            short,
            Err(TensorError::ByteLength {
                expected_bytes: 4,
                found_bytes: 3,
                ..
            })
        ));
        let blocks = HostTensor::packed(GgmlType::Q8_0, [1, 31], vec![0u8; 34]);
        assert!(matches!(blocks, Err(TensorError::Unsized { .. })));
    }
}
