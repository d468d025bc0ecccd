//! Constants stored as several component tensors: the Hugging Face packed layouts (GPTQ and AWQ
//! int4, FP8 E4M3 with scales, E2M1 FP4 with E8M0 scales).
//!
//! A [`DType::Components`](crate::DType::Components) constant is a logical `[N, K]` weight whose
//! stored bytes are the format's component tensors (`qweight`, `qzeros`, `scales`, ...), bound by
//! role. The graph sees one value; the oracle decodes it through `poot-formats`, and the planner
//! binds each component as a buffer of its own, named [`component_const_name`], and decodes
//! inside the contraction that reads it.

use std::fmt;

use poot_formats::{
    ComponentSpec, FormatError, Fp8Scaling, GptqZeros, GroupSize, MatrixShape, PackedFormat,
    Presence, ScaleType,
};

/// A packed weight format stored as several component tensors: any [`PackedFormat`] but a GGUF
/// block format (a single tensor of blocks, [`crate::DType::Packed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ComponentFormat(PackedFormat);

impl ComponentFormat {
    /// The format, or `None` for a GGUF block format (declare those as `DType::Packed`).
    pub fn new(format: PackedFormat) -> Option<ComponentFormat> {
        match format {
            PackedFormat::Block(_) => None,
            PackedFormat::Gptq(_)
            | PackedFormat::Awq(_)
            | PackedFormat::Fp8(_)
            | PackedFormat::Fp4E2M1 => Some(ComponentFormat(format)),
        }
    }

    pub fn format(self) -> PackedFormat {
        self.0
    }

    /// A short name of the format family (`gptq_int4`), the dtype's name in errors.
    pub fn name(self) -> &'static str {
        match self.0 {
            PackedFormat::Gptq(_) => "gptq_int4",
            PackedFormat::Awq(_) => "awq_int4",
            PackedFormat::Fp8(_) => "fp8_e4m3",
            PackedFormat::Fp4E2M1 => "fp4_e2m1",
            // Not a component format (see `new`); named for completeness.
            PackedFormat::Block(b) => b.name(),
        }
    }

    /// The component tensors a constant of `dims` (`[N, K]`) is bound as, in the format's order:
    /// every component the format requires. An optional one (GPTQ's `g_idx` without act-order,
    /// where column `k` is in group `k / group`) is not part of the constant. Fails when `dims`
    /// is not rank 2 or not a multiple of what the format packs together.
    pub fn components(self, dims: &[usize]) -> Result<Vec<ComponentSpec>, FormatError> {
        let &[n_rows, k_cols] = dims else {
            return Err(FormatError::ComponentRank {
                format: self.0,
                component: "weight",
                dims: dims.to_vec(),
            });
        };
        Ok(self
            .0
            .components(MatrixShape::new(n_rows, k_cols))?
            .into_iter()
            .filter(|c| c.presence == Presence::Required)
            .collect())
    }

    /// Bytes the components of a `dims` constant occupy together, or `None` when `dims` is not a
    /// valid shape of the format.
    pub fn size_bytes(self, dims: &[usize]) -> Option<u64> {
        self.components(dims)
            .ok()?
            .iter()
            .try_fold(0u64, |acc, c| acc.checked_add(c.n_bytes()? as u64))
    }
}

impl fmt::Display for ComponentFormat {
    /// The text form's spelling: the family and its layout parameters
    /// (`gptq_int4{g128,act,v1}`, `fp8_e4m3{block128,bf16}`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = |g: GroupSize| match g {
            GroupSize::Channel => "channel".to_string(),
            GroupSize::Elems(n) => format!("g{n}"),
        };
        f.write_str(self.name())?;
        match self.0 {
            PackedFormat::Gptq(g) => write!(
                f,
                "{{{}{},{}}}",
                group(g.group),
                if g.act_order { ",act" } else { "" },
                match g.zeros {
                    GptqZeros::V1PlusOne => "v1",
                    GptqZeros::V2Exact => "v2",
                }
            ),
            PackedFormat::Awq(a) => write!(f, "{{{}}}", group(a.group)),
            PackedFormat::Fp8(p) => write!(
                f,
                "{{{},{}}}",
                match p.scaling {
                    Fp8Scaling::PerChannel => "channel",
                    Fp8Scaling::PerTensor => "tensor",
                    Fp8Scaling::Block128 => "block128",
                },
                match p.scale_type {
                    ScaleType::BF16 => "bf16",
                    ScaleType::F32 => "f32",
                }
            ),
            PackedFormat::Fp4E2M1 => f.write_str("{e8m0/32}"),
            PackedFormat::Block(_) => Ok(()),
        }
    }
}

/// The name a component of constant `name` is bound under outside the graph (the executor's
/// buffer name, a weight source's key): `w.l0.attn.q:qweight`.
pub fn component_const_name(name: &str, component: &str) -> String {
    format!("{name}:{component}")
}
