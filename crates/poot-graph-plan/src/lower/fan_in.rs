//! Keeps every kernel within the target's bindings: a kernel binds its output, every buffered
//! value its inlined producers read, and the codebook tables of the packed formats among them.
//! When that is more than the target allows (a select over many row chunks of a split table, a
//! concatenation of many chunk contractions), the inlined producer that reads the most buffers is
//! computed into a buffer of its own instead, until the kernel fits.

use std::collections::{BTreeSet, HashSet};

use poot_formats::PackedFormat;
use poot_graph_ir::{DType, Graph, ValueId};

use super::classify::{Classification, Placement};
use super::dequant::{self, FormatTable};

/// Materializes inlined values until every kernel of `g` binds at most `max_bindings` buffers.
/// A kernel that still does not fit (one op reading too many buffers itself) is left to the
/// lowering's refusal.
pub fn limit(g: &Graph, cls: &mut Classification, max_bindings: u32) {
    let max = max_bindings as usize;
    // Reverse order: a value materialized here is produced earlier and checked after.
    for e in g.eqns().iter().rev() {
        if cls.placement[e.out.index()] != Placement::Materialized {
            continue;
        }
        loop {
            let mut nodes = Vec::new();
            let leaves = reads(g, cls, &e.inputs, &mut nodes);
            if 1 + leaves.len() + tables(g, &leaves) <= max {
                break;
            }
            // The inlined producer reading the most buffers, if computing it apart helps.
            let best = nodes
                .iter()
                .map(|&v| {
                    let mut inner = Vec::new();
                    let eqn = cls.producer[v.index()].map(|i| &g.eqns()[i]);
                    let n = eqn.map_or(0, |e| reads(g, cls, &e.inputs, &mut inner).len());
                    (n, v)
                })
                .filter(|&(n, _)| n > 1)
                .max_by_key(|&(n, v)| (n, std::cmp::Reverse(v)));
            match best {
                Some((_, v)) => cls.placement[v.index()] = Placement::Materialized,
                None => break,
            }
        }
    }
}

/// The buffered values `inputs` read, through inlined producers; `nodes` collects the inlined
/// values passed through.
fn reads(
    g: &Graph,
    cls: &Classification,
    inputs: &[ValueId],
    nodes: &mut Vec<ValueId>,
) -> BTreeSet<ValueId> {
    let mut leaves = BTreeSet::new();
    let mut stack: Vec<ValueId> = inputs.to_vec();
    let mut seen = BTreeSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) {
            continue;
        }
        match cls.placement[v.index()] {
            Placement::Inline => {
                nodes.push(v);
                if let Some(i) = cls.producer[v.index()] {
                    stack.extend(&g.eqns()[i].inputs);
                }
            }
            // Computed inside the reader from its own inputs, which the reader then binds; not
            // candidates for computing apart (their fusion is set up around them).
            Placement::RowReduce | Placement::Absorbed => {
                if let Some(i) = cls.producer[v.index()] {
                    stack.extend(&g.eqns()[i].inputs);
                }
            }
            Placement::Input | Placement::Materialized | Placement::View => {
                leaves.insert(v);
            }
        }
    }
    leaves
}

/// Bindings beyond one per leaf: the codebook tables the packed values among `leaves` decode
/// with, and every component past the first of a component-format constant.
fn tables(g: &Graph, leaves: &BTreeSet<ValueId>) -> usize {
    let mut t: HashSet<FormatTable> = HashSet::new();
    let mut components = 0;
    for v in leaves {
        let ty = &g.values()[v.index()].ty;
        match ty.dtype {
            DType::Packed(f) => {
                if let Ok(Some(PackedFormat::Block(b))) = f.packed_format() {
                    t.extend(dequant::tables_of(b).iter().copied());
                }
            }
            DType::Components(c) => {
                components += c
                    .components(ty.dims())
                    .map_or(0, |s| s.len().saturating_sub(1));
            }
            _ => {}
        }
    }
    t.len() + components
}
