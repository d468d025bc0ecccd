use std::borrow::Cow;
use std::collections::HashMap;

use crate::LoadError;

/// One GGUF metadata value, typed exactly as the file stores it.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(MetaArray),
}

/// A GGUF metadata array. GGUF arrays are homogeneous, so each element type is its own vector;
/// an array of arrays holds inner arrays that may each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum MetaArray {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<MetaArray>),
}

impl MetaValue {
    /// The GGUF name of this value's type, for error messages ("u32", "array of string").
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "u8",
            MetaValue::I8(_) => "i8",
            MetaValue::U16(_) => "u16",
            MetaValue::I16(_) => "i16",
            MetaValue::U32(_) => "u32",
            MetaValue::I32(_) => "i32",
            MetaValue::U64(_) => "u64",
            MetaValue::I64(_) => "i64",
            MetaValue::F32(_) => "f32",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::String(_) => "string",
            MetaValue::Array(a) => a.type_name(),
        }
    }

    /// The value as an integer when it is one of the integer types (booleans are not integers).
    pub fn as_integer(&self) -> Option<i128> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::I8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::I16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::I32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v.into()),
            MetaValue::I64(v) => Some(v.into()),
            _ => None,
        }
    }
}

impl MetaArray {
    /// Number of elements (inner arrays count as one element each).
    pub fn len(&self) -> usize {
        match self {
            MetaArray::U8(v) => v.len(),
            MetaArray::I8(v) => v.len(),
            MetaArray::U16(v) => v.len(),
            MetaArray::I16(v) => v.len(),
            MetaArray::U32(v) => v.len(),
            MetaArray::I32(v) => v.len(),
            MetaArray::U64(v) => v.len(),
            MetaArray::I64(v) => v.len(),
            MetaArray::F32(v) => v.len(),
            MetaArray::F64(v) => v.len(),
            MetaArray::Bool(v) => v.len(),
            MetaArray::String(v) => v.len(),
            MetaArray::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF name of this array's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaArray::U8(_) => "array of u8",
            MetaArray::I8(_) => "array of i8",
            MetaArray::U16(_) => "array of u16",
            MetaArray::I16(_) => "array of i16",
            MetaArray::U32(_) => "array of u32",
            MetaArray::I32(_) => "array of i32",
            MetaArray::U64(_) => "array of u64",
            MetaArray::I64(_) => "array of i64",
            MetaArray::F32(_) => "array of f32",
            MetaArray::F64(_) => "array of f64",
            MetaArray::Bool(_) => "array of bool",
            MetaArray::String(_) => "array of string",
            MetaArray::Array(_) => "array of arrays",
        }
    }

    /// The elements widened to `i128` when this is an integer array.
    fn integers(&self) -> Option<Vec<i128>> {
        fn widen<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        match self {
            MetaArray::U8(v) => Some(widen(v)),
            MetaArray::I8(v) => Some(widen(v)),
            MetaArray::U16(v) => Some(widen(v)),
            MetaArray::I16(v) => Some(widen(v)),
            MetaArray::U32(v) => Some(widen(v)),
            MetaArray::I32(v) => Some(widen(v)),
            MetaArray::U64(v) => Some(widen(v)),
            MetaArray::I64(v) => Some(widen(v)),
            _ => None,
        }
    }
}

/// The key/value metadata of a GGUF file, in file order, with lookup by key.
///
/// The typed getters return [`LoadError::MissingMetadata`] naming the key when it is absent and
/// [`LoadError::MetadataType`] / [`LoadError::MetadataOutOfRange`] when its value cannot be
/// read as the asked type, so a family or tokenizer reader never has to match on [`MetaValue`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GgufMetadata {
    entries: Vec<(String, MetaValue)>,
    index: HashMap<String, usize>,
}

impl GgufMetadata {
    /// Adds an entry; returns `false` (and keeps the first) when the key is already present.
    pub(crate) fn insert(&mut self, key: String, value: MetaValue) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.index
            .get(key)
            .and_then(|&i| self.entries.get(i))
            .map(|(_, v)| v)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    fn require(&self, key: &str) -> Result<&MetaValue, LoadError> {
        self.get(key).ok_or_else(|| LoadError::MissingMetadata {
            key: key.to_owned(),
        })
    }

    fn wrong_type(key: &str, expected: &'static str, found: &MetaValue) -> LoadError {
        LoadError::MetadataType {
            key: key.to_owned(),
            expected,
            found: found.type_name(),
        }
    }

    /// `general.architecture`, the key a GGUF family is resolved by.
    pub fn architecture(&self) -> Result<&str, LoadError> {
        self.get_str("general.architecture")
    }

    pub fn get_str(&self, key: &str) -> Result<&str, LoadError> {
        match self.require(key)? {
            MetaValue::String(s) => Ok(s),
            other => Err(Self::wrong_type(key, "string", other)),
        }
    }

    /// Any integer type whose value fits in a u32 (writers disagree on u32/i32/u64 for counts).
    pub fn get_u32(&self, key: &str) -> Result<u32, LoadError> {
        self.get_integer(key, "u32")
    }

    /// Any integer type whose value fits in a u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, LoadError> {
        self.get_integer(key, "u64")
    }

    fn get_integer<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<T, LoadError> {
        let value = self.require(key)?;
        let wide = value
            .as_integer()
            .ok_or_else(|| Self::wrong_type(key, expected, value))?;
        T::try_from(wide).map_err(|_| LoadError::MetadataOutOfRange {
            key: key.to_owned(),
            expected,
            index: None,
            value: wide,
        })
    }

    /// An f32, or an f64 rounded to f32.
    pub fn get_f32(&self, key: &str) -> Result<f32, LoadError> {
        match self.require(key)? {
            MetaValue::F32(v) => Ok(*v),
            MetaValue::F64(v) => Ok(*v as f32),
            other => Err(Self::wrong_type(key, "f32", other)),
        }
    }

    pub fn get_bool(&self, key: &str) -> Result<bool, LoadError> {
        match self.require(key)? {
            MetaValue::Bool(v) => Ok(*v),
            other => Err(Self::wrong_type(key, "bool", other)),
        }
    }

    fn get_array(&self, key: &str, expected: &'static str) -> Result<&MetaArray, LoadError> {
        match self.require(key)? {
            MetaValue::Array(a) => Ok(a),
            other => Err(Self::wrong_type(key, expected, other)),
        }
    }

    pub fn get_string_array(&self, key: &str) -> Result<&[String], LoadError> {
        match self.get_array(key, "array of string")? {
            MetaArray::String(v) => Ok(v),
            other => Err(LoadError::MetadataType {
                key: key.to_owned(),
                expected: "array of string",
                found: other.type_name(),
            }),
        }
    }

    /// An f32 array as stored (borrowed), or an f64 array rounded to f32.
    pub fn get_f32_array(&self, key: &str) -> Result<Cow<'_, [f32]>, LoadError> {
        match self.get_array(key, "array of f32")? {
            MetaArray::F32(v) => Ok(Cow::Borrowed(v)),
            MetaArray::F64(v) => Ok(Cow::Owned(v.iter().map(|&x| x as f32).collect())),
            other => Err(LoadError::MetadataType {
                key: key.to_owned(),
                expected: "array of f32",
                found: other.type_name(),
            }),
        }
    }

    /// An i32 array as stored (borrowed), or any integer array whose elements all fit in i32.
    pub fn get_i32_array(&self, key: &str) -> Result<Cow<'_, [i32]>, LoadError> {
        match self.get_array(key, "array of i32")? {
            MetaArray::I32(v) => Ok(Cow::Borrowed(v)),
            other => Self::narrow_array(key, other, "array of i32").map(Cow::Owned),
        }
    }

    /// A u32 array as stored (borrowed), or any integer array whose elements all fit in u32.
    pub fn get_u32_array(&self, key: &str) -> Result<Cow<'_, [u32]>, LoadError> {
        match self.get_array(key, "array of u32")? {
            MetaArray::U32(v) => Ok(Cow::Borrowed(v)),
            other => Self::narrow_array(key, other, "array of u32").map(Cow::Owned),
        }
    }

    fn narrow_array<T: TryFrom<i128>>(
        key: &str,
        array: &MetaArray,
        expected: &'static str,
    ) -> Result<Vec<T>, LoadError> {
        let wide = array.integers().ok_or_else(|| LoadError::MetadataType {
            key: key.to_owned(),
            expected,
            found: array.type_name(),
        })?;
        wide.into_iter()
            .enumerate()
            .map(|(i, x)| {
                T::try_from(x).map_err(|_| LoadError::MetadataOutOfRange {
                    key: key.to_owned(),
                    expected,
                    index: Some(i),
                    value: x,
                })
            })
            .collect()
    }
}
