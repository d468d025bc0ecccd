//! The router component on the CPU oracle against plain loops: softmax and sigmoid scores, the
//! top-k ids best first, their weights renormalized or not.

#![allow(clippy::unwrap_used)]

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_formats::{DenseType, StoredType};
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits};
use poot_models::StepShape;
use poot_models::components::{RouterParams, RouterScore, Step, route};
use poot_models::weights::{Role, TensorIndex, TensorMeta, WeightMap, WeightRole};

const TOKENS: usize = 3;
const HIDDEN: usize = 5;
const EXPERTS: usize = 6;

/// A checkpoint holding only layer 0's f32 router.
struct RouterOnly;

impl TensorIndex for RouterOnly {
    fn tensor_meta(&self, name: &str) -> Option<TensorMeta> {
        (name == "router").then(|| TensorMeta {
            shape: vec![EXPERTS as u64, HIDDEN as u64],
            stored: StoredType::Dense(DenseType::F32),
        })
    }
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 250.0 - 2.0)
        .collect()
}

/// The oracle's `(ids, weights)` of `route` over `x [TOKENS, HIDDEN]`.
fn traced(params: RouterParams, x: &[f32], router: &[f32]) -> (Vec<i32>, Vec<f32>) {
    let mut weights = WeightMap::new();
    let role = WeightRole::layer(0, Role::Router);
    weights
        .bind_tensor(
            &RouterOnly,
            role,
            "router",
            Some(&[EXPERTS as u64, HIDDEN as u64]),
        )
        .unwrap();
    let b = Builder::new(TraceLimits::standard(64));
    let step = Step::new(&b, StepShape::new(1, TOKENS, 8), &weights).unwrap();
    let xt = b
        .constant("x", TensorType::new(DType::F32, vec![TOKENS, HIDDEN]))
        .unwrap();
    let (ids, w) = route(&b, &step, 0, xt, &params).unwrap();
    let graph = b.finish(Outputs::new(w).and(ids)).unwrap();
    let mut inputs = Inputs::new();
    for slot in [Slot::Token, Slot::Pos] {
        inputs.set_slot(slot, HostTensor::i32([1, TOKENS], vec![0; TOKENS]).unwrap());
    }
    inputs.set_const("x", HostTensor::f32([TOKENS, HIDDEN], x.to_vec()).unwrap());
    inputs.set_const(
        role.const_name(),
        HostTensor::f32([EXPERTS, HIDDEN], router.to_vec()).unwrap(),
    );
    let out = eval(&graph, &inputs, EvalOptions::default())
        .unwrap()
        .outputs;
    let ids = out[1].as_i32().unwrap().to_vec();
    (ids, out[0].to_f32_vec().unwrap())
}

/// The same in plain f64 loops.
fn naive(params: RouterParams, x: &[f32], router: &[f32]) -> (Vec<i32>, Vec<f32>) {
    let (mut ids, mut weights) = (Vec::new(), Vec::new());
    for t in 0..TOKENS {
        let logits: Vec<f64> = (0..EXPERTS)
            .map(|e| {
                (0..HIDDEN)
                    .map(|h| f64::from(x[t * HIDDEN + h]) * f64::from(router[e * HIDDEN + h]))
                    .sum()
            })
            .collect();
        let scores: Vec<f64> = match params.score {
            RouterScore::Softmax => {
                let m = logits.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = logits.iter().map(|l| (l - m).exp()).sum();
                logits.iter().map(|l| (l - m).exp() / sum).collect()
            }
            RouterScore::Sigmoid => logits.iter().map(|l| 1.0 / (1.0 + (-l).exp())).collect(),
        };
        let mut order: Vec<usize> = (0..EXPERTS).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let top = &order[..params.top_k];
        let sum: f64 = top.iter().map(|&e| scores[e]).sum();
        for &e in top {
            ids.push(e as i32);
            let w = if params.renormalize {
                scores[e] / sum
            } else {
                scores[e]
            };
            weights.push(w as f32);
        }
    }
    (ids, weights)
}

#[test]
fn router_scores_select_and_weigh_as_plain_loops_do() {
    let x = values(TOKENS * HIDDEN, 7);
    let router = values(EXPERTS * HIDDEN, 91);
    for score in [RouterScore::Softmax, RouterScore::Sigmoid] {
        for renormalize in [false, true] {
            for top_k in [1, 2, EXPERTS] {
                let params = RouterParams {
                    experts: EXPERTS,
                    top_k,
                    score,
                    renormalize,
                };
                let (ids, weights) = traced(params, &x, &router);
                let (want_ids, want_weights) = naive(params, &x, &router);
                let what = format!("{score:?} renormalize={renormalize} top_k={top_k}");
                assert_eq!(ids, want_ids, "{what}: ids");
                for (g, w) in weights.iter().zip(&want_weights) {
                    assert!((g - w).abs() <= 1e-6, "{what}: weight {g} vs {w}");
                }
                if renormalize {
                    for t in 0..TOKENS {
                        let sum: f32 = weights[t * top_k..(t + 1) * top_k].iter().sum();
                        assert!((sum - 1.0).abs() <= 1e-6, "{what}: weights sum to {sum}");
                    }
                }
            }
        }
    }
}
