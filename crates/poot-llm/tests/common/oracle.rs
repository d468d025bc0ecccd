//! The CPU oracle's side of a model in device tests: the model's graphs evaluated with the
//! KV cache carried from step to step, weights bound from the handle as the executor gets them
//! (stored bytes, gathered slices, computed tables, component layouts).

#![allow(clippy::unwrap_used, dead_code)]

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_graph_ir::{DType, Graph, Slot};
use poot_llm::ModelHandle;
use poot_models::weights::ConstData;

/// One model on the oracle, with its carried state.
pub struct Oracle<'h> {
    pub handle: &'h ModelHandle,
    pub states: Vec<(String, HostTensor<'static>)>,
}

impl<'h> Oracle<'h> {
    pub fn new(handle: &'h ModelHandle) -> Oracle<'h> {
        Oracle {
            handle,
            states: Vec::new(),
        }
    }

    /// Runs `graph` on `tokens` at positions from `start`; returns its first output as f32.
    pub fn step(&mut self, graph: &Graph, tokens: &[i32], start: usize) -> Vec<f32> {
        let mut inputs = Inputs::new();
        for (_, name, ty) in graph.consts() {
            let data = self
                .handle
                .model()
                .weights()
                .const_data(name, self.handle.store())
                .unwrap();
            let t = match data {
                ConstData::Bytes(b) => HostTensor::from_le_bytes(ty.clone(), b).unwrap(),
                ConstData::Gathered(b) => {
                    HostTensor::from_le_bytes(ty.clone(), std::borrow::Cow::Owned(b)).unwrap()
                }
                ConstData::F32(v) => HostTensor::f32(ty.shape.clone(), v).unwrap(),
                ConstData::Components(parts) => {
                    let DType::Components(format) = ty.dtype else {
                        panic!("components bound to a {} constant", ty.dtype)
                    };
                    let parts = parts
                        .into_iter()
                        .map(|(role, b)| (role.to_string(), b))
                        .collect();
                    HostTensor::components(format, ty.shape.clone(), parts).unwrap()
                }
            };
            inputs.set_const(name, t);
        }
        let pos: Vec<i32> = (start..start + tokens.len()).map(|p| p as i32).collect();
        inputs.set_slot(
            Slot::Token,
            HostTensor::i32([1, tokens.len()], tokens.to_vec()).unwrap(),
        );
        inputs.set_slot(Slot::Pos, HostTensor::i32([1, tokens.len()], pos).unwrap());
        let prev = std::mem::take(&mut self.states);
        for (_, name, ty) in graph.states() {
            let value = match prev.iter().find(|(n, _)| n == name) {
                Some((_, v)) => v.view(),
                None => HostTensor::f32(ty.shape.clone(), vec![0f32; ty.shape.n_elems().unwrap()])
                    .unwrap(),
            };
            inputs.set_state(name, value);
        }
        let out = eval(graph, &inputs, EvalOptions::default()).unwrap();
        self.states = out.state.clone();
        out.outputs[0].to_f32_vec().unwrap()
    }
}

/// The index of the largest value (the first of equals).
pub fn argmax(v: &[f32]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// The largest difference between `got` and `want` relative to `want`'s largest magnitude; a
/// non-finite `got` is infinitely far.
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
    got.iter()
        .zip(want)
        .map(|(g, w)| {
            if g.is_finite() {
                (g - w).abs() / scale
            } else {
                f32::INFINITY
            }
        })
        .fold(0f32, f32::max)
}
