//! The loader's format table: what each stored ggml type becomes in a `WeightStore`.
//!
//! GGUF's unpacked types are ordinary dense words and are stored as [`DenseType`], the same
//! as a safetensors tensor of that dtype, so a family binds them the same way from either
//! file. Packed types stay packed. A packed type poot has no packed format (decode and
//! contraction) for is refused at load, naming the tensor, rather than ever being read as
//! something else.

use poot_formats::{DenseType, GgmlType, StoredType};

/// What the loader does with a tensor of one ggml type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GgmlAdmission {
    /// Stored as dense words of this type.
    Dense(DenseType),
    /// Stored as the file's blocks, decoded by the consuming contraction.
    Packed(GgmlType),
    /// poot has no packed format for this type: a load refuses the tensor.
    Refused(GgmlType),
}

impl GgmlAdmission {
    pub fn of(ggml_type: GgmlType) -> GgmlAdmission {
        use GgmlAdmission::{Dense, Packed, Refused};
        match ggml_type {
            GgmlType::F32 => Dense(DenseType::F32),
            GgmlType::F16 => Dense(DenseType::F16),
            GgmlType::BF16 => Dense(DenseType::BF16),
            GgmlType::F64 => Dense(DenseType::F64),
            GgmlType::I8 => Dense(DenseType::I8),
            GgmlType::I16 => Dense(DenseType::I16),
            GgmlType::I32 => Dense(DenseType::I32),
            GgmlType::I64 => Dense(DenseType::I64),
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::IQ2_XS
            | GgmlType::IQ3_XXS
            | GgmlType::IQ3_S
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::MXFP4 => Packed(ggml_type),
            GgmlType::Q8_1
            | GgmlType::Q8_K
            | GgmlType::IQ2_XXS
            | GgmlType::IQ2_S
            | GgmlType::IQ1_S
            | GgmlType::IQ1_M
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
            | GgmlType::NVFP4
            | GgmlType::Q1_0 => Refused(ggml_type),
        }
    }

    /// The stored type a `WeightStore` records, or `None` for a refused type.
    pub fn stored_type(self) -> Option<StoredType> {
        match self {
            GgmlAdmission::Dense(d) => Some(StoredType::Dense(d)),
            GgmlAdmission::Packed(g) => Some(StoredType::Ggml(g)),
            GgmlAdmission::Refused(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense ggml type must become a dense type of the same word size, or the byte views
    /// would be read with the wrong stride.
    #[test]
    fn dense_types_keep_their_word_size() {
        for t in GgmlType::ALL {
            if let GgmlAdmission::Dense(d) = GgmlAdmission::of(t) {
                assert_eq!(t.block_elems(), 1, "{t:?}");
                assert_eq!(t.block_bytes(), d.size_bytes(), "{t:?}");
                assert_eq!(t.name(), d.name(), "{t:?}");
            }
        }
    }

    #[test]
    fn the_spec_refusals_are_refused() {
        let refused: Vec<GgmlType> = GgmlType::ALL
            .into_iter()
            .filter(|&t| matches!(GgmlAdmission::of(t), GgmlAdmission::Refused(_)))
            .collect();
        use GgmlType::*;
        assert_eq!(
            refused,
            vec![
                Q8_1, Q8_K, IQ2_XXS, IQ1_S, IQ2_S, IQ1_M, TQ1_0, TQ2_0, NVFP4, Q1_0
            ]
        );
    }
}
