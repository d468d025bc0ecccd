//! The group oracle: the graphs of a group (the ranks of a tensor-parallel group, the stages of
//! a layer pipeline) evaluated in lockstep, each rank on its own inputs, meeting at every
//! collective.
//!
//! **Meaning of `AllReduceSum`.** Every rank's walk runs up to its next all-reduce; the operands
//! are then summed element by element in rank order (`((x0 + x1) + x2) + ...`, each addition
//! an f32 rounding, or in f64 with one final rounding under
//! [`EvalOptions::accumulate_f64`](crate::EvalOptions)) and every rank continues with the same
//! sum. A device's collective may associate the sum differently (NCCL's ring or tree order), so
//! devices are compared with it at a reassociation tolerance.
//!
//! **Meaning of `BroadcastFrom`.** Every rank's walk runs up to its next collective; every rank
//! then continues with rank `root`'s operand, element for element (the other ranks' operands,
//! placeholders of the same type, are not read). Exact: a device's broadcast copies words.

use std::borrow::Cow;

use poot_graph_ir::{CollectiveOp, Graph};

use crate::error::EvalError;
use crate::eval::{Paused, Walk};
use crate::evaluation::Evaluation;
use crate::inputs::Inputs;
use crate::options::EvalOptions;
use crate::tensor::TensorData;

/// Evaluates the `graphs` of one group (rank `r` is `graphs[r]`, bound by `inputs[r]`) in
/// lockstep and returns every rank's evaluation, in rank order.
///
/// Each collective must be met by every rank, in the same order, as the same op over the
/// group's size (and, for a broadcast, the same root) and the same type; ranks that diverge are
/// [`EvalError::GroupDiverged`]. A rank's own failure is
/// [`EvalError::Rank`] naming it.
pub fn eval_group<'i>(
    graphs: &[&Graph],
    inputs: &'i [Inputs<'_>],
    options: EvalOptions,
) -> Result<Vec<Evaluation<'i>>, EvalError> {
    if graphs.len() != inputs.len() || graphs.is_empty() {
        return Err(EvalError::GroupInputs {
            graphs: graphs.len(),
            inputs: inputs.len(),
        });
    }
    let ranks = graphs.len();
    let in_rank = |rank: usize| {
        move |e: EvalError| EvalError::Rank {
            rank,
            source: Box::new(e),
        }
    };
    let mut walks = Vec::with_capacity(ranks);
    for (r, (g, inp)) in graphs.iter().zip(inputs).enumerate() {
        walks.push(Walk::new(g, inp, options).map_err(in_rank(r))?);
    }
    loop {
        let mut pauses = Vec::with_capacity(ranks);
        for (r, w) in walks.iter_mut().enumerate() {
            pauses.push(w.advance().map_err(in_rank(r))?);
        }
        let describe = |r: usize, p: Paused| -> String {
            match p {
                Paused::Done => "the end of its graph".to_string(),
                Paused::Collective { eqn, op } => {
                    let ty = walks[r]
                        .collective_input(eqn)
                        .map(|t| t.ty().to_string())
                        .unwrap_or_default();
                    match op {
                        CollectiveOp::AllReduceSum { ranks } => {
                            format!("an all-reduce over {ranks} ranks of {ty}")
                        }
                        CollectiveOp::Broadcast { root, ranks } => {
                            format!("a broadcast from rank {root} over {ranks} ranks of {ty}")
                        }
                    }
                }
            }
        };
        let first = describe(0, pauses[0]);
        for (r, &p) in pauses.iter().enumerate().skip(1) {
            let found = describe(r, p);
            if found != first {
                return Err(EvalError::GroupDiverged {
                    rank: r,
                    expected: first,
                    found,
                });
            }
        }
        let op = match pauses[0] {
            Paused::Done => break,
            Paused::Collective { op, .. } if op.ranks() != ranks => {
                return Err(EvalError::GroupDiverged {
                    rank: 0,
                    expected: format!("a collective over the group's {ranks} ranks"),
                    found: first,
                });
            }
            Paused::Collective { op, .. } => op,
        };
        let result =
            match op {
                CollectiveOp::AllReduceSum { .. } => {
                    let mut parts = Vec::with_capacity(ranks);
                    for (r, (w, p)) in walks.iter().zip(&pauses).enumerate() {
                        let Paused::Collective { eqn, .. } = *p else {
                            break;
                        };
                        let t = w.collective_input(eqn).map_err(in_rank(r))?;
                        parts.push(t.as_f32().map_err(|e| {
                            in_rank(r)(w.fault(eqn, crate::error::Fault::Produced(e)))
                        })?);
                    }
                    TensorData::F32(Cow::Owned(sum_in_rank_order(
                        &parts,
                        options.accumulate_f64,
                    )))
                }
                // Every rank met the same root (checked above), inside the group (`infer`).
                CollectiveOp::Broadcast { root, .. } => {
                    let (Some(w), Some(&Paused::Collective { eqn, .. })) =
                        (walks.get(root), pauses.get(root))
                    else {
                        return Err(EvalError::GroupDiverged {
                            rank: 0,
                            expected: format!("a root among the group's {ranks} ranks"),
                            found: first,
                        });
                    };
                    w.collective_input(eqn)
                        .map_err(in_rank(root))?
                        .data()
                        .clone()
                }
            };
        for (r, w) in walks.iter_mut().enumerate() {
            w.complete(result.clone()).map_err(in_rank(r))?;
        }
    }
    walks
        .into_iter()
        .enumerate()
        .map(|(r, w)| w.finish().map_err(in_rank(r)))
        .collect()
}

/// The elementwise sum of equally long parts, in part order.
fn sum_in_rank_order(parts: &[&[f32]], f64_acc: bool) -> Vec<f32> {
    let n = parts.first().map_or(0, |p| p.len());
    if f64_acc {
        (0..n)
            .map(|i| parts.iter().map(|p| f64::from(p[i])).sum::<f64>() as f32)
            .collect()
    } else {
        let mut acc = parts.first().map(|p| p.to_vec()).unwrap_or_default();
        for p in &parts[1.min(parts.len())..] {
            for (a, x) in acc.iter_mut().zip(p.iter()) {
                *a += *x;
            }
        }
        acc
    }
}
