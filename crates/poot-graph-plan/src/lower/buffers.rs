//! Physical buffers: inputs keep their own; intermediates share scratch buffers whose lifetimes
//! (first to last dispatch that binds them) do not overlap. Every buffer keeps one address for
//! the plan's life, which recorded replay requires.

use super::context::LBuf;
use crate::plan::{BufferDecl, BufferId, BufferRole};

pub struct Assignment {
    /// Physical buffer of each planned buffer.
    pub map: Vec<BufferId>,
    pub buffers: Vec<BufferDecl>,
}

/// Packs planned buffers into physical ones. `pinned` buffers (the step's outputs) live to the
/// end of the step.
pub fn assign(bufs: &[(BufferRole, u64)], dispatches: &[&[LBuf]], pinned: &[LBuf]) -> Assignment {
    let n = bufs.len();
    let mut first = vec![usize::MAX; n];
    let mut last = vec![0usize; n];
    for (d, args) in dispatches.iter().enumerate() {
        for a in args.iter() {
            let i = a.0 as usize;
            first[i] = first[i].min(d);
            last[i] = last[i].max(d);
        }
    }
    for p in pinned {
        last[p.0 as usize] = usize::MAX;
    }
    let mut map = vec![BufferId(0); n];
    let mut buffers: Vec<BufferDecl> = Vec::new();
    // Physical scratch buffers: (index into `buffers`, the last dispatch that uses it).
    let mut scratch: Vec<(usize, usize)> = Vec::new();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| (first[i], i));
    for i in order {
        let (role, size) = (&bufs[i].0, bufs[i].1);
        if *role != BufferRole::Scratch {
            buffers.push(BufferDecl {
                role: role.clone(),
                size_bytes: size,
            });
            map[i] = BufferId(buffers.len() as u32 - 1);
            continue;
        }
        // Best fit among free buffers no more than twice as large.
        let fit = scratch
            .iter()
            .enumerate()
            .filter(|(_, (b, free_after))| {
                *free_after < first[i]
                    && buffers[*b].size_bytes >= size
                    && buffers[*b].size_bytes <= 2 * size
            })
            .min_by_key(|(_, (b, _))| buffers[*b].size_bytes)
            .map(|(j, _)| j);
        let phys = match fit {
            Some(j) => {
                scratch[j].1 = last[i];
                scratch[j].0
            }
            None => {
                buffers.push(BufferDecl {
                    role: BufferRole::Scratch,
                    size_bytes: size,
                });
                scratch.push((buffers.len() - 1, last[i]));
                buffers.len() - 1
            }
        };
        map[i] = BufferId(phys as u32);
    }
    Assignment { map, buffers }
}
