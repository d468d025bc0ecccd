//! GGUF's packed block formats as data: which ggml type each is, and where each field of a block
//! lies.

use crate::GgmlType;

/// A GGUF block format poot decodes. A tensor of this format is rows of whole blocks; each block
/// packs `block_elems` consecutive elements of one row into `block_bytes` bytes.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlockFormat {
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    IQ2_XS,
    IQ3_XXS,
    IQ3_S,
    IQ4_NL,
    IQ4_XS,
    MXFP4,
}

/// What a field of a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldKind {
    /// One little-endian f16: the block's scale (`d`) or minimum (`m`, `dmin`).
    F16,
    /// One E8M0 exponent byte. MXFP4 scales its doubled E2M1 levels by half of 2^(e-127).
    E8M0,
    /// Quantization codes of `bits` bits each; where the format also has `HighBits`, these are
    /// the codes' low bits.
    Codes { bits: u8 },
    /// The codes' high bits, `bits` per element.
    HighBits { bits: u8 },
    /// Sub-block scales (and minimums, where the format has them) of `bits` bits each.
    SubScales { bits: u8 },
    /// Codebook entries: little-endian words of `index_bits` bits of grid index, followed by
    /// `sign_bits` bits of index into `ksigns` (0 when signs are stored elsewhere).
    GridCodes { index_bits: u8, sign_bits: u8 },
    /// One sign bit per element.
    SignBits,
    /// IQ3_XXS: per 32 elements one little-endian u32 of four 7-bit `ksigns` indices (bits 0-27)
    /// and a 4-bit sub-block scale (bits 28-31).
    ScalesAndSigns,
}

/// One field of a block: its name in ggml's block struct, its byte range and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockField {
    pub name: &'static str,
    pub offset_bytes: usize,
    pub len_bytes: usize,
    pub kind: FieldKind,
}

const fn field(
    name: &'static str,
    offset_bytes: usize,
    len_bytes: usize,
    kind: FieldKind,
) -> BlockField {
    BlockField {
        name,
        offset_bytes,
        len_bytes,
        kind,
    }
}

const F16: FieldKind = FieldKind::F16;

const Q4_0_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("qs", 2, 16, FieldKind::Codes { bits: 4 }),
];
const Q4_1_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("m", 2, 2, F16),
    field("qs", 4, 16, FieldKind::Codes { bits: 4 }),
];
const Q5_0_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("qh", 2, 4, FieldKind::HighBits { bits: 1 }),
    field("qs", 6, 16, FieldKind::Codes { bits: 4 }),
];
const Q5_1_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("m", 2, 2, F16),
    field("qh", 4, 4, FieldKind::HighBits { bits: 1 }),
    field("qs", 8, 16, FieldKind::Codes { bits: 4 }),
];
const Q8_0_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("qs", 2, 32, FieldKind::Codes { bits: 8 }),
];
const Q2_K_FIELDS: &[BlockField] = &[
    field("scales", 0, 16, FieldKind::SubScales { bits: 4 }),
    field("qs", 16, 64, FieldKind::Codes { bits: 2 }),
    field("d", 80, 2, F16),
    field("dmin", 82, 2, F16),
];
const Q3_K_FIELDS: &[BlockField] = &[
    field("hmask", 0, 32, FieldKind::HighBits { bits: 1 }),
    field("qs", 32, 64, FieldKind::Codes { bits: 2 }),
    field("scales", 96, 12, FieldKind::SubScales { bits: 6 }),
    field("d", 108, 2, F16),
];
const Q4_K_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("dmin", 2, 2, F16),
    field("scales", 4, 12, FieldKind::SubScales { bits: 6 }),
    field("qs", 16, 128, FieldKind::Codes { bits: 4 }),
];
const Q5_K_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("dmin", 2, 2, F16),
    field("scales", 4, 12, FieldKind::SubScales { bits: 6 }),
    field("qh", 16, 32, FieldKind::HighBits { bits: 1 }),
    field("qs", 48, 128, FieldKind::Codes { bits: 4 }),
];
const Q6_K_FIELDS: &[BlockField] = &[
    field("ql", 0, 128, FieldKind::Codes { bits: 4 }),
    field("qh", 128, 64, FieldKind::HighBits { bits: 2 }),
    field("scales", 192, 16, FieldKind::SubScales { bits: 8 }),
    field("d", 208, 2, F16),
];
const IQ2_XS_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field(
        "qs",
        2,
        64,
        FieldKind::GridCodes {
            index_bits: 9,
            sign_bits: 7,
        },
    ),
    field("scales", 66, 8, FieldKind::SubScales { bits: 4 }),
];
const IQ3_XXS_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field(
        "qs",
        2,
        64,
        FieldKind::GridCodes {
            index_bits: 8,
            sign_bits: 0,
        },
    ),
    field("scales_and_signs", 66, 32, FieldKind::ScalesAndSigns),
];
const IQ3_S_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field(
        "qs",
        2,
        64,
        FieldKind::GridCodes {
            index_bits: 8,
            sign_bits: 0,
        },
    ),
    field("qh", 66, 8, FieldKind::HighBits { bits: 1 }),
    field("signs", 74, 32, FieldKind::SignBits),
    field("scales", 106, 4, FieldKind::SubScales { bits: 4 }),
];
const IQ4_NL_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("qs", 2, 16, FieldKind::Codes { bits: 4 }),
];
const IQ4_XS_FIELDS: &[BlockField] = &[
    field("d", 0, 2, F16),
    field("scales_h", 2, 2, FieldKind::SubScales { bits: 2 }),
    field("scales_l", 4, 4, FieldKind::SubScales { bits: 4 }),
    field("qs", 8, 128, FieldKind::Codes { bits: 4 }),
];
const MXFP4_FIELDS: &[BlockField] = &[
    field("e", 0, 1, FieldKind::E8M0),
    field("qs", 1, 16, FieldKind::Codes { bits: 4 }),
];

impl BlockFormat {
    pub const ALL: [BlockFormat; 16] = [
        BlockFormat::Q4_0,
        BlockFormat::Q4_1,
        BlockFormat::Q5_0,
        BlockFormat::Q5_1,
        BlockFormat::Q8_0,
        BlockFormat::Q2_K,
        BlockFormat::Q3_K,
        BlockFormat::Q4_K,
        BlockFormat::Q5_K,
        BlockFormat::Q6_K,
        BlockFormat::IQ2_XS,
        BlockFormat::IQ3_XXS,
        BlockFormat::IQ3_S,
        BlockFormat::IQ4_NL,
        BlockFormat::IQ4_XS,
        BlockFormat::MXFP4,
    ];

    /// The ggml type GGUF records for this format.
    pub fn ggml_type(self) -> GgmlType {
        match self {
            BlockFormat::Q4_0 => GgmlType::Q4_0,
            BlockFormat::Q4_1 => GgmlType::Q4_1,
            BlockFormat::Q5_0 => GgmlType::Q5_0,
            BlockFormat::Q5_1 => GgmlType::Q5_1,
            BlockFormat::Q8_0 => GgmlType::Q8_0,
            BlockFormat::Q2_K => GgmlType::Q2_K,
            BlockFormat::Q3_K => GgmlType::Q3_K,
            BlockFormat::Q4_K => GgmlType::Q4_K,
            BlockFormat::Q5_K => GgmlType::Q5_K,
            BlockFormat::Q6_K => GgmlType::Q6_K,
            BlockFormat::IQ2_XS => GgmlType::IQ2_XS,
            BlockFormat::IQ3_XXS => GgmlType::IQ3_XXS,
            BlockFormat::IQ3_S => GgmlType::IQ3_S,
            BlockFormat::IQ4_NL => GgmlType::IQ4_NL,
            BlockFormat::IQ4_XS => GgmlType::IQ4_XS,
            BlockFormat::MXFP4 => GgmlType::MXFP4,
        }
    }

    /// The block format of a ggml type, or `None` when poot has none for it (dense types
    /// included; see [`GgmlType::packed_format`] for the classified answer).
    pub fn from_ggml(ggml_type: GgmlType) -> Option<BlockFormat> {
        BlockFormat::ALL
            .into_iter()
            .find(|f| f.ggml_type() == ggml_type)
    }

    /// ggml's name for the format.
    pub fn name(self) -> &'static str {
        self.ggml_type().name()
    }

    /// Elements in one block.
    pub fn block_elems(self) -> usize {
        self.ggml_type().block_elems()
    }

    /// Bytes in one block.
    pub fn block_bytes(self) -> usize {
        self.ggml_type().block_bytes()
    }

    /// Bytes of one row of `k_cols` elements, or `None` when `k_cols` is not whole blocks or the
    /// size overflows.
    pub fn row_bytes(self, k_cols: usize) -> Option<usize> {
        if !k_cols.is_multiple_of(self.block_elems()) {
            return None;
        }
        (k_cols / self.block_elems()).checked_mul(self.block_bytes())
    }

    /// The fields of one block, in byte order, tiling the block exactly.
    pub fn fields(self) -> &'static [BlockField] {
        match self {
            BlockFormat::Q4_0 => Q4_0_FIELDS,
            BlockFormat::Q4_1 => Q4_1_FIELDS,
            BlockFormat::Q5_0 => Q5_0_FIELDS,
            BlockFormat::Q5_1 => Q5_1_FIELDS,
            BlockFormat::Q8_0 => Q8_0_FIELDS,
            BlockFormat::Q2_K => Q2_K_FIELDS,
            BlockFormat::Q3_K => Q3_K_FIELDS,
            BlockFormat::Q4_K => Q4_K_FIELDS,
            BlockFormat::Q5_K => Q5_K_FIELDS,
            BlockFormat::Q6_K => Q6_K_FIELDS,
            BlockFormat::IQ2_XS => IQ2_XS_FIELDS,
            BlockFormat::IQ3_XXS => IQ3_XXS_FIELDS,
            BlockFormat::IQ3_S => IQ3_S_FIELDS,
            BlockFormat::IQ4_NL => IQ4_NL_FIELDS,
            BlockFormat::IQ4_XS => IQ4_XS_FIELDS,
            BlockFormat::MXFP4 => MXFP4_FIELDS,
        }
    }

    /// The field named `name` (as in ggml's block struct), if the format has one.
    pub fn field(self, name: &str) -> Option<BlockField> {
        self.fields().iter().copied().find(|f| f.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_tile_each_block_exactly() {
        for format in BlockFormat::ALL {
            let mut next = 0;
            for f in format.fields() {
                assert_eq!(
                    f.offset_bytes, next,
                    "{format:?}.{} leaves a gap or overlaps",
                    f.name
                );
                assert!(f.len_bytes > 0);
                next += f.len_bytes;
            }
            assert_eq!(
                next,
                format.block_bytes(),
                "{format:?} fields do not fill the block"
            );
        }
    }

    #[test]
    fn code_bits_cover_every_element() {
        for format in BlockFormat::ALL {
            let fields = format.fields();
            if fields
                .iter()
                .any(|f| matches!(f.kind, FieldKind::GridCodes { .. }))
            {
                continue; // codebook formats index groups of values, not elements
            }
            let mut bits_per_elem = 0;
            for f in fields {
                if let FieldKind::Codes { bits } | FieldKind::HighBits { bits } = f.kind {
                    assert_eq!(
                        f.len_bytes * 8,
                        format.block_elems() * usize::from(bits),
                        "{format:?}.{}",
                        f.name
                    );
                    bits_per_elem += usize::from(bits);
                }
            }
            assert!(
                (2..=8).contains(&bits_per_elem),
                "{format:?} has {bits_per_elem} code bits"
            );
        }
    }

    #[test]
    fn ggml_round_trip() {
        for format in BlockFormat::ALL {
            assert_eq!(BlockFormat::from_ggml(format.ggml_type()), Some(format));
        }
        assert_eq!(BlockFormat::from_ggml(GgmlType::F16), None);
        assert_eq!(BlockFormat::from_ggml(GgmlType::IQ2_XXS), None);
    }
}
