/// A dense element type as a checkpoint stores it (safetensors dtypes, GGUF's unpacked types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DenseType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3,
    F8E5M2,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
}

impl DenseType {
    pub const ALL: [DenseType; 15] = [
        DenseType::F64,
        DenseType::F32,
        DenseType::F16,
        DenseType::BF16,
        DenseType::F8E4M3,
        DenseType::F8E5M2,
        DenseType::I64,
        DenseType::I32,
        DenseType::I16,
        DenseType::I8,
        DenseType::U64,
        DenseType::U32,
        DenseType::U16,
        DenseType::U8,
        DenseType::Bool,
    ];

    pub fn size_bytes(self) -> usize {
        match self {
            DenseType::F64 | DenseType::I64 | DenseType::U64 => 8,
            DenseType::F32 | DenseType::I32 | DenseType::U32 => 4,
            DenseType::F16 | DenseType::BF16 | DenseType::I16 | DenseType::U16 => 2,
            DenseType::F8E4M3
            | DenseType::F8E5M2
            | DenseType::I8
            | DenseType::U8
            | DenseType::Bool => 1,
        }
    }

    /// The safetensors spelling of this type.
    pub fn name(self) -> &'static str {
        match self {
            DenseType::F64 => "F64",
            DenseType::F32 => "F32",
            DenseType::F16 => "F16",
            DenseType::BF16 => "BF16",
            DenseType::F8E4M3 => "F8_E4M3",
            DenseType::F8E5M2 => "F8_E5M2",
            DenseType::I64 => "I64",
            DenseType::I32 => "I32",
            DenseType::I16 => "I16",
            DenseType::I8 => "I8",
            DenseType::U64 => "U64",
            DenseType::U32 => "U32",
            DenseType::U16 => "U16",
            DenseType::U8 => "U8",
            DenseType::Bool => "BOOL",
        }
    }

    /// Parses a safetensors dtype string.
    pub fn from_safetensors(name: &str) -> Option<DenseType> {
        DenseType::ALL.into_iter().find(|d| d.name() == name)
    }
}
