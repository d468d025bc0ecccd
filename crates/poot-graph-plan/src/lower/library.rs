//! Contractions given to the device's library (cuBLASLt on PTX) instead of a generated kernel.
//!
//! A tiled contraction (a prefill chunk's, a batched step's) against a stored f16 or bf16
//! weight whose left side the graph rounded to the weight's type ([`crate::precision`]) is the
//! textbook half-precision GEMM with f32 sums: the field's libraries run it near the tensor
//! cores' peak, which the generated tiles do not reach. The planner keeps everything around it:
//! the left side is computed into a buffer of its own by the kernel that would otherwise have
//! been inlined into the contraction's staging, and what the contraction's kernel would have
//! computed as its epilogue (a residual add, `silu(gate) * up`) is an ordinary kernel reading
//! the stored result.
//!
//! Block-quantized weights reach it decoded: over many rows (a prefill chunk) the graph decodes
//! them in full and rounds them to f16 ([`crate::precision`]). In the formats the device
//! decodes itself ([`Target::library_decodes`]) the library takes the stored blocks and writes
//! the rounded halves in one pass, no kernel of ours computing the decoding; otherwise a kernel
//! computes it into a buffer of f32 words, which the device converts to halves.
//!
//! The device computes the rewritten graph up to the order of its f32 sums (the library's, not
//! the oracle's), the tolerance every tiled contraction is held to.
//!
//! A device with an exact library ([`Target::exact_library`], the CPU's) takes every
//! contraction against a stored rank-2 weight instead, at any row count and with nothing
//! rounded: the weights as stored (f32, f16, bf16, the block formats it decodes), the left side
//! in f32. On the CPU the contraction is where a step's time goes, and its speed comes from a
//! register-tiled loop over the host's vector width that the kernel IR does not express.

use std::collections::HashSet;

use poot_graph_ir::{DType, Graph, OpKind, Storage, ValueId};

use poot_formats::{BlockFormat, PackedFormat};

use super::classify::{Classification, Placement};
use super::{Lowering, PlanError, PlannedContraction};
use crate::activation_blocks::{activation_blocks_source, integer_blocks};
use crate::plan::{EXACT_LIBRARY_BLOCKS, HalfType, LibraryOperands, StoredWeights, WeightWords};
use crate::precision::{decoded_blocks, half_operand};
use crate::target::Target;

/// Contraction lengths and output columns the library takes: a multiple of 8 elements keeps
/// every row of both operands 16-byte aligned, which its tensor-core kernels want.
const ALIGN: usize = 8;

/// The equations of `g` that `target` gives to its library.
pub(super) fn chosen(g: &Graph, target: &Target) -> HashSet<usize> {
    if target.exact_library() {
        return (0..g.eqns().len())
            .filter(|&i| exact_operands(g, i).is_some())
            .collect();
    }
    if !target.library_contractions() {
        return HashSet::new();
    }
    (0..g.eqns().len())
        .filter(|&i| library_operands(g, i, target).is_some())
        .collect()
}

/// How eqn `i`'s contraction reaches an exact library, when it can: an f32 left side against a
/// stored rank-2 constant, transposed (`[columns, depth]`, as checkpoints store projections),
/// in a format the library decodes, with sizes that fit its 32-bit dimensions.
pub(crate) fn exact_operands(g: &Graph, i: usize) -> Option<StoredWeights> {
    let e = &g.eqns()[i];
    if e.op
        != (OpKind::MatMul {
            transpose_rhs: true,
        })
        || e.inputs.len() != 2
    {
        return None;
    }
    let (lhs, rhs) = (e.inputs[0], e.inputs[1]);
    if g.values()[lhs.index()].ty.dtype != DType::F32 {
        return None;
    }
    let w = &g.values()[rhs.index()];
    if !matches!(w.storage, Storage::Const(_)) {
        return None;
    }
    let [cols, depth] = *w.ty.dims() else {
        return None;
    };
    let stored = match w.ty.dtype {
        DType::F32 => StoredWeights::F32,
        DType::F16 => StoredWeights::F16,
        DType::BF16 => StoredWeights::BF16,
        DType::Packed(p) => match p.packed_format() {
            Ok(Some(PackedFormat::Block(b))) if EXACT_LIBRARY_BLOCKS.contains(&b) => {
                StoredWeights::Blocks(b)
            }
            _ => return None,
        },
        _ => return None,
    };
    let out = g.values()[e.out.index()].ty.dims();
    let rows: usize = out[..out.len().checked_sub(1)?].iter().product();
    let fits = |n: usize| u32::try_from(n).is_ok_and(|n| n > 0);
    (fits(rows) && fits(depth) && fits(cols)).then_some(stored)
}

/// How eqn `i`'s contraction reaches the library, when it can: a tiled `MatMul` of a rounded
/// left side against weights of that half type, either a whole stored rank-2 constant or f32
/// words rounded to it (block-quantized weights decoded for the library, see
/// [`crate::precision`]), with aligned sizes that fit the library's 32-bit dimensions.
///
/// Also returns the value whose buffer the library reads the weights from: the contraction's
/// right side, or the stored blocks a decoding starts from.
fn library_operands(
    g: &Graph,
    i: usize,
    target: &Target,
) -> Option<(HalfType, WeightWords, ValueId)> {
    let e = &g.eqns()[i];
    let OpKind::MatMul { transpose_rhs } = e.op else {
        return None;
    };
    if !super::gemm::tiled(g, i, target.tiled_min_rows()) {
        return None;
    }
    let (lhs, rhs) = (e.inputs[0], e.inputs[1]);
    let w = &g.values()[rhs.index()];
    let (dtype, words, source) = match (&w.storage, w.ty.dtype) {
        (Storage::Const(_), d @ (DType::F16 | DType::BF16)) => (d, WeightWords::Stored, rhs),
        // Rounded weights are decoded by the device from the stored blocks, or computed in full
        // into a buffer of f32 words, `[columns, depth]`.
        (Storage::Device, DType::F32) if transpose_rhs => {
            let decoded = decoded_blocks(g, rhs);
            // Fewer rows than the library takes: the decoding is the tiled kernels' (see
            // `crate::precision::decoded_for_tiles`).
            if decoded.is_some()
                && !target.library_takes_blocks(super::gemm::contraction_rows(g, i))
            {
                return None;
            }
            let (words, source) = match decoded {
                Some(d) if target.library_decodes(d.format) => {
                    (WeightWords::Blocks(d.format), d.weights)
                }
                _ => (WeightWords::F32, rhs),
            };
            (half_operand(g, rhs)?, words, source)
        }
        _ => return None,
    };
    let half = match dtype {
        DType::F16 => HalfType::F16,
        DType::BF16 => HalfType::BF16,
        _ => return None,
    };
    if half_operand(g, lhs) != Some(dtype) {
        return None;
    }
    let out = g.values()[e.out.index()].ty.dims();
    let depth = *g.values()[lhs.index()].ty.dims().last()?;
    let cols = *out.last()?;
    let rows: usize = out[..out.len() - 1].iter().product();
    let fits = |n: usize| u32::try_from(n).is_ok_and(|n| n > 0);
    (depth.is_multiple_of(ALIGN)
        && cols.is_multiple_of(ALIGN)
        && fits(rows)
        && fits(depth)
        && fits(cols))
    .then_some((half, words, source))
}

/// The unrounded left side and the weights' block format of eqn `i` when the library multiplies
/// it in 8-bit integers: its left side is the graph's rounding to 8-bit blocks
/// ([`crate::activation_blocks`]) and the target's library takes its weights that way.
fn integer_operands(
    g: &Graph,
    producers: &[Option<usize>],
    i: usize,
    target: &Target,
) -> Option<(ValueId, BlockFormat)> {
    let b = integer_blocks(g, i, target)?;
    let (source, _) = activation_blocks_source(g, producers, g.eqns()[i].inputs[0])?;
    Some((source, b))
}

/// Marks the values the library computes itself as absorbed, so no kernel computes them: each
/// 8-bit rounding only library contractions taking it in integers read, and each decoding of
/// block weights only library contractions taking the stored blocks read.
pub(super) fn absorb_roundings(
    g: &Graph,
    target: &Target,
    library: &HashSet<usize>,
    cls: &mut Classification,
) {
    absorb_decodings(g, target, library, cls);
    let integer: HashSet<usize> = library
        .iter()
        .copied()
        .filter(|&i| integer_operands(g, &cls.producer, i, target).is_some())
        .collect();
    let mut done = HashSet::new();
    for &i in &integer {
        let rounded = g.eqns()[i].inputs[0];
        if !done.insert(rounded) {
            continue;
        }
        let Some((_, internal)) = activation_blocks_source(g, &cls.producer, rounded) else {
            continue;
        };
        let chain: HashSet<usize> = internal
            .iter()
            .filter_map(|v| cls.producer[v.index()])
            .collect();
        let private = internal.iter().all(|v| {
            cls.readers[v.index()].iter().all(|&(r, _)| {
                if *v == rounded {
                    integer.contains(&r)
                } else {
                    chain.contains(&r)
                }
            })
        });
        if private {
            for v in internal {
                cls.placement[v.index()] = Placement::Absorbed;
            }
        }
    }
}

/// Marks each decoding of block weights (its row indices, decoded words and roundings) that only
/// library contractions taking the stored blocks, or tiled kernels decoding them per slice
/// ([`super::gemm::block_tiled`], [`super::gemm::routed_tiled`]), read as absorbed.
fn absorb_decodings(
    g: &Graph,
    target: &Target,
    library: &HashSet<usize>,
    cls: &mut Classification,
) {
    let mut decoding: HashSet<usize> = library
        .iter()
        .copied()
        .filter(|&i| {
            matches!(
                library_operands(g, i, target),
                Some((_, WeightWords::Blocks(_), _))
            )
        })
        .collect();
    // Tiled kernels decode the stored blocks themselves too, slice by slice.
    decoding.extend(
        (0..g.eqns().len())
            .filter(|i| !library.contains(i) && super::gemm::block_tiled(g, *i, target).is_some()),
    );
    // And the tiles over each expert's rows decode their expert stacks.
    decoding
        .extend((0..g.eqns().len()).filter(|&i| super::gemm::routed_tiled(g, i, target).is_some()));
    let mut done = HashSet::new();
    for &i in &decoding {
        let operand = g.eqns()[i].inputs[1];
        if !done.insert(operand) {
            continue;
        }
        let Some(d) = decoded_blocks(g, operand) else {
            continue;
        };
        // Each value of the chain is read only by the next one, the last only by these
        // contractions.
        let private = d.chain.iter().enumerate().all(|(k, v)| {
            cls.readers[v.index()]
                .iter()
                .all(|&(r, _)| match d.chain.get(k + 1) {
                    Some(next) => cls.producer[next.index()] == Some(r),
                    None => decoding.contains(&r),
                })
        });
        if private {
            for v in d.chain {
                cls.placement[v.index()] = Placement::Absorbed;
            }
        }
    }
}

impl Lowering<'_> {
    /// Contraction eqn `i` as a library step: its left side materialized, its result stored in
    /// a buffer of its own.
    pub(super) fn emit_library_contraction(&mut self, i: usize) -> Result<(), PlanError> {
        let e = &self.g.eqns()[i];
        let OpKind::MatMul { transpose_rhs } = e.op else {
            return Err(PlanError::Unplaced {
                label: self.label(e.out),
            });
        };
        let (lhs, rhs, v) = (e.inputs[0], e.inputs[1], e.out);
        let integer = integer_operands(self.g, &self.cls.producer, i, self.target);
        // The operands, and the value holding the weights (computed into a buffer of its own
        // only where they come as f32 words).
        let (operands, weights_of, computed) = if let Some((_, b)) = integer {
            Some((LibraryOperands::Integer(b), rhs, false))
        } else if self.target.exact_library() {
            exact_operands(self.g, i).map(|w| (LibraryOperands::Exact(w), rhs, false))
        } else {
            library_operands(self.g, i, self.target).map(|(half, words, source)| {
                let computed = words == WeightWords::F32;
                (LibraryOperands::Half { half, words }, source, computed)
            })
        }
        .ok_or_else(|| PlanError::Unplaced {
            label: self.label(e.out),
        })?;
        let out_dims = self.g.values()[v.index()].ty.dims().to_vec();
        let depth = *self.g.values()[lhs.index()].ty.dims().last().unwrap_or(&1);
        let cols = *out_dims.last().unwrap_or(&1);
        let rows: usize = out_dims[..out_dims.len() - 1].iter().product();
        // The library rounds the left side to 8-bit blocks itself, from the values before.
        let lhs_buf = self.materialized(integer.map_or(lhs, |(source, _)| source))?;
        let weights = if computed {
            self.materialized(weights_of)?
        } else {
            self.buffer_of(weights_of)?
        };
        let out = self.scratch_for(v)?;
        self.contractions.push((
            self.dispatches.len(),
            self.collectives.len(),
            PlannedContraction {
                operands,
                lhs: lhs_buf,
                weights,
                transpose_weights: transpose_rhs,
                out,
                rows: rows as u32,
                cols: cols as u32,
                depth: depth as u32,
                label: self.label(v),
            },
        ));
        Ok(())
    }
}
