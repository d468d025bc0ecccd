//! The evaluation walk: bind the inputs, run each equation in order, release values after their
//! last reader, and collect the outputs and carried state.

use poot_graph_ir::{CollectiveOp, Eqn, Graph, OpKind, ValueId};

use crate::error::{EvalError, Fault};
use crate::evaluation::Evaluation;
use crate::inputs::Inputs;
use crate::ops::{binary, cast, compare, indexing, matmul, movement, reduce, source, topk, unary};
use crate::options::EvalOptions;
use crate::tensor::{HostTensor, TensorData};

/// When a value is last read: `Some(eqn index)`, `Some(KEEP)` for outputs (and everything when
/// the environment is kept), `None` when nothing reads it.
const KEEP: usize = usize::MAX;

/// Evaluates `graph` on `inputs`, returning its primary outputs, its carried state by name and,
/// when `options.keep_env` is set, every value.
///
/// The bindings are checked first (see [`Inputs`]); then each equation runs in order. A runtime
/// fault (an index out of range, an integer division by zero, a packed format with no decode)
/// stops the walk with [`EvalError::Fault`] naming the equation, its op and the value it defines.
/// A collective over a group of one is the identity (an all-reduce sums one part, a broadcast
/// hands the only rank its own value); one over a larger group is [`Fault::Collective`] (a
/// rank's graph means nothing alone: evaluate the group with [`crate::eval_group`]). No graph
/// that validates makes this panic.
pub fn eval<'i>(
    graph: &Graph,
    inputs: &'i Inputs<'_>,
    options: EvalOptions,
) -> Result<Evaluation<'i>, EvalError> {
    let mut walk = Walk::new(graph, inputs, options)?;
    loop {
        match walk.advance()? {
            Paused::Done => return walk.finish(),
            Paused::Collective { eqn, op } => {
                if op.ranks() != 1 {
                    return Err(walk.fault(
                        eqn,
                        Fault::Collective {
                            op: graph.eqns()[eqn].op.name(),
                            ranks: op.ranks(),
                        },
                    ));
                }
                let alone = walk.collective_input(eqn)?.data().clone();
                walk.complete(alone)?;
            }
        }
    }
}

/// Where a [`Walk`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paused {
    /// Every equation ran.
    Done,
    /// Equation `eqn` is the collective `op`: its operand is ready, its result waits for
    /// [`Walk::complete`].
    Collective { eqn: usize, op: CollectiveOp },
}

/// One graph's evaluation, run equation by equation and paused at each collective so a group's
/// walks can meet there.
pub(crate) struct Walk<'g, 'i> {
    graph: &'g Graph,
    env: Vec<Option<HostTensor<'i>>>,
    last_use: Vec<Option<usize>>,
    next: usize,
    options: EvalOptions,
}

impl<'g, 'i> Walk<'g, 'i> {
    /// Binds `inputs` (checked against the graph) and stands before the first equation.
    pub(crate) fn new(
        graph: &'g Graph,
        inputs: &'i Inputs<'_>,
        options: EvalOptions,
    ) -> Result<Walk<'g, 'i>, EvalError> {
        let env = inputs
            .resolve(graph)?
            .into_iter()
            .map(|b| b.map(HostTensor::view))
            .collect();
        Ok(Walk {
            graph,
            env,
            last_use: liveness(graph, options.keep_env),
            next: 0,
            options,
        })
    }

    /// The error of equation `i` failing with `fault`.
    pub(crate) fn fault(&self, i: usize, fault: Fault) -> EvalError {
        let eqn = &self.graph.eqns()[i.min(self.graph.eqns().len().saturating_sub(1))];
        EvalError::Fault {
            eqn: i,
            op: eqn.op.name(),
            value: eqn.out,
            label: self
                .graph
                .value(eqn.out)
                .map(|v| v.label.clone())
                .unwrap_or_default(),
            fault: Box::new(fault),
        }
    }

    /// Runs equations up to the end of the graph or the next collective (which it does not run).
    pub(crate) fn advance(&mut self) -> Result<Paused, EvalError> {
        while let Some(eqn) = self.graph.eqns().get(self.next) {
            let i = self.next;
            if let Some(op) = eqn.op.collective() {
                return Ok(Paused::Collective { eqn: i, op });
            }
            let data = run(i, eqn, &mut self.env, &self.last_use, self.options)
                .map_err(|f| self.fault(i, f))?;
            self.store(i, data)?;
        }
        Ok(Paused::Done)
    }

    /// The operand of the collective at equation `i`.
    pub(crate) fn collective_input(&self, i: usize) -> Result<&HostTensor<'i>, EvalError> {
        let id = self
            .graph
            .eqns()
            .get(i)
            .and_then(|e| e.inputs.first())
            .copied()
            .ok_or_else(|| self.fault(i, Fault::MissingOperand { operand: 0 }))?;
        self.env
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| self.fault(i, Fault::Released { value: id }))
    }

    /// Gives the collective the walk paused at its result and moves past it.
    pub(crate) fn complete(&mut self, data: TensorData<'i>) -> Result<(), EvalError> {
        self.store(self.next, data)
    }

    /// Stores equation `i`'s result, releases the operands it read last, and moves past it.
    fn store(&mut self, i: usize, data: TensorData<'i>) -> Result<(), EvalError> {
        let eqn = &self.graph.eqns()[i];
        let out_ty = self
            .graph
            .ty(eqn.out)
            .ok_or_else(|| self.fault(i, Fault::Released { value: eqn.out }))?
            .clone();
        let t = HostTensor::new(out_ty, data).map_err(|e| self.fault(i, Fault::Produced(e)))?;
        for id in &eqn.inputs {
            if self.last_use[id.index()] == Some(i) {
                self.env[id.index()] = None;
            }
        }
        if self.last_use[eqn.out.index()].is_some() {
            self.env[eqn.out.index()] = Some(t);
        }
        self.next = i + 1;
        Ok(())
    }

    /// The outputs and state after [`Paused::Done`].
    pub(crate) fn finish(self) -> Result<Evaluation<'i>, EvalError> {
        collect(self.graph, self.env, self.options.keep_env)
    }
}

fn liveness(graph: &Graph, keep_env: bool) -> Vec<Option<usize>> {
    let n = graph.values().len();
    if keep_env {
        return vec![Some(KEEP); n];
    }
    let mut last = vec![None; n];
    for (i, e) in graph.eqns().iter().enumerate() {
        for id in &e.inputs {
            last[id.index()] = Some(i);
        }
    }
    let outs = graph.outputs();
    for id in outs.primary.iter().chain(outs.state.iter().map(|(_, o)| o)) {
        last[id.index()] = Some(KEEP);
    }
    last
}

fn collect<'i>(
    graph: &Graph,
    mut env: Vec<Option<HostTensor<'i>>>,
    keep_env: bool,
) -> Result<Evaluation<'i>, EvalError> {
    let outs = graph.outputs();
    let order: Vec<ValueId> = outs
        .primary
        .iter()
        .copied()
        .chain(outs.state.iter().map(|&(_, o)| o))
        .collect();
    let mut owned = Vec::with_capacity(order.len());
    for (pos, &id) in order.iter().enumerate() {
        let slot = env
            .get_mut(id.index())
            .ok_or(EvalError::Released { value: id })?;
        // The last reference to a value moves it out (an owned KV cache is not copied again).
        let t = if keep_env || order[pos + 1..].contains(&id) {
            slot.clone()
        } else {
            slot.take()
        };
        owned.push(t.ok_or(EvalError::Released { value: id })?.into_owned());
    }
    let state_tensors = owned.split_off(outs.primary.len());
    let mut state = Vec::with_capacity(state_tensors.len());
    for (&(state_in, _), t) in outs.state.iter().zip(state_tensors) {
        let name = match graph.value(state_in).map(|v| &v.storage) {
            Some(poot_graph_ir::Storage::State(name)) => name.clone(),
            _ => return Err(EvalError::Released { value: state_in }),
        };
        state.push((name, t));
    }
    let env = if keep_env {
        let all = env.into_iter().enumerate().map(|(i, t)| {
            t.ok_or(EvalError::Released {
                value: ValueId(i as u32),
            })
        });
        Some(all.collect::<Result<Vec<_>, _>>()?)
    } else {
        None
    };
    Ok(Evaluation {
        outputs: owned,
        state,
        env,
    })
}

/// An equation's operands in the environment, with operand 0 taken out of it when the equation
/// consumes it (a reshape or an update of a value nothing reads afterwards).
struct Args<'e, 'i> {
    env: &'e [Option<HostTensor<'i>>],
    ids: &'e [ValueId],
    taken: Option<HostTensor<'i>>,
}

impl<'e, 'i> Args<'e, 'i> {
    fn get(&self, k: usize) -> Result<&'e HostTensor<'i>, Fault> {
        let id = self
            .ids
            .get(k)
            .copied()
            .ok_or(Fault::MissingOperand { operand: k })?;
        self.env
            .get(id.index())
            .and_then(Option::as_ref)
            .ok_or(Fault::Released { value: id })
    }

    fn from(&self, k: usize) -> Result<Vec<&'e HostTensor<'i>>, Fault> {
        (k..self.ids.len()).map(|j| self.get(j)).collect()
    }

    /// Operand 0, owned: taken from the environment when this was its last reader, cloned
    /// otherwise (cheap for a borrowed input, a copy for an intermediate).
    fn operand(self) -> Result<HostTensor<'i>, Fault> {
        match self.taken {
            Some(t) => Ok(t),
            None => self.get(0).cloned(),
        }
    }
}

fn consumes_operand(op: &OpKind) -> bool {
    matches!(
        op,
        OpKind::Reshape { .. } | OpKind::DynamicUpdateSlice | OpKind::ScatterUpdate { .. }
    )
}

fn run<'i>(
    i: usize,
    eqn: &Eqn,
    env: &mut [Option<HostTensor<'i>>],
    last_use: &[Option<usize>],
    options: EvalOptions,
) -> Result<TensorData<'i>, Fault> {
    let mut taken = None;
    if consumes_operand(&eqn.op)
        && let Some(&id) = eqn.inputs.first()
        && last_use.get(id.index()) == Some(&Some(i))
        && !eqn.inputs[1..].contains(&id)
    {
        taken = env.get_mut(id.index()).and_then(Option::take);
    }
    let args = Args {
        env,
        ids: &eqn.inputs,
        taken,
    };
    let f64_acc = options.accumulate_f64;
    match &eqn.op {
        OpKind::Literal(s) => Ok(source::literal(*s)),
        OpKind::Iota { shape, axis, dtype } => source::iota(shape.dims(), *axis, *dtype),
        OpKind::Unary(op) => unary::unary(*op, args.get(0)?),
        OpKind::Binary(op) => binary::binary(*op, args.get(0)?, args.get(1)?),
        OpKind::Compare(op) => compare::compare(*op, args.get(0)?, args.get(1)?),
        OpKind::Select => compare::select(args.get(0)?, args.get(1)?, args.get(2)?),
        OpKind::Cast { to } => cast::cast(args.get(0)?, *to),
        OpKind::Reshape { .. } => Ok(args.operand()?.into_data()),
        OpKind::Broadcast { shape } => movement::broadcast(args.get(0)?, shape.dims()),
        OpKind::Transpose { perm } => movement::transpose(args.get(0)?, perm),
        OpKind::Slice { starts, ends } => movement::slice(args.get(0)?, starts, ends),
        OpKind::Concat { axis } => movement::concat(&args.from(0)?, *axis),
        OpKind::Gather { axis } => indexing::gather(args.get(0)?, args.get(1)?, *axis),
        OpKind::TakeAlong { axis } => indexing::take_along(args.get(0)?, args.get(1)?, *axis),
        OpKind::DynamicSlice { sizes } => {
            indexing::dynamic_slice(args.get(0)?, &args.from(1)?, sizes)
        }
        OpKind::DynamicUpdateSlice => {
            let (update, starts) = (args.get(1)?, args.from(2)?);
            indexing::dynamic_update_slice(args.operand()?, update, &starts)
        }
        OpKind::ScatterUpdate { axis } => {
            let (idx, updates) = (args.get(1)?, args.get(2)?);
            indexing::scatter_update(args.operand()?, idx, updates, *axis)
        }
        OpKind::Reduce { op, axis } => reduce::reduce(*op, args.get(0)?, *axis, f64_acc),
        OpKind::ArgMax { axis } => reduce::argmax(args.get(0)?, *axis),
        OpKind::ArgTopK { k } => topk::arg_top_k(args.get(0)?, *k),
        OpKind::MatMul { transpose_rhs } => {
            matmul::matmul(args.get(0)?, args.get(1)?, *transpose_rhs, f64_acc)
        }
        OpKind::IndexedMatMul => {
            matmul::indexed_matmul(args.get(0)?, args.get(1)?, args.get(2)?, f64_acc)
        }
        // The walk stops before a collective: a group completes it (`Walk::complete`).
        OpKind::AllReduceSum { ranks } => Err(Fault::Collective {
            op: "all_reduce_sum",
            ranks: *ranks,
        }),
        OpKind::BroadcastFrom { ranks, .. } => Err(Fault::Collective {
            op: "broadcast_from",
            ranks: *ranks,
        }),
    }
}
