//! Random admitted payloads of the Hugging Face packed layouts, for tests and device checks: every
//! component a format requires, with codes drawn uniformly and scales in the range real
//! checkpoints use (so a contraction over them stays finite). Deterministic in the seed.

use crate::{ComponentSpec, DenseType, FormatError, MatrixShape, PackedFormat, Presence};

/// splitmix64: a small seeded generator, so a seed always gives the same payload.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[lo, hi)`.
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A random payload of a `shape` weight in a Hugging Face packed `format`: each required
/// component's name and stored bytes, in the format's order (optional components are left out).
/// GPTQ with act-order gets a `g_idx` that puts exactly `group` columns in each group, shuffled;
/// GPTQ/AWQ scales are f16 in `[0.002, 0.02)`, FP8 codes exclude NaN and scales lie in
/// `[0.001, 0.01)`, FP4 scales are `2^-8 ..= 2^3`. Fails for a GGUF block format (use random
/// blocks) and for a shape the format cannot store.
pub fn components(
    format: PackedFormat,
    shape: MatrixShape,
    seed: u64,
) -> Result<Vec<(&'static str, Vec<u8>)>, FormatError> {
    let mut rng = Rng(seed);
    let specs: Vec<ComponentSpec> = format
        .components(shape)?
        .into_iter()
        .filter(|c| c.presence == Presence::Required)
        .collect();
    let mut out = Vec::with_capacity(specs.len());
    for spec in specs {
        let n_bytes = spec.n_bytes().ok_or(FormatError::SizeOverflow {
            format,
            n_rows: shape.n_rows,
            k_cols: shape.k_cols,
        })?;
        let bytes = match (format, spec.name) {
            (PackedFormat::Block(_), _) => {
                return Err(FormatError::MissingComponent {
                    format,
                    component: "components",
                });
            }
            (PackedFormat::Gptq(g), "g_idx") => {
                let mut groups: Vec<i32> = (0..shape.k_cols)
                    .map(|k| g.group.group_of(k) as i32)
                    .collect();
                for i in (1..groups.len()).rev() {
                    groups.swap(i, rng.below(i + 1));
                }
                groups.iter().flat_map(|g| g.to_le_bytes()).collect()
            }
            (_, "scales") => (0..n_bytes / 2)
                .flat_map(|_| half::f16::from_f32(rng.uniform(0.002, 0.02)).to_le_bytes())
                .collect(),
            (PackedFormat::Fp8(_), "weight") => (0..n_bytes)
                .map(|_| {
                    // Every code but the two NaNs (S.1111.111).
                    let b = rng.next() as u8;
                    if b & 0x7f == 0x7f { b & 0xfe } else { b }
                })
                .collect(),
            (PackedFormat::Fp8(_), _) => match spec.dtype {
                DenseType::BF16 => (0..n_bytes / 2)
                    .flat_map(|_| half::bf16::from_f32(rng.uniform(0.001, 0.01)).to_le_bytes())
                    .collect(),
                _ => (0..n_bytes / 4)
                    .flat_map(|_| rng.uniform(0.001, 0.01).to_le_bytes())
                    .collect(),
            },
            (PackedFormat::Fp4E2M1, "weight_scale") => {
                (0..n_bytes).map(|_| 119 + rng.below(12) as u8).collect()
            }
            _ => (0..n_bytes).map(|_| rng.next() as u8).collect(),
        };
        out.push((spec.name, bytes));
    }
    Ok(out)
}
