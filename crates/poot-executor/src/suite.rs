//! The shared device suite: graphs run on an executor and compared with the CPU oracle, written
//! once for every backend. A device crate runs it with one line, [`device_suite!`](crate::device_suite)
//! (its tests: the cases, the split tables and the overlapped step).
//!
//! Each case states its tolerance: integer, boolean and movement results must match bit for bit;
//! float results within a relative bound (of the largest reference magnitude) that covers the
//! reassociation the device's reductions do. A non-finite device value where the oracle is
//! finite fails at any tolerance.
//!
//! The oracle evaluates each case's graph as the executor's target rewrites it for precision
//! ([`poot_graph_plan::rounded_for_target`]: on a target multiplying in half precision, the
//! left sides of tiled contractions against f16 or bf16 weights rounded to them; on one
//! multiplying block-quantized weights in 8-bit integers, the left sides rounded to 8-bit
//! blocks), so the tolerances stay those of reassociation: the rounding is in both.

use poot_eval::{EvalOptions, HostTensor, Inputs, eval};
use poot_formats::{
    AwqFormat, Fp8Format, Fp8Scaling, GptqFormat, GptqZeros, GroupSize, MatrixShape, PackedFormat,
    ScaleType,
};
use poot_graph_ir::ops::{self, AttentionOptions, RmsNormOptions, RopeStyle};
use poot_graph_ir::{
    BinaryOp, Builder, CompareOp, ComponentFormat, DType, GgmlType, Graph, OpKind, Outputs,
    ReduceOp, Slot, TensorType, TraceLimits, Traced, UnaryOp, component_const_name,
};

use poot_formats::BlockFormat;
use poot_graph_plan::{Backend, Target, rounded_for_target};

use crate::executor::{ConstBytes, ConstSource, Executor, StepInputs, StepOutputs};

/// How closely a case's outputs must match the oracle.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tolerance {
    Exact,
    /// Largest |device - oracle| over the largest |oracle|.
    Relative(f32),
}

/// One graph with its inputs.
pub struct Case {
    pub name: String,
    pub graph: Graph,
    pub consts: Vec<(String, HostTensor<'static>)>,
    pub slots: Vec<(Slot, HostTensor<'static>)>,
    pub tolerance: Tolerance,
    /// The slots of further steps of the same entry. Carried state starts at zero on both
    /// sides and is carried from step to step; every step's outputs are compared.
    pub later_steps: Vec<Vec<(Slot, HostTensor<'static>)>>,
}

/// The result of one case.
#[derive(Debug)]
pub struct Outcome {
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// Prints how many of `outcomes` passed and panics naming every failed case (a device crate's
/// suite test ends with it).
pub fn assert_all_passed(outcomes: &[Outcome]) {
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|o| !o.passed)
        .map(|o| format!("{}: {}", o.name, o.detail))
        .collect();
    println!(
        "{} passed, {} failed",
        outcomes.len() - failed.len(),
        failed.len()
    );
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        outcomes.len(),
        failed.join("\n")
    );
}

struct Consts(Vec<(String, Vec<u8>)>);

impl ConstSource for Consts {
    fn names(&self) -> Vec<String> {
        self.0.iter().map(|(n, _)| n.clone()).collect()
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| ConstBytes::Stored(b.as_slice().into()))
    }
}

/// A constant's buffers as an executor uploads them: its stored bytes under its name, or a
/// component-format constant's components each under [`component_const_name`].
fn stored(name: &str, t: &HostTensor<'_>) -> Vec<(String, Vec<u8>)> {
    match t.as_components() {
        Ok(parts) => parts
            .iter()
            .map(|(role, b)| (component_const_name(name, role), b.to_vec()))
            .collect(),
        Err(_) => vec![(name.to_string(), t.to_le_bytes())],
    }
}

/// Device words of a dense host tensor (bool and u8 widen to u32 words).
fn device_bytes(t: &HostTensor<'_>) -> Vec<u8> {
    match t.dtype() {
        DType::Bool => t
            .as_bool()
            .map(|v| v.iter().flat_map(|&b| u32::from(b).to_le_bytes()).collect())
            .unwrap_or_default(),
        DType::U8 => t
            .as_u8()
            .map(|v| v.iter().flat_map(|&b| u32::from(b).to_le_bytes()).collect())
            .unwrap_or_default(),
        _ => t.to_le_bytes(),
    }
}

/// A zero tensor of a state's type (states start at zero on the device).
fn zero_state(ty: &TensorType) -> Result<HostTensor<'static>, String> {
    let n = ty.shape.n_elems().ok_or("state too large")?;
    let dims = ty.dims().to_vec();
    match ty.dtype {
        DType::F32 => HostTensor::f32(dims, vec![0f32; n]),
        DType::I32 => HostTensor::i32(dims, vec![0i32; n]),
        DType::U32 => HostTensor::u32(dims, vec![0u32; n]),
        DType::F16 => HostTensor::f16(dims, vec![half::f16::ZERO; n]),
        other => return Err(format!("no zero state of {other}")),
    }
    .map_err(|e| e.to_string())
}

/// Runs one case: for each step, the oracle, then the executor, then the comparison.
pub fn run_case(exec: &mut dyn Executor, case: &Case) -> Outcome {
    run_case_with(exec, case, None)
}

/// A step whose last slot is written while the device runs
/// ([`Executor::step_overlapped`]): an embedding gather and a projection read the early slot,
/// and only the softmax's sum with it reads the late one.
pub fn overlapped_case() -> (Case, Slot) {
    let mut c = CaseBuilder::new(95);
    let table = c.f32("table", &[32, 64]);
    let w = c.f32("w", &[48, 64]);
    let ids = c.slot_i32(Slot::Token, vec![3, 31, 0, 17], &[4]);
    let x = ops::embed(&c.b, table, ids).expect("embed");
    let y = ops::linear(&c.b, x, w, None).expect("linear");
    let late = Slot::Named("late".to_string());
    let values = (0..4 * 48).map(|i: i32| i * 7 % 13 - 6).collect();
    let m = c.slot_i32(late.clone(), values, &[4, 48]);
    let m = c.b.cast(m, DType::F32).expect("cast");
    let p = ops::softmax(&c.b, y, 1).expect("softmax");
    let z = c.b.add(p, m).expect("add");
    let case = c.finish(
        "late slot written while the step runs",
        Outputs::new(z),
        reassociated(64),
    );
    (case, late)
}

/// Runs [`overlapped_case`] with its late slot given through [`Executor::step_overlapped`]
/// (asked for exactly once per step), against the oracle.
pub fn run_overlapped(exec: &mut dyn Executor) -> Outcome {
    let (case, late) = overlapped_case();
    run_case_with(exec, &case, Some(&late))
}

fn run_case_with(exec: &mut dyn Executor, case: &Case, late: Option<&Slot>) -> Outcome {
    let outcome = |passed: bool, detail: String| Outcome {
        name: case.name.clone(),
        passed,
        detail,
    };
    let mut states = Vec::new();
    for (_, name, ty) in case.graph.states() {
        match zero_state(ty) {
            Ok(t) => states.push((name.to_string(), t)),
            Err(e) => return outcome(false, e),
        }
    }
    let consts = Consts(case.consts.iter().flat_map(|(n, t)| stored(n, t)).collect());
    let exe = match exec.load_weights(Box::new(consts)) {
        Ok(e) => e,
        Err(e) => return outcome(false, format!("load_weights: {e}")),
    };
    let entry = match exec.add_entry(exe, &case.graph, &case.name) {
        Ok(e) => e,
        Err(e) => {
            exec.unload(exe);
            return outcome(false, format!("add_entry: {e}"));
        }
    };
    let graph = match rounded_for_target(&case.graph, exec.target()) {
        Ok(g) => g,
        Err(e) => {
            exec.remove_entry(entry);
            exec.unload(exe);
            return outcome(false, format!("rounding for the target: {e}"));
        }
    };
    let tolerance = with_half_flips(case.tolerance, &case.graph, &graph);
    let tolerance = with_division_ulps(tolerance, &graph, exec.target());
    let steps = std::iter::once(&case.slots).chain(&case.later_steps);
    let mut result = outcome(true, String::new());
    for (n, slots) in steps.enumerate() {
        let at = if case.later_steps.is_empty() {
            String::new()
        } else {
            format!("step {n}: ")
        };
        let mut inputs = Inputs::new();
        for (name, t) in &case.consts {
            inputs.set_const(name.clone(), t.view());
        }
        for (s, t) in slots {
            inputs.set_slot(s.clone(), t.view());
        }
        for (name, t) in &states {
            inputs.set_state(name.clone(), t.view());
        }
        let oracle = match eval(&graph, &inputs, EvalOptions::default()) {
            Ok(o) => o,
            Err(e) => {
                result = outcome(false, format!("{at}oracle: {e}"));
                break;
            }
        };
        let mut step_inputs = StepInputs::new();
        for (s, t) in slots {
            step_inputs.set(s.clone(), device_bytes(t));
        }
        let mut out = StepOutputs::default();
        let stepped = match late {
            None => exec.step(entry, &step_inputs, &mut out),
            Some(slot) => {
                let bytes = step_inputs.remove(slot).unwrap_or_default();
                let mut asked = 0;
                let mut give = || {
                    asked += 1;
                    let mut later = StepInputs::new();
                    later.set(slot.clone(), bytes.clone());
                    later
                };
                let r = exec.step_overlapped(entry, &step_inputs, &mut give, &mut out);
                if r.is_ok() && asked != 1 {
                    result = outcome(
                        false,
                        format!("{at}the late slot was asked for {asked} times"),
                    );
                    break;
                }
                r
            }
        };
        if let Err(e) = stepped {
            result = outcome(false, format!("{at}step: {e}"));
            break;
        }
        let mut failed = None;
        for (i, want) in oracle.outputs.iter().enumerate() {
            let Some(got) = out.values.get(i) else {
                failed = Some(format!("{at}output {i} missing"));
                break;
            };
            if let Err(why) = compare(want, got, tolerance) {
                failed = Some(format!("{at}output {i}: {why}"));
                break;
            }
        }
        if let Some(why) = failed {
            result = outcome(false, why);
            break;
        }
        states = oracle.state;
    }
    exec.remove_entry(entry);
    exec.unload(exe);
    result
}

/// The bound for a step with an f32 division on a target whose kernel language does not round
/// division correctly: WGSL allows a quotient 2.5 units in the last place off (NVIDIA's Vulkan
/// driver returns one a unit off; lavapipe, like CUDA and C, rounds correctly). Exact becomes 3
/// such units of the outputs' largest value; a relative bound is widened to that.
fn with_division_ulps(tolerance: Tolerance, graph: &Graph, target: &Target) -> Tolerance {
    let inexact_language = matches!(target.backend, Backend::Wgpu | Backend::Vulkan);
    let divides = graph.eqns().iter().any(|e| {
        e.op == OpKind::Binary(BinaryOp::Div)
            && graph.values()[e.out.index()].ty.dtype == DType::F32
    });
    if !inexact_language || !divides {
        return tolerance;
    }
    let units = 3.0 * f32::EPSILON;
    match tolerance {
        Tolerance::Exact => Tolerance::Relative(units),
        Tolerance::Relative(t) => Tolerance::Relative(t.max(units)),
    }
}

/// The bound for a step the target rounds to a half type (`rounded` has more `Cast` to F16 or
/// BF16 than `original`): where a rounded value is a sum the device adds in another order than
/// the oracle, the two can land on neighbouring halves (a flip of one unit in the last place,
/// 2^-10 of the value for f16, 2^-7 for bf16), which later contractions carry into the outputs.
/// A relative bound is widened to one such unit of the outputs' largest value; exact stays
/// exact (a case that must be exact has no rounded sums).
fn with_half_flips(tolerance: Tolerance, original: &Graph, rounded: &Graph) -> Tolerance {
    let casts = |g: &Graph, to: DType| {
        g.eqns()
            .iter()
            .filter(|e| e.op == OpKind::Cast { to })
            .count()
    };
    let unit = if casts(rounded, DType::BF16) > casts(original, DType::BF16) {
        2f32.powi(-7)
    } else if casts(rounded, DType::F16) > casts(original, DType::F16) {
        2f32.powi(-10)
    } else {
        return tolerance;
    };
    match tolerance {
        Tolerance::Relative(t) => Tolerance::Relative(t.max(unit)),
        Tolerance::Exact => Tolerance::Exact,
    }
}

fn words(bytes: &[u8]) -> impl Iterator<Item = [u8; 4]> + '_ {
    bytes.chunks_exact(4).map(|w| [w[0], w[1], w[2], w[3]])
}

fn compare(want: &HostTensor<'_>, got: &[u8], tol: Tolerance) -> Result<(), String> {
    match want.dtype() {
        DType::F32 | DType::F16 | DType::BF16 => {
            let want = want.to_f32_vec().map_err(|e| e.to_string())?;
            let got: Vec<f32> = words(got).map(f32::from_le_bytes).collect();
            if got.len() != want.len() {
                return Err(format!("{} values, expected {}", got.len(), want.len()));
            }
            let scale = want
                .iter()
                .fold(0f32, |m, x| if x.is_finite() { m.max(x.abs()) } else { m })
                .max(1e-30);
            let mut worst = (0f32, 0usize);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if w.is_finite() != g.is_finite() || (w.is_nan() != g.is_nan()) {
                    return Err(format!("element {i}: device {g}, oracle {w}"));
                }
                if !w.is_finite() {
                    if g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan()) {
                        return Err(format!("element {i}: device {g}, oracle {w}"));
                    }
                    continue;
                }
                let err = match tol {
                    Tolerance::Exact => {
                        if g.to_bits() != w.to_bits() && !(*g == 0.0 && *w == 0.0) {
                            return Err(format!(
                                "element {i}: device {g:e}, oracle {w:e} (exact required)"
                            ));
                        }
                        0.0
                    }
                    Tolerance::Relative(_) => (g - w).abs() / scale,
                };
                if err > worst.0 {
                    worst = (err, i);
                }
            }
            if let Tolerance::Relative(t) = tol
                && worst.0 > t
            {
                return Err(format!(
                    "relative error {:e} at element {} (tolerance {t:e})",
                    worst.0, worst.1
                ));
            }
            Ok(())
        }
        DType::I32 => {
            let want = want.as_i32().map_err(|e| e.to_string())?;
            let got: Vec<i32> = words(got).map(i32::from_le_bytes).collect();
            if got != want {
                Err(format!("device {:?}, oracle {:?}", head(&got), head(want)))
            } else {
                Ok(())
            }
        }
        DType::U32 => {
            let want = want.as_u32().map_err(|e| e.to_string())?;
            let got: Vec<u32> = words(got).map(u32::from_le_bytes).collect();
            if got != want {
                Err(format!("device {:?}, oracle {:?}", head(&got), head(want)))
            } else {
                Ok(())
            }
        }
        DType::Bool | DType::U8 => {
            let want: Vec<u32> = match want.dtype() {
                DType::Bool => want
                    .as_bool()
                    .map_err(|e| e.to_string())?
                    .iter()
                    .map(|&b| u32::from(b))
                    .collect(),
                _ => want
                    .as_u8()
                    .map_err(|e| e.to_string())?
                    .iter()
                    .map(|&b| u32::from(b))
                    .collect(),
            };
            let got: Vec<u32> = words(got).map(u32::from_le_bytes).collect();
            if got != want {
                Err(format!("device {:?}, oracle {:?}", head(&got), head(&want)))
            } else {
                Ok(())
            }
        }
        DType::Packed(_) | DType::Components(_) => {
            Err("packed outputs are not comparable".to_string())
        }
    }
}

fn head<T: Clone>(v: &[T]) -> Vec<T> {
    v.iter().take(8).cloned().collect()
}

/// A deterministic generator for case data.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }

    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) as f32
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Builds a case graph: `body` declares inputs through the case builder and returns outputs.
struct CaseBuilder {
    b: Builder,
    rng: Rng,
    consts: Vec<(String, HostTensor<'static>)>,
    slots: Vec<(Slot, HostTensor<'static>)>,
}

impl CaseBuilder {
    fn new(seed: u64) -> CaseBuilder {
        CaseBuilder {
            b: Builder::new(TraceLimits::standard(4096)),
            rng: Rng(seed),
            consts: Vec::new(),
            slots: Vec::new(),
        }
    }

    fn f32(&mut self, name: &str, dims: &[usize]) -> Traced {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.rng.f32()).collect();
        self.consts.push((
            name.to_string(),
            HostTensor::f32(dims.to_vec(), v).expect("sized"),
        ));
        self.b
            .constant(name, TensorType::new(DType::F32, dims.to_vec()))
            .expect("fresh name")
    }

    /// A constant holding `values`.
    fn f32_values(&mut self, name: &str, dims: &[usize], values: Vec<f32>) -> Traced {
        self.consts.push((
            name.to_string(),
            HostTensor::f32(dims.to_vec(), values).expect("sized"),
        ));
        self.b
            .constant(name, TensorType::new(DType::F32, dims.to_vec()))
            .expect("fresh name")
    }

    fn positive(&mut self, name: &str, dims: &[usize]) -> Traced {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.rng.f32().abs() + 0.25).collect();
        self.consts.push((
            name.to_string(),
            HostTensor::f32(dims.to_vec(), v).expect("sized"),
        ));
        self.b
            .constant(name, TensorType::new(DType::F32, dims.to_vec()))
            .expect("fresh name")
    }

    fn half(&mut self, name: &str, dims: &[usize], dtype: DType) -> Traced {
        let n: usize = dims.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.rng.f32()).collect();
        let t = match dtype {
            DType::F16 => HostTensor::f16(
                dims.to_vec(),
                v.iter()
                    .map(|&x| half::f16::from_f32(x))
                    .collect::<Vec<_>>(),
            ),
            _ => HostTensor::bf16(
                dims.to_vec(),
                v.iter()
                    .map(|&x| half::bf16::from_f32(x))
                    .collect::<Vec<_>>(),
            ),
        };
        self.consts.push((name.to_string(), t.expect("sized")));
        self.b
            .constant(name, TensorType::new(dtype, dims.to_vec()))
            .expect("fresh name")
    }

    fn i32(&mut self, name: &str, dims: &[usize], below: i32) -> Traced {
        let n: usize = dims.iter().product();
        let v: Vec<i32> = (0..n)
            .map(|_| self.rng.below(below as u64) as i32)
            .collect();
        self.consts.push((
            name.to_string(),
            HostTensor::i32(dims.to_vec(), v).expect("sized"),
        ));
        self.b
            .constant(name, TensorType::new(DType::I32, dims.to_vec()))
            .expect("fresh name")
    }

    fn slot_i32(&mut self, slot: Slot, values: Vec<i32>, dims: &[usize]) -> Traced {
        self.slots.push((
            slot.clone(),
            HostTensor::i32(dims.to_vec(), values).expect("sized"),
        ));
        self.b
            .slot(slot, TensorType::new(DType::I32, dims.to_vec()))
            .expect("fresh slot")
    }

    /// Random blocks of a ggml block format with realistic scales: every f16 field (a scale or
    /// minimum) small and finite, every E8M0 exponent near 1.
    fn packed(&mut self, name: &str, format: GgmlType, rows: usize, k: usize) -> Traced {
        self.packed_dims(name, format, &[rows, k])
    }

    /// [`CaseBuilder::packed`] of any rank (an expert stack `[experts, rows, k]`): blocks run
    /// along the last dimension.
    fn packed_dims(&mut self, name: &str, format: GgmlType, dims: &[usize]) -> Traced {
        let bytes_per_block = format.block_bytes();
        let n_blocks = dims.iter().product::<usize>() / format.block_elems();
        let mut bytes = vec![0u8; n_blocks * bytes_per_block];
        for b in bytes.iter_mut() {
            *b = self.rng.next() as u8;
        }
        let fields = match format.packed_format() {
            Ok(Some(poot_formats::PackedFormat::Block(b))) => b.fields(),
            _ => &[],
        };
        for blk in 0..n_blocks {
            for f in fields {
                let at = blk * bytes_per_block + f.offset_bytes;
                match f.kind {
                    poot_formats::FieldKind::F16 => {
                        let v = half::f16::from_f32(self.rng.f32() * 0.05).to_le_bytes();
                        bytes[at..at + 2].copy_from_slice(&v);
                    }
                    poot_formats::FieldKind::E8M0 => bytes[at] = 120 + self.rng.below(8) as u8,
                    _ => {}
                }
            }
        }
        let t = HostTensor::packed(format, dims.to_vec(), bytes).expect("sized");
        self.consts.push((name.to_string(), t));
        self.b
            .constant(name, TensorType::new(DType::Packed(format), dims.to_vec()))
            .expect("fresh name")
    }

    /// A random admitted payload of a Hugging Face packed `format` (`poot_formats::sample`),
    /// bound as a component-format constant.
    fn components(&mut self, name: &str, format: PackedFormat, rows: usize, k: usize) -> Traced {
        let cf = ComponentFormat::new(format).expect("suite formats are component formats");
        let parts =
            poot_formats::sample::components(format, MatrixShape::new(rows, k), self.rng.next())
                .expect("suite shapes are admitted")
                .into_iter()
                .map(|(role, b)| (role.to_string(), b.into()))
                .collect();
        let t = HostTensor::components(cf, vec![rows, k], parts).expect("sized");
        self.consts.push((name.to_string(), t));
        self.b
            .constant(name, TensorType::new(DType::Components(cf), vec![rows, k]))
            .expect("fresh name")
    }

    fn finish(self, name: &str, outputs: Outputs, tolerance: Tolerance) -> Case {
        let graph = self
            .b
            .finish(outputs)
            .expect("suite graphs are well formed");
        Case {
            name: name.to_string(),
            graph,
            consts: self.consts,
            slots: self.slots,
            tolerance,
            later_steps: Vec::new(),
        }
    }
}

/// Float math through the device's libm: a few ulps.
const MATH: Tolerance = Tolerance::Relative(1e-5);
/// Reductions and contractions reassociate sums.
const SUMS: Tolerance = Tolerance::Relative(1e-4);
/// Where the graph rounds keys and values to f16 (an f16 KV cache), a sum reassociated before
/// the rounding may land on the neighbouring half: one f16 unit of that element. Through the
/// scores, the softmax, the output projection and the feed-forward after them a layer's output
/// moves by up to about two such units of its largest value (9.9e-4 measured on the H100 for
/// the prefill case), so two units are allowed.
const HALF_FLIP: Tolerance = Tolerance::Relative(1.0 / 512.0);

fn unary_case(op: UnaryOp) -> Case {
    let mut c = CaseBuilder::new(op as u64 + 1);
    let x = match op {
        UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip => c.positive("x", &[3, 37]),
        _ => c.f32("x", &[3, 37]),
    };
    let x = if op == UnaryOp::Not {
        c.b.compare(
            CompareOp::Gt,
            x,
            c.b.broadcast(c.b.lit_f32(0.0).expect("lit"), [3, 37])
                .expect("b"),
        )
        .expect("cmp")
    } else {
        x
    };
    let y = c.b.unary(op, x).expect("typed");
    let exact = matches!(
        op,
        UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Not
    );
    c.finish(
        &format!("unary {}", op.name()),
        Outputs::new(y),
        if exact { Tolerance::Exact } else { MATH },
    )
}

fn binary_case(op: BinaryOp) -> Case {
    let mut c = CaseBuilder::new(100 + op as u64);
    let (x, y, tol) = match op {
        BinaryOp::Rem
        | BinaryOp::Shl
        | BinaryOp::Shr
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor => (
            c.i32("x", &[4, 33], 1000),
            c.i32("y", &[4, 33], 31),
            Tolerance::Exact,
        ),
        BinaryOp::Pow => (c.positive("x", &[4, 33]), c.f32("y", &[4, 33]), MATH),
        _ => (
            c.f32("x", &[4, 33]),
            c.positive("y", &[4, 33]),
            Tolerance::Exact,
        ),
    };
    let (x, y) = if op == BinaryOp::Rem {
        (
            x,
            c.b.add(
                y,
                c.b.broadcast(c.b.lit_i32(1).expect("l"), [4, 33])
                    .expect("b"),
            )
            .expect("+"),
        )
    } else {
        (x, y)
    };
    let z = c.b.binary(op, x, y).expect("typed");
    c.finish(&format!("binary {}", op.name()), Outputs::new(z), tol)
}

fn composite_cases() -> Vec<Case> {
    let mut cases = Vec::new();

    let mut c = CaseBuilder::new(7);
    let x = c.f32("x", &[2, 5, 64]);
    let w = c.half("w", &[64], DType::BF16);
    let y = ops::rmsnorm_with(
        &c.b,
        x,
        w,
        RmsNormOptions {
            eps: 1e-6,
            weight_offset: 1.0,
        },
    )
    .expect("rmsnorm");
    cases.push(c.finish("rmsnorm (bf16 scale, offset)", Outputs::new(y), SUMS));

    let mut c = CaseBuilder::new(8);
    let x = c.f32("x", &[3, 48]);
    let g = c.f32("g", &[48]);
    let bb = c.f32("bias", &[48]);
    let y = ops::layernorm(&c.b, x, g, bb, 1e-5).expect("layernorm");
    cases.push(c.finish("layernorm", Outputs::new(y), SUMS));

    let mut c = CaseBuilder::new(9);
    let x = c.f32("x", &[4, 7, 50]);
    let y = ops::softmax(&c.b, x, 2).expect("softmax");
    cases.push(c.finish("softmax", Outputs::new(y), SUMS));

    for (i, style) in [RopeStyle::HalfSplit, RopeStyle::Interleaved]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(10 + i as u64);
        let x = c.f32("x", &[1, 3, 4, 16]);
        let cos = c.f32("cos", &[32, 6]);
        let sin = c.f32("sin", &[32, 6]);
        let pos = c.slot_i32(Slot::Pos, vec![5, 6, 7, 31], &[1, 4]);
        let y = ops::rope(&c.b, x, cos, sin, pos, style).expect("rope");
        cases.push(c.finish(
            &format!("rope {style:?} (partial rotary)"),
            Outputs::new(y),
            MATH,
        ));
    }

    let mut c = CaseBuilder::new(12);
    let q = c.f32("q", &[1, 4, 3, 16]);
    let k = c.f32("k", &[1, 2, 10, 16]);
    let v = c.f32("v", &[1, 2, 10, 16]);
    let pos = c.slot_i32(Slot::Pos, vec![4, 5, 6], &[1, 3]);
    let mask = ops::causal_mask(&c.b, pos, 10, Some(4)).expect("mask");
    let o = ops::attention_masked(
        &c.b,
        q,
        k,
        v,
        mask,
        AttentionOptions {
            n_rep: 2,
            scale: 0.25,
            softcap: Some(30.0),
        },
    )
    .expect("attention");
    cases.push(c.finish("attention (GQA, window, softcap)", Outputs::new(o), SUMS));

    let mut c = CaseBuilder::new(13);
    let g = c.f32("g", &[3, 40]);
    let u = c.f32("u", &[3, 40]);
    let s = ops::swiglu(&c.b, g, u).expect("swiglu");
    let e = ops::gelu_erf(&c.b, g).expect("gelu");
    let t = ops::gelu_tanh(&c.b, u).expect("gelu");
    cases.push(c.finish(
        "swiglu, gelu_erf, gelu_tanh",
        Outputs::new(s).and(e).and(t),
        MATH,
    ));
    cases
}

fn movement_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut c = CaseBuilder::new(20);
    let x = c.f32("x", &[2, 3, 4]);
    let t = c.b.transpose(x, vec![2, 0, 1]).expect("t");
    let r = c.b.reshape(t, [4, 6]).expect("r");
    let s = c.b.slice(r, vec![1, 2], vec![3, 6]).expect("s");
    let bcast =
        c.b.broadcast(c.b.reshape(x, [1, 2, 12]).expect("r"), [3, 2, 12])
            .expect("b");
    let cat = c.b.concat(&[s, s, s], 1).expect("cat");
    cases.push(c.finish(
        "transpose, reshape, slice, broadcast, concat",
        Outputs::new(cat).and(bcast),
        Tolerance::Exact,
    ));

    let mut c = CaseBuilder::new(21);
    let table = c.f32("table", &[50, 8]);
    let ids = c.slot_i32(Slot::Token, vec![3, 49, 0, 17, 3], &[1, 5]);
    let rows = c.b.gather(table, ids, 0).expect("gather");
    let data = c.f32("data", &[4, 9]);
    let idx = c.i32("idx", &[4, 3], 9);
    let along = c.b.take_along(data, idx, 1).expect("take");
    cases.push(c.finish(
        "gather rows, take_along",
        Outputs::new(rows).and(along),
        Tolerance::Exact,
    ));

    let mut c = CaseBuilder::new(22);
    let cache = c.f32("cache", &[1, 2, 12, 4]);
    let new = c.f32("new", &[1, 2, 3, 4]);
    let pos = c.slot_i32(Slot::Pos, vec![7], &[]);
    let zero = c.b.lit_i32(0).expect("0");
    let upd =
        c.b.dynamic_update_slice(cache, new, &[zero, zero, pos, zero])
            .expect("dus");
    let win =
        c.b.dynamic_slice(upd, &[zero, zero, pos, zero], vec![1, 2, 4, 4])
            .expect("ds");
    cases.push(c.finish(
        "dynamic update slice, dynamic slice",
        Outputs::new(upd).and(win),
        Tolerance::Exact,
    ));

    let mut c = CaseBuilder::new(23);
    let op = c.f32("op", &[3, 10]);
    let upd = c.f32("upd", &[3, 4]);
    let at = c.slot_i32(Slot::WriteMap, vec![9, 0, 4, 2], &[4]);
    let s = c.b.scatter_update(op, at, upd, 1).expect("scatter");
    cases.push(c.finish("scatter update", Outputs::new(s), Tolerance::Exact));

    let mut c = CaseBuilder::new(24);
    let x = c.f32("x", &[3, 4]);
    let i = c.b.iota([3, 4], 1, DType::I32).expect("iota");
    let y = c.b.cast(x, DType::I32).expect("cast");
    let h = c.b.cast(x, DType::BF16).expect("cast");
    let back = c.b.cast(h, DType::F32).expect("cast");
    let gt =
        c.b.compare(
            CompareOp::Gt,
            x,
            c.b.broadcast(c.b.lit_f32(0.0).expect("l"), [3, 4])
                .expect("b"),
        )
        .expect("cmp");
    let sel = c.b.select(gt, x, c.b.neg(x).expect("neg")).expect("sel");
    cases.push(c.finish(
        "iota, casts, compare, select",
        Outputs::new(i).and(y).and(back).and(sel).and(gt),
        Tolerance::Exact,
    ));
    cases
}

fn reduction_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, op) in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(30 + i as u64);
        let x = c.f32("x", &[3, 300, 5]);
        let a = c.b.reduce(op, x, 1).expect("reduce");
        let z = c.b.reduce(op, x, 2).expect("reduce");
        let tol = if op == ReduceOp::Sum {
            SUMS
        } else {
            Tolerance::Exact
        };
        cases.push(c.finish(
            &format!("{} over a long and a short axis", op.name()),
            Outputs::new(a).and(z),
            tol,
        ));
    }
    let mut c = CaseBuilder::new(33);
    let x = c.f32("x", &[4, 77]);
    let am = c.b.argmax(x, 1).expect("argmax");
    let top = c.b.arg_top_k(x, 5).expect("topk");
    cases.push(c.finish(
        "argmax, arg_top_k",
        Outputs::new(am).and(top),
        Tolerance::Exact,
    ));
    // A router's top 8 of 128 (ranked in one pass): ties, NaN, signed zeros, infinities; an
    // i32 row beside it.
    let mut c = CaseBuilder::new(34);
    let mut v: Vec<f32> = (0..4 * 128).map(|_| c.rng.f32()).collect();
    for at in [5, 77, 127] {
        v[at] = 3.0;
    }
    for at in [128 + 40, 128 + 2] {
        v[at] = f32::NAN;
    }
    v[128 + 90] = f32::INFINITY;
    for (i, x) in v[256..384].iter_mut().enumerate() {
        *x = if i % 3 == 0 { -0.0 } else { 0.0 };
    }
    v[256 + 100] = f32::NEG_INFINITY;
    for x in &mut v[384..] {
        *x = -*x;
    }
    let x = c.f32_values("x", &[4, 128], v);
    let top = c.b.arg_top_k(x, 8).expect("top-k");
    let y = c.f32("y", &[2, 50]);
    let scaled =
        c.b.mul(
            y,
            c.b.broadcast(c.b.lit_f32(3.0).expect("l"), [2, 50])
                .expect("b"),
        )
        .expect("mul");
    let xi = c.b.cast(scaled, DType::I32).expect("cast");
    let top_i = c.b.arg_top_k(xi, 3).expect("top-k");
    cases.push(c.finish(
        "arg_top_k of 8 among 128 (ties, NaN, signed zeros, infinities)",
        Outputs::new(top).and(top_i),
        Tolerance::Exact,
    ));
    cases
}

fn contraction_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut c = CaseBuilder::new(40);
    let x = c.f32("x", &[2, 3, 70]);
    let w = c.f32("w", &[70, 9]);
    let y = c.b.matmul(x, w, false).expect("mm");
    let wt = c.f32("wt", &[9, 70]);
    let yt = c.b.matmul(x, wt, true).expect("mm");
    let a = c.f32("a", &[2, 5, 6]);
    let bm = c.f32("bm", &[2, 6, 4]);
    let batched = c.b.matmul(a, bm, false).expect("mm");
    cases.push(c.finish(
        "matmul f32 (plain, transposed, batched)",
        Outputs::new(y).and(yt).and(batched),
        SUMS,
    ));
    for (i, dtype) in [DType::F16, DType::BF16].into_iter().enumerate() {
        let mut c = CaseBuilder::new(41 + i as u64);
        let x = c.f32("x", &[3, 64]);
        let w = c.half("w", &[10, 64], dtype);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(
            &format!("linear with {dtype} weights"),
            Outputs::new(y),
            SUMS,
        ));
    }
    for (i, format) in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q8_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(50 + i as u64);
        let k = if format.block_elems() == 256 { 512 } else { 96 };
        let x = c.f32("x", &[2, k]);
        let w = c.packed("w", format, 6, k);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        let ids = c.slot_i32(Slot::Token, vec![5, 0, 2], &[3]);
        let rows = c.b.gather(w, ids, 0).expect("gather");
        cases.push(c.finish(
            &format!("{} weights: linear and row gather", format.name()),
            Outputs::new(y).and(rows),
            SUMS,
        ));
    }
    // A prefill chunk's rows: where the target multiplies block weights in 8-bit integers, the
    // left side is rounded to 8-bit blocks in the graph too.
    for (i, format) in [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(70 + i as u64);
        let k = if format.block_elems() == 256 {
            512
        } else {
            160
        };
        let x = c.f32("x", &[20, k]);
        let w = c.packed("w", format, 40, k);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(
            &format!("{} weights: linear over a prefill's rows", format.name()),
            Outputs::new(y),
            SUMS,
        ));
    }
    // Sibling projections of one normalized left side (rounded once) and a residual sum.
    let mut c = CaseBuilder::new(80);
    let (rows, d) = (24, 128);
    let x = c.f32("x", &[rows, d]);
    let scale = c.f32("scale", &[d]);
    let projections = [GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q4_1]
        .into_iter()
        .enumerate()
        .map(|(i, f)| c.packed(&format!("w{i}"), f, d, d))
        .collect::<Vec<_>>();
    let b = &c.b;
    let h = ops::rmsnorm_with(
        b,
        x,
        scale,
        RmsNormOptions {
            eps: 1e-6,
            weight_offset: 0.0,
        },
    )
    .expect("rmsnorm");
    let mut sum = x;
    for w in projections {
        sum = b
            .add(sum, ops::linear(b, h, w, None).expect("linear"))
            .expect("add");
    }
    cases.push(c.finish(
        "three block-weight projections of one normalized prefill chunk, summed",
        Outputs::new(sum),
        SUMS,
    ));
    let mut c = CaseBuilder::new(60);
    let x = c.f32("x", &[5, 32]);
    let experts = c.f32("experts", &[4, 6, 32]);
    let ids = c.i32("ids", &[5], 4);
    let y = c.b.indexed_matmul(x, experts, ids).expect("imm");
    cases.push(c.finish("indexed matmul (per-row expert)", Outputs::new(y), SUMS));
    cases
}

/// Routed-expert contractions as a mixture-of-experts layer runs them: `[experts, out, in]`
/// stacks in every weight format read per (token, slot) row by expert id, with loads that are
/// uneven and experts that no row selects; and whole routed layers (router, top-k, weights
/// taken along, the experts, the weighted sum) with k = 1 and k = 8.
fn expert_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // Twelve rows: expert 2 takes seven, 5 three, 7 and 0 one each; 1, 3, 4 and 6 none.
    let uneven = vec![2, 2, 5, 2, 7, 2, 2, 5, 0, 2, 5, 2];
    let formats: Vec<DType> = [
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::MXFP4,
    ]
    .into_iter()
    .map(DType::Packed)
    .chain([DType::F16, DType::BF16])
    .collect();
    for (i, dtype) in formats.into_iter().enumerate() {
        let mut c = CaseBuilder::new(200 + i as u64);
        let k = match dtype {
            DType::Packed(f) if f.block_elems() == 256 => 256,
            _ => 64,
        };
        let experts = match dtype {
            DType::Packed(f) => c.packed_dims("experts", f, &[8, 24, k]),
            d => c.half("experts", &[8, 24, k], d),
        };
        let x = c.f32("x", &[uneven.len(), k]);
        let ids = c.slot_i32(
            Slot::Named("expert_ids".into()),
            uneven.clone(),
            &[uneven.len()],
        );
        let y = c.b.indexed_matmul(x, experts, ids).expect("indexed matmul");
        cases.push(c.finish(
            &format!("{dtype} expert stack, uneven loads, four experts unselected"),
            Outputs::new(y),
            reassociated(k),
        ));
    }
    // A prompt chunk's rows: more than a decode step's, listed by expert first. Expert 2
    // takes every third row (ragged groups of eight), 5 a few more, 1, 3 and 7 none; the
    // columns are no multiple of a workgroup's, and the Q4_K rows are longer than one staged
    // span.
    let many: Vec<i32> = (0..70)
        .map(|t| match t {
            t if t % 3 == 0 => 2,
            t if t % 7 == 1 => 5,
            t => (t % 4) * 2,
        })
        .collect();
    for (i, (dtype, k)) in [
        (DType::Packed(GgmlType::Q4_K), 2048),
        (DType::Packed(GgmlType::Q8_0), 96),
        (DType::F16, 320),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(230 + i as u64);
        let experts = match dtype {
            DType::Packed(f) => c.packed_dims("experts", f, &[8, 40, k]),
            d => c.half("experts", &[8, 40, k], d),
        };
        let x = c.f32("x", &[many.len(), k]);
        let ids = c.slot_i32(
            Slot::Named("expert_ids".into()),
            many.clone(),
            &[many.len()],
        );
        let y = c.b.indexed_matmul(x, experts, ids).expect("indexed matmul");
        cases.push(c.finish(
            &format!("{dtype} expert stack, 70 rows grouped by expert, three unselected"),
            Outputs::new(y),
            reassociated(k),
        ));
    }
    // A chunk whose rows nearly all pick one expert: its groups are shared by several
    // workgroups.
    let crowded: Vec<i32> = (0..300).map(|t| if t % 10 == 0 { 3 } else { 6 }).collect();
    let mut c = CaseBuilder::new(233);
    let experts = c.packed_dims("experts", GgmlType::Q4_0, &[8, 40, 128]);
    let x = c.f32("x", &[crowded.len(), 128]);
    let ids = c.slot_i32(
        Slot::Named("expert_ids".into()),
        crowded.clone(),
        &[crowded.len()],
    );
    let y = c.b.indexed_matmul(x, experts, ids).expect("indexed matmul");
    cases.push(c.finish(
        "Q4_0 expert stack, 300 rows crowding one expert",
        Outputs::new(y),
        reassociated(128),
    ));
    // The last: a prompt chunk's 160 (token, expert) rows, every stack in blocks (tiles over
    // each expert's rows where the target stages block tiles).
    for (i, (top_k, format, tokens, down_type)) in [
        (1, GgmlType::Q4_K, 5, DType::F16),
        (8, GgmlType::Q8_0, 5, DType::F16),
        (2, GgmlType::MXFP4, 5, DType::F16),
        (8, GgmlType::Q4_K, 20, DType::Packed(GgmlType::Q8_0)),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(220 + i as u64);
        let (d, ff, n_experts) = (256, 64, 8);
        let x = c.f32("x", &[tokens, d]);
        let router = c.f32("router", &[n_experts, d]);
        let gate = c.packed_dims("gate", format, &[n_experts, ff, d]);
        let up = c.packed_dims("up", format, &[n_experts, ff, d]);
        let down = match down_type {
            DType::Packed(f) => c.packed_dims("down", f, &[n_experts, d, ff]),
            half => c.half("down", &[n_experts, d, ff], half),
        };
        let b = &c.b;
        let scores =
            ops::softmax(b, ops::linear(b, x, router, None).expect("router"), 1).expect("softmax");
        let ids = b.arg_top_k(scores, top_k).expect("top-k");
        let weights = b.take_along(scores, ids, 1).expect("take along");
        let rows = b
            .reshape(
                b.broadcast(b.reshape(x, [tokens, 1, d]).expect("r"), [tokens, top_k, d])
                    .expect("repeat"),
                [tokens * top_k, d],
            )
            .expect("rows");
        let row_ids = b.reshape(ids, [tokens * top_k]).expect("ids");
        let g = b.indexed_matmul(rows, gate, row_ids).expect("gate");
        let u = b.indexed_matmul(rows, up, row_ids).expect("up");
        let h = b.mul(ops::silu(b, g).expect("silu"), u).expect("mul");
        let o = b.indexed_matmul(h, down, row_ids).expect("down");
        let w = b.reshape(weights, [tokens * top_k, 1]).expect("w");
        let weighted = ops::binary_bcast(b, BinaryOp::Mul, o, w).expect("weighted");
        let y = b
            .reduce_sum(b.reshape(weighted, [tokens, top_k, d]).expect("r"), 1)
            .expect("sum");
        let down = match down_type {
            DType::Packed(f) => format!(", {} down", f.name()),
            _ => String::new(),
        };
        cases.push(c.finish(
            &format!(
                "routed experts, top-{top_k} of {n_experts}, {} stacks{down}, {tokens} tokens",
                format.name()
            ),
            Outputs::new(y).and(ids),
            reassociated(d + ff),
        ));
    }
    cases
}

fn group(n: u32) -> GroupSize {
    GroupSize::Elems(std::num::NonZeroU32::new(n).expect("nonzero group"))
}

/// Every Hugging Face packed layout the suite contracts against, with its name.
fn component_formats() -> Vec<(&'static str, PackedFormat)> {
    let gptq = |group, act_order, zeros| {
        PackedFormat::Gptq(GptqFormat {
            group,
            act_order,
            zeros,
        })
    };
    let fp8 = |scaling, scale_type| {
        PackedFormat::Fp8(Fp8Format {
            scaling,
            scale_type,
        })
    };
    vec![
        (
            "GPTQ int4 g32",
            gptq(group(32), false, GptqZeros::V1PlusOne),
        ),
        (
            "GPTQ int4 g32 act-order",
            gptq(group(32), true, GptqZeros::V1PlusOne),
        ),
        (
            "GPTQ int4 per-channel v2 zeros",
            gptq(GroupSize::Channel, false, GptqZeros::V2Exact),
        ),
        (
            "AWQ int4 g64",
            PackedFormat::Awq(AwqFormat { group: group(64) }),
        ),
        (
            "FP8 E4M3 per-channel bf16",
            fp8(Fp8Scaling::PerChannel, ScaleType::BF16),
        ),
        (
            "FP8 E4M3 128x128 block f32",
            fp8(Fp8Scaling::Block128, ScaleType::F32),
        ),
        (
            "FP8 E4M3 per-tensor f32",
            fp8(Fp8Scaling::PerTensor, ScaleType::F32),
        ),
        ("E2M1 FP4 per-32 E8M0", PackedFormat::Fp4E2M1),
    ]
}

/// Contractions against each Hugging Face packed layout, decoded inside the contraction: a
/// linear over a batched left side (partial groups and 128-wide tiles on both axes), and a
/// small decoder block (a norm read by three projections in three formats, a gated
/// feed-forward whose gate and up are FP8 and whose down is GPTQ) so the fused kernels decode
/// them too.
fn component_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, (name, format)) in component_formats().into_iter().enumerate() {
        let mut c = CaseBuilder::new(200 + i as u64);
        let (n, k) = (136, 320);
        let x = c.f32("x", &[2, 3, k]);
        let w = c.components("w", format, n, k);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(&format!("{name} weights: linear"), Outputs::new(y), SUMS));
    }
    let formats = component_formats();
    let named = |name: &str| {
        formats
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, f)| f)
            .expect("a listed format")
    };
    let mut c = CaseBuilder::new(220);
    let (d, ff) = (256, 384);
    let x = c.f32("x", &[3, d]);
    let g = c.f32("g", &[d]);
    let h = ops::rmsnorm(&c.b, x, g, 1e-5).expect("rmsnorm");
    let wq = c.components("wq", named("GPTQ int4 g32 act-order"), 128, d);
    let wk = c.components("wk", named("AWQ int4 g64"), 64, d);
    let wv = c.components("wv", named("E2M1 FP4 per-32 E8M0"), 64, d);
    let q = ops::linear(&c.b, h, wq, None).expect("q");
    let k = ops::linear(&c.b, h, wk, None).expect("k");
    let v = ops::linear(&c.b, h, wv, None).expect("v");
    let w_gate = c.components("w_gate", named("FP8 E4M3 128x128 block f32"), ff, d);
    let w_up = c.components("w_up", named("FP8 E4M3 per-tensor f32"), ff, d);
    let w_down = c.components("w_down", named("GPTQ int4 g32"), d, ff);
    let gate = ops::linear(&c.b, h, w_gate, None).expect("gate");
    let up = ops::linear(&c.b, h, w_up, None).expect("up");
    let act = ops::swiglu(&c.b, gate, up).expect("swiglu");
    let down = ops::linear(&c.b, act, w_down, None).expect("down");
    let y = c.b.add(x, down).expect("residual");
    cases.push(c.finish(
        "packed-layout block: norm, QKV in GPTQ/AWQ/FP4, FP8 (block, tensor) gated feed-forward, GPTQ down",
        Outputs::new(q).and(k).and(v).and(y),
        SUMS,
    ));
    cases
}

/// Decode-shaped contractions (at most eight left-side rows against constant transposed
/// weights), which the planner gives their own kernel: every block format and dense f32, f16
/// and bf16 weights, at 1 to 8 rows, with row lengths that leave a partial last step and column
/// counts that leave a partial last workgroup; sibling projections of mixed formats behind a
/// norm; a gated feed-forward with its residual add in the epilogue; and left sides too long to
/// stage in shared memory.
fn decode_contraction_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, format) in BlockFormat::ALL.into_iter().enumerate() {
        let mut c = CaseBuilder::new(200 + i as u64);
        // 13 blocks of 32 or 5 of 256: whole steps of the lanes and a partial one.
        let k = if format.block_elems() == 256 {
            1280
        } else {
            416
        };
        let w = c.packed("w", format.ggml_type(), 37, k);
        let mut outputs: Option<Outputs> = None;
        for rows in [1, 3, 8] {
            let x = c.f32(&format!("x{rows}"), &[rows, k]);
            let y = ops::linear(&c.b, x, w, None).expect("linear");
            outputs = Some(match outputs {
                None => Outputs::new(y),
                Some(o) => o.and(y),
            });
        }
        let outputs = outputs.expect("three row counts");
        cases.push(c.finish(
            &format!(
                "decode-shaped contraction, {} weights, 1, 3 and 8 rows",
                format.name()
            ),
            outputs,
            reassociated(k),
        ));
    }
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .enumerate()
    {
        for k in [200, 77] {
            let mut c = CaseBuilder::new(220 + 2 * i as u64 + (k % 2) as u64);
            let w = match dtype {
                DType::F32 => c.f32("w", &[45, k]),
                d => c.half("w", &[45, k], d),
            };
            let x1 = c.f32("x1", &[1, 1, k]);
            let x5 = c.f32("x5", &[5, k]);
            let x2 = c.f32("x2", &[2, 1, k]);
            let y1 = ops::linear(&c.b, x1, w, None).expect("linear");
            let y5 = ops::linear(&c.b, x5, w, None).expect("linear");
            let y2 = ops::linear(&c.b, x2, w, None).expect("linear");
            cases.push(c.finish(
                &format!("decode-shaped contraction, {dtype} weights, K {k}, 1, 5 and 2x1 rows"),
                Outputs::new(y1).and(y5).and(y2),
                reassociated(k),
            ));
        }
    }
    // Q, K and V of mixed formats behind one norm, at one and two rows.
    for rows in [1, 2] {
        let mut c = CaseBuilder::new(230 + rows as u64);
        let d = 512;
        let x = c.f32("x", &[1, rows, d]);
        let nw = c.positive("norm", &[d]);
        let wq = c.packed("wq", GgmlType::Q4_K, 64, d);
        let wk = c.packed("wk", GgmlType::Q6_K, 24, d);
        let wv = c.half("wv", &[24, d], DType::F16);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("norm");
        let q = ops::linear(&c.b, h, wq, None).expect("q");
        let k = ops::linear(&c.b, h, wk, None).expect("k");
        let v = ops::linear(&c.b, h, wv, None).expect("v");
        cases.push(c.finish(
            &format!("decode-shaped Q/K/V of mixed formats behind a norm, {rows} rows"),
            Outputs::new(q).and(k).and(v),
            reassociated(d),
        ));
    }
    // A gated feed-forward: gate and up (different formats) with the SiLU product in the
    // epilogue, then down with the residual add in its epilogue.
    for rows in [1, 4] {
        let mut c = CaseBuilder::new(240 + rows as u64);
        let (d, ff) = (96, 160);
        let x = c.f32("x", &[rows, d]);
        let nw = c.positive("norm", &[d]);
        let wg = c.packed("wg", GgmlType::Q4_1, ff, d);
        let wu = c.packed("wu", GgmlType::Q5_0, ff, d);
        let wd = c.packed("wd", GgmlType::Q8_0, d, ff);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("norm");
        let g = ops::linear(&c.b, h, wg, None).expect("gate");
        let u = ops::linear(&c.b, h, wu, None).expect("up");
        let f = ops::swiglu(&c.b, g, u).expect("swiglu");
        let down = ops::linear(&c.b, f, wd, None).expect("down");
        let y = c.b.add(x, down).expect("residual");
        cases.push(c.finish(
            &format!("decode-shaped feed-forward with epilogues, {rows} rows"),
            Outputs::new(y),
            reassociated(ff),
        ));
    }
    // Left sides too long for shared memory are staged a chunk at a time (whole chunks and a
    // shorter last one), with the norm's prologue, and in an epilogue reading two of them.
    let mut c = CaseBuilder::new(250);
    let k = 4096;
    let x = c.f32("x", &[8, k]);
    let nw = c.positive("norm", &[k]);
    let w = c.half("w", &[9, k], DType::BF16);
    let wp = c.packed("wp", GgmlType::Q4_0, 5, k);
    let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("norm");
    let y = ops::linear(&c.b, h, w, None).expect("linear");
    let yp = ops::linear(&c.b, x, wp, None).expect("linear");
    cases.push(c.finish(
        "decode-shaped contraction, 8 rows of 4096 staged in chunks",
        Outputs::new(y).and(yp),
        reassociated(k),
    ));
    let mut c = CaseBuilder::new(251);
    let (k1, k2) = (4352, 2304);
    let x = c.f32("x", &[4, k1]);
    let z = c.f32("z", &[4, k2]);
    let wg = c.half("wg", &[20, k1], DType::F16);
    let wu = c.packed("wu", GgmlType::Q6_K, 20, k1);
    let wz = c.packed("wz", GgmlType::Q4_K, 20, k2);
    let g = ops::linear(&c.b, x, wg, None).expect("gate");
    let u = ops::linear(&c.b, x, wu, None).expect("up");
    let o = ops::linear(&c.b, z, wz, None).expect("other");
    let y =
        c.b.add(ops::swiglu(&c.b, g, u).expect("swiglu"), o)
            .expect("add");
    cases.push(c.finish(
        "decode-shaped epilogue over two left sides staged in chunks, 4 rows",
        Outputs::new(y),
        reassociated(k1),
    ));
    cases
}

/// The single-buffer limit the split cases run under (see [`run_split`]).
pub const SPLIT_LIMIT_BYTES: u64 = 8192;

/// Tables larger than [`SPLIT_LIMIT_BYTES`], read by a contraction (a head) and a row gather (an
/// embedding) with indices on both sides of every chunk boundary: the planner splits each into
/// row chunks that the engine uploads from byte ranges of the stored bytes.
pub fn split_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    // (format, rows, k, gathered rows): equal chunks of 100 (Q8_0, 6800 B), 32 (Q4_K, 4608 B)
    // and 100 rows (f16, 8000 B).
    let tables = [
        (
            DType::Packed(GgmlType::Q8_0),
            300,
            64,
            vec![0, 99, 100, 199, 200, 299, 7],
        ),
        (
            DType::Packed(GgmlType::Q4_K),
            64,
            256,
            vec![0, 31, 32, 63, 5, 40, 20],
        ),
        (DType::F16, 200, 40, vec![0, 99, 100, 199, 50, 150, 101]),
    ];
    for (i, (dtype, rows, k, ids)) in tables.into_iter().enumerate() {
        let mut c = CaseBuilder::new(70 + i as u64);
        let w = match dtype {
            DType::Packed(format) => c.packed("w", format, rows, k),
            d => c.half("w", &[rows, k], d),
        };
        let x = c.f32("x", &[2, k]);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        let n = ids.len();
        let ids = c.slot_i32(Slot::Token, ids, &[n]);
        let got = ops::embed(&c.b, w, ids).expect("embed");
        cases.push(c.finish(
            &format!("{dtype} {rows}x{k} table split: linear and row gather"),
            Outputs::new(y).and(got),
            SUMS,
        ));
    }
    // Row-major packed layouts split into chunks of their components: FP8 in 128-row tiles
    // (3 chunks of a 300x64 weight), FP4 in 2 chunks of a 256x128 weight.
    let fp8 = PackedFormat::Fp8(Fp8Format {
        scaling: Fp8Scaling::Block128,
        scale_type: ScaleType::BF16,
    });
    for (i, (format, rows, k)) in [(fp8, 300, 64), (PackedFormat::Fp4E2M1, 256, 128)]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(80 + i as u64);
        let w = c.components("w", format, rows, k);
        let x = c.f32("x", &[3, k]);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(
            &format!("{format} {rows}x{k} split: linear"),
            Outputs::new(y),
            SUMS,
        ));
    }
    cases
}

/// Runs the split cases on `exec`, whose target's single-buffer limit must be
/// [`SPLIT_LIMIT_BYTES`]; a case whose plan binds no chunk fails.
pub fn run_split(exec: &mut dyn Executor) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for case in split_cases() {
        let split = poot_graph_plan::compile(&case.graph, exec.target()).map(|p| {
            p.buffers
                .iter()
                .filter(|b| matches!(b.role, poot_graph_plan::BufferRole::ConstPart { .. }))
                .count()
        });
        let o = match split {
            Ok(0) => Outcome {
                name: case.name.clone(),
                passed: false,
                detail: "no constant was split".into(),
            },
            _ => run_case(exec, &case),
        };
        report(&o);
        outcomes.push(o);
    }
    outcomes
}

/// A sum of `terms` f32 values reassociated (the device sums in another order than the oracle):
/// each order is within `terms` roundings of the exact sum, so two orders differ by at most
/// twice that, relative to the sum of magnitudes, which for these cases' outputs stays within a
/// small multiple of the largest output. Never below a few ulps of libm error.
/// A mask of `t` query rows over `len` positions that sees every position.
fn all_visible(c: &CaseBuilder, t: usize, len: usize) -> Traced {
    c.b.broadcast(
        c.b.literal(poot_graph_ir::Scalar::Bool(true)).expect("l"),
        [1, 1, t, len],
    )
    .expect("mask")
}

/// Grouped-query attention of `hq` query heads over `hkv` KV heads, scaled by `1/sqrt(dqk)`.
fn attention_options(hq: usize, hkv: usize, dqk: usize, softcap: Option<f32>) -> AttentionOptions {
    AttentionOptions {
        n_rep: hq / hkv,
        scale: 1.0 / (dqk as f32).sqrt(),
        softcap,
    }
}

/// The case `name`: attention of `[q, k, v, mask]` over `len` positions.
fn attention_case(
    c: CaseBuilder,
    name: &str,
    [q, k, v, mask]: [Traced; 4],
    options: AttentionOptions,
    len: usize,
) -> Case {
    let o = ops::attention_masked(&c.b, q, k, v, mask, options).expect("attention");
    c.finish(name, Outputs::new(o), reassociated(len))
}

pub fn reassociated(terms: usize) -> Tolerance {
    Tolerance::Relative((4.0 * terms as f32 * f32::EPSILON).max(1e-5))
}

/// The parts of a decoder layer's attention a fused case varies.
#[derive(Clone, Copy)]
struct LayerShape {
    hidden: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    capacity: usize,
    /// New tokens per step.
    tokens: usize,
    window: Option<usize>,
    softcap: Option<f32>,
    qk_norm: bool,
    /// Gemma's norms after each block.
    sandwich: bool,
    packed: Option<GgmlType>,
    /// The cache stores f16: keys and values rounded as they are written, widened as read.
    kv_f16: bool,
}

/// One pre-norm decoder layer (attention over a KV cache carried as state, then a gated
/// feed-forward, each with a residual add) embedded from the token slot, as the model families
/// trace it, run for several steps at increasing positions so the cache fills up.
fn decoder_layer_case(name: &str, seed: u64, s: LayerShape, steps: usize) -> Case {
    let mut c = CaseBuilder::new(seed);
    let (d, hq, hkv, dh, t) = (s.hidden, s.heads, s.kv_heads, s.head_dim, s.tokens);
    let vocab = 11;
    let table = c.f32("embed", &[vocab, d]);
    let tokens = c.slot_i32(Slot::Token, vec![0; t], &[1, t]);
    let pos = c.slot_i32(Slot::Pos, (0..t as i32).collect(), &[1, t]);
    let b = &c.b;
    let x = ops::embed(b, table, tokens).expect("embed");
    let norm_w = |c: &mut CaseBuilder, n: &str, len: usize| c.positive(n, &[len]);
    let proj = |c: &mut CaseBuilder, n: &str, rows: usize, k: usize| match s.packed {
        Some(f) => c.packed(n, f, rows, k),
        None => c.f32(n, &[rows, k]),
    };
    let rms = |c: &CaseBuilder, x: Traced, w: Traced| ops::rmsnorm(&c.b, x, w, 1e-5).expect("norm");
    let w_attn_norm = norm_w(&mut c, "attn_norm", d);
    let wq = proj(&mut c, "wq", hq * dh, d);
    let wk = proj(&mut c, "wk", hkv * dh, d);
    let wv = proj(&mut c, "wv", hkv * dh, d);
    let wo = proj(&mut c, "wo", d, hq * dh);
    let cos = c.f32("cos", &[s.capacity, dh / 2]);
    let sin = c.f32("sin", &[s.capacity, dh / 2]);
    let qn = norm_w(&mut c, "q_norm", dh);
    let kn = norm_w(&mut c, "k_norm", dh);
    let post_attn = norm_w(&mut c, "post_attn_norm", d);
    let w_ffn_norm = norm_w(&mut c, "ffn_norm", d);
    let ff = 2 * d;
    let wg = proj(&mut c, "w_gate", ff, d);
    let wu = proj(&mut c, "w_up", ff, d);
    let wd = proj(&mut c, "w_down", d, ff);
    let post_ffn = norm_w(&mut c, "post_ffn_norm", d);
    let kv_dtype = if s.kv_f16 { DType::F16 } else { DType::F32 };
    let cache_ty = TensorType::new(kv_dtype, vec![1, hkv, s.capacity, dh]);
    let k_in = c.b.state_input("k", cache_ty.clone()).expect("state");
    let v_in = c.b.state_input("v", cache_ty).expect("state");
    let b = &c.b;
    let h = rms(&c, x, w_attn_norm);
    let heads = |p: Traced, n: usize, norm: Option<Traced>| {
        let p = b.reshape(p, [1, t, n, dh]).expect("heads");
        let p = match norm {
            Some(w) if s.qk_norm => rms(&c, p, w),
            _ => p,
        };
        b.transpose(p, vec![0, 2, 1, 3]).expect("heads")
    };
    let q = heads(ops::linear(b, h, wq, None).expect("q"), hq, Some(qn));
    let k = heads(ops::linear(b, h, wk, None).expect("k"), hkv, Some(kn));
    let v = heads(ops::linear(b, h, wv, None).expect("v"), hkv, None);
    let q = ops::rope(b, q, cos, sin, pos, RopeStyle::HalfSplit).expect("rope");
    let k = ops::rope(b, k, cos, sin, pos, RopeStyle::HalfSplit).expect("rope");
    let start = b
        .reshape(
            b.slice(pos, vec![0, 0], vec![1, 1]).expect("slice"),
            Vec::<usize>::new(),
        )
        .expect("start");
    let zero = b.lit_i32(0).expect("0");
    let to_cache = |x: Traced| {
        if s.kv_f16 {
            b.cast(x, DType::F16).expect("round")
        } else {
            x
        }
    };
    let from_cache = |x: Traced| {
        if s.kv_f16 {
            b.cast(x, DType::F32).expect("widen")
        } else {
            x
        }
    };
    let kc = b
        .dynamic_update_slice(k_in, to_cache(k), &[zero, zero, start, zero])
        .expect("k write");
    let vc = b
        .dynamic_update_slice(v_in, to_cache(v), &[zero, zero, start, zero])
        .expect("v write");
    let mask = ops::causal_mask(b, pos, s.capacity, s.window).expect("mask");
    let o = ops::attention_masked(
        b,
        q,
        from_cache(kc),
        from_cache(vc),
        mask,
        attention_options(hq, hkv, dh, s.softcap),
    )
    .expect("attention");
    let o = b.transpose(o, vec![0, 2, 1, 3]).expect("t");
    let o = b.reshape(o, [1, t, hq * dh]).expect("r");
    let mut a = ops::linear(b, o, wo, None).expect("o");
    if s.sandwich {
        a = rms(&c, a, post_attn);
    }
    let x = b.add(x, a).expect("residual");
    let g = ops::linear(b, rms(&c, x, w_ffn_norm), wg, None).expect("gate");
    let u = ops::linear(b, rms(&c, x, w_ffn_norm), wu, None).expect("up");
    let mut f = ops::linear(b, ops::swiglu(b, g, u).expect("swiglu"), wd, None).expect("down");
    if s.sandwich {
        f = rms(&c, f, post_ffn);
    }
    let out = b.add(x, f).expect("residual");
    let outputs = Outputs::new(out).with_state(&[(k_in, kc), (v_in, vc)]);
    // A sum reassociated before its rounding to f16 can land on the neighbouring half.
    let tolerance = if s.kv_f16 { HALF_FLIP } else { SUMS };
    let mut case = c.finish(name, outputs, tolerance);
    let mut rng = Rng(seed ^ 0x5eed);
    let step_slots = |n: usize, rng: &mut Rng| {
        let toks: Vec<i32> = (0..t).map(|_| rng.below(vocab as u64) as i32).collect();
        let p: Vec<i32> = (0..t).map(|i| (n * t + i) as i32).collect();
        vec![
            (
                Slot::Token,
                HostTensor::i32(vec![1, t], toks).expect("sized"),
            ),
            (Slot::Pos, HostTensor::i32(vec![1, t], p).expect("sized")),
        ]
    };
    case.slots = step_slots(0, &mut rng);
    case.later_steps = (1..steps).map(|n| step_slots(n, &mut rng)).collect();
    case
}

/// Cases for the planner's fused kernels: row reductions inside their readers (norms, softmax,
/// a norm inside a projection and inside a cache write), at several shapes, and whole decoder
/// layers stepped through a filling cache (GQA, MQA, softcap, sliding window, qk-norm).
fn fusion_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for (i, dims) in [vec![3, 700], vec![1, 1, 64], vec![2, 5, 33]]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(70 + i as u64);
        let len = dims[dims.len() - 1];
        let x = c.f32("x", &dims);
        let w = c.f32("w", &[len]);
        let y = ops::rmsnorm(&c.b, x, w, 1e-6).expect("rmsnorm");
        cases.push(c.finish(
            &format!("rmsnorm as one row kernel {dims:?}"),
            Outputs::new(y),
            reassociated(len),
        ));
    }

    let mut c = CaseBuilder::new(74);
    let x = c.f32("x", &[4, 300]);
    let g = c.f32("g", &[300]);
    let bb = c.f32("bias", &[300]);
    let y = ops::layernorm(&c.b, x, g, bb, 1e-5).expect("layernorm");
    cases.push(c.finish(
        "layernorm (a row reduction inside another)",
        Outputs::new(y),
        reassociated(300),
    ));

    let mut c = CaseBuilder::new(75);
    let x = c.f32("x", &[2, 3, 1000]);
    let y = ops::softmax(&c.b, x, 2).expect("softmax");
    let z = ops::softmax(&c.b, x, 1).expect("softmax");
    cases.push(c.finish(
        "softmax over a long last axis and a short middle one",
        Outputs::new(y).and(z),
        reassociated(1000),
    ));

    // Two rows: the norm runs in the projection's prologue; forty: it is stored first.
    for (i, (format, rows)) in [(None, 2), (Some(GgmlType::Q4_1), 2), (None, 40)]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(76 + i as u64);
        let x = c.f32("x", &[rows, 96]);
        let w = c.positive("w", &[96]);
        let p = match format {
            Some(f) => c.packed("p", f, 40, 96),
            None => c.f32("p", &[40, 96]),
        };
        let y = ops::linear(
            &c.b,
            ops::rmsnorm(&c.b, x, w, 1e-6).expect("rmsnorm"),
            p,
            None,
        )
        .expect("linear");
        cases.push(c.finish(
            &format!(
                "rmsnorm into a projection ({}, {rows} rows)",
                format.map_or("f32", |f| f.name())
            ),
            Outputs::new(y),
            SUMS,
        ));
    }

    let mut c = CaseBuilder::new(78);
    let x = c.f32("x", &[2, 3, 40]);
    let y = c.f32("y", &[2, 3, 70]);
    let wg = c.f32("wg", &[24, 40]);
    let wu = c.half("wu", &[24, 40], DType::BF16);
    let wo = c.packed("wo", GgmlType::Q8_0, 24, 64);
    let y64 = c.b.slice(y, vec![0, 0, 3], vec![2, 3, 67]).expect("slice");
    let g = ops::linear(&c.b, x, wg, None).expect("gate");
    let u = ops::linear(&c.b, x, wu, None).expect("up");
    let o = ops::linear(&c.b, y64, wo, None).expect("other");
    let z =
        c.b.add(ops::geglu(&c.b, g, u).expect("geglu"), o)
            .expect("add");
    let a = c.f32("a", &[2, 5, 6]);
    let bm = c.f32("bm", &[2, 6, 4]);
    let r = c.f32("r", &[2, 5, 4]);
    let batched = c.b.matmul(a, bm, false).expect("mm");
    let res = c.b.sub(r, c.b.tanh(batched).expect("tanh")).expect("sub");
    cases.push(c.finish(
        "contractions in their consumer's epilogue (shared and separate left sides, batched)",
        Outputs::new(z).and(res),
        SUMS,
    ));

    // Attention shapes the rewrite takes: (name, heads, kv heads, tokens, positions, qk dim,
    // v dim, masked rows). Positions past 64 with few rows split into partitions.
    let attention_shapes = [
        (
            "attention, unsplit, rows with nothing visible",
            2,
            1,
            3,
            12,
            16,
            16,
            true,
        ),
        (
            "attention, split, rows with nothing visible",
            2,
            1,
            3,
            600,
            16,
            16,
            true,
        ),
        (
            "attention, unmasked (encoder), GQA 3",
            6,
            2,
            4,
            9,
            8,
            8,
            false,
        ),
        (
            "attention, qk dim 24, v dim 40, split",
            2,
            2,
            1,
            700,
            24,
            40,
            false,
        ),
        (
            "attention, qk dim 6, v dim 10, split",
            3,
            1,
            2,
            150,
            6,
            10,
            true,
        ),
        (
            "attention, head dim 320 (two features per thread)",
            2,
            1,
            2,
            20,
            320,
            320,
            true,
        ),
    ];
    for (i, (name, hq, hkv, t, len, dqk, dv, masked)) in attention_shapes.into_iter().enumerate() {
        let mut c = CaseBuilder::new(90 + i as u64);
        let q = c.f32("q", &[1, hq, t, dqk]);
        let k = c.f32("k", &[1, hkv, len, dqk]);
        // Positive values, so a wrong weight total shows against the largest output.
        let v = c.positive("v", &[1, hkv, len, dv]);
        // Row 1 sees nothing (position -1); the others see a causal prefix.
        let pos: Vec<i32> = (0..t as i32)
            .map(|r| if r == 1 { -1 } else { 5 + 3 * r })
            .collect();
        let pos = c.slot_i32(Slot::Pos, pos, &[1, t]);
        let mask = if masked {
            ops::causal_mask(&c.b, pos, len, None).expect("mask")
        } else {
            all_visible(&c, t, len)
        };
        let options = attention_options(hq, hkv, dqk, None);
        cases.push(attention_case(c, name, [q, k, v, mask], options, len));
    }

    // Decode-shaped rows walking several blocks per partition, the last step past the end:
    // long visible prefixes (a window, a softcap, GQA 4, head dim 128), and an unmasked walk
    // with features that fill part of a team (qk dim 8, v dim 24). Then the prefill kernel,
    // which the cases above (all under 128 rows) no longer reach: 128 rows, and one row whose
    // heads are too wide for the decode kernel's lanes (split into partitions). Then tiles of
    // 16 queries: a ragged last tile with a window and a row that sees nothing, and a
    // walk whose positions end mid-tile. Then the matrix units' kernel on PTX (64 queries a
    // workgroup, 32 positions a tile): a last block of 36 queries (warps past the tokens), wide
    // heads under GQA with a window and a softcap, a chunk continuing a cache; and heads of
    // unequal widths whose positions end mid-tile.
    for (i, (name, hq, hkv, pos, len, dqk, dv, window, softcap)) in [
        (
            "attention, decode rows, long prefixes, window, softcap, head dim 128",
            16,
            4,
            Some(vec![299, -1, 150, 37]),
            300,
            128,
            128,
            Some(200),
            Some(20.0),
        ),
        (
            "attention, decode rows, unmasked, qk dim 8, v dim 24",
            32,
            32,
            None,
            1000,
            8,
            24,
            None,
            None,
        ),
        (
            "attention, prefill rows (128), GQA 4",
            8,
            2,
            Some((20..36).collect()),
            40,
            32,
            32,
            None,
            None,
        ),
        (
            "attention, head dim 640, split",
            1,
            1,
            Some(vec![450]),
            600,
            640,
            640,
            None,
            None,
        ),
        (
            "attention, tiles of queries, ragged, window, softcap, a row with nothing visible",
            4,
            2,
            Some((0..37).map(|r| if r == 1 { -1 } else { 50 + r }).collect()),
            100,
            64,
            64,
            Some(30),
            Some(30.0),
        ),
        (
            "attention, tiles of queries, qk dim 16, v dim 128, positions ending mid-tile",
            2,
            1,
            Some((0..20).collect()),
            20,
            16,
            128,
            None,
            None,
        ),
        (
            "attention on the matrix units, 100 queries (a ragged last block), head dim 128, GQA 4, window, softcap, continuing at 180",
            8,
            2,
            Some((0..100).map(|r| if r == 41 { -1 } else { 180 + r }).collect()),
            300,
            128,
            128,
            Some(150),
            Some(30.0),
        ),
        (
            "attention on the matrix units, 70 queries, qk dim 96, v dim 64, positions ending mid-tile",
            4,
            4,
            Some((0..70).collect()),
            70,
            96,
            64,
            None,
            None,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let t = pos.as_ref().map_or(3, Vec::len);
        let mut c = CaseBuilder::new(98 + i as u64);
        let q = c.f32("q", &[1, hq, t, dqk]);
        let k = c.f32("k", &[1, hkv, len, dqk]);
        let v = c.positive("v", &[1, hkv, len, dv]);
        let mask = match pos {
            Some(pos) => {
                let pos = c.slot_i32(Slot::Pos, pos, &[1, t]);
                ops::causal_mask(&c.b, pos, len, window).expect("mask")
            }
            None => all_visible(&c, t, len),
        };
        let options = attention_options(hq, hkv, dqk, softcap);
        cases.push(attention_case(c, name, [q, k, v, mask], options, len));
    }

    // Many sequences decoding together (a batched step): 48 rows of one token, 192 attention
    // rows in all, past the count at which positions stop being split, still the decode kernel
    // on GPUs; each row at its own position, one seeing nothing.
    {
        let (rows, hq, hkv, len, dh) = (48, 4, 2, 160, 64);
        let mut c = CaseBuilder::new(285);
        let q = c.f32("q", &[rows, hq, 1, dh]);
        let k = c.f32("k", &[rows, hkv, len, dh]);
        let v = c.positive("v", &[rows, hkv, len, dh]);
        let pos: Vec<i32> = (0..rows as i32)
            .map(|r| if r == 7 { -1 } else { (r * 37) % len as i32 })
            .collect();
        let pos = c.slot_i32(Slot::Pos, pos, &[rows, 1]);
        let mask = ops::causal_mask(&c.b, pos, len, None).expect("mask");
        let options = attention_options(hq, hkv, dh, None);
        cases.push(attention_case(
            c,
            "attention, 48 rows decoding together, GQA 2",
            [q, k, v, mask],
            options,
            len,
        ));
    }
    // The same with four query heads to a KV head and wide heads under a window and a softcap:
    // on GPUs one workgroup serves each KV head's four query heads (each key and value read
    // once for them), the positions split into partitions.
    {
        let (rows, hq, hkv, len, dh) = (12, 16, 4, 300, 128);
        let mut c = CaseBuilder::new(286);
        let q = c.f32("q", &[rows, hq, 1, dh]);
        let k = c.f32("k", &[rows, hkv, len, dh]);
        let v = c.positive("v", &[rows, hkv, len, dh]);
        let pos: Vec<i32> = (0..rows as i32)
            .map(|r| {
                if r == 5 {
                    -1
                } else {
                    (r * 53 + 40) % len as i32
                }
            })
            .collect();
        let pos = c.slot_i32(Slot::Pos, pos, &[rows, 1]);
        let mask = ops::causal_mask(&c.b, pos, len, Some(200)).expect("mask");
        let options = attention_options(hq, hkv, dh, Some(20.0));
        cases.push(attention_case(
            c,
            "attention, 12 rows decoding together, GQA 4, head dim 128, window, softcap",
            [q, k, v, mask],
            options,
            len,
        ));
    }

    // ALiBi: `slope_h * (j - p)` added to each score inside the logits chain, which every
    // fused kernel (decode rows, prefill rows, tiles of queries) computes from the slopes
    // constant and the position slot. The slopes reach 0.5 a position, so a kernel that
    // dropped the bias would be far outside the tolerance.
    for (i, (name, hq, hkv, t, start, len, dh)) in [
        (
            "attention, ALiBi, decode rows, GQA 3",
            6,
            2,
            1,
            290,
            300,
            64,
        ),
        (
            "attention, ALiBi, prefill rows (144), continuing",
            12,
            12,
            12,
            30,
            48,
            16,
        ),
        ("attention, ALiBi, tiles of queries", 6, 6, 37, 10, 64, 32),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(280 + i as u64);
        let q = c.f32("q", &[1, hq, t, dh]);
        let k = c.f32("k", &[1, hkv, len, dh]);
        let v = c.positive("v", &[1, hkv, len, dh]);
        let slopes = (0..hq)
            .map(|h| 0.5f32.powf((h + 1) as f32 * 8.0 / hq as f32))
            .collect();
        let slopes = c.f32_values("slopes", &[hq], slopes);
        let pos = c.slot_i32(Slot::Pos, (start..start + t as i32).collect(), &[1, t]);
        let mask = ops::causal_mask(&c.b, pos, len, None).expect("mask");
        let offsets = ops::key_offsets(&c.b, pos, len).expect("offsets");
        let bias = ops::alibi_bias(&c.b, offsets, slopes).expect("bias");
        let terms = ops::ScoreTerms {
            bias: Some(bias),
            sinks: None,
        };
        let options = attention_options(hq, hkv, dh, None);
        let o = ops::attention_masked_with(&c.b, q, k, v, mask, options, terms).expect("attn");
        cases.push(c.finish(name, Outputs::new(o), reassociated(len)));
    }

    // Sinks (gpt-oss): a learned logit per query head in each row's softmax denominator,
    // applied once a row's partitions meet. Each case's heads take sinks of 8 (dominating the
    // row), -8 (negligible) and between. A decode row split into partitions; many rows decoding
    // together under GQA 4, the sinks computed in the graph; tiles of queries; prefill rows
    // whose value heads the tiles do not take, under a window; heads too wide for the decode
    // kernel, split. Each but the first has a row that sees nothing (the oracle gives it 0).
    for (i, (name, rows, t, hq, hkv, pos, len, dqk, dv, window, computed)) in [
        (
            "attention with sinks, decode row, GQA 4, split positions",
            1,
            1,
            4,
            1,
            vec![450],
            600,
            64,
            64,
            None,
            false,
        ),
        (
            "attention with sinks, 40 rows decoding together, GQA 4, computed sinks, a row with nothing visible",
            40,
            1,
            4,
            1,
            (0..40).map(|r| if r == 7 { -1 } else { (r * 37) % 160 }).collect(),
            160,
            64,
            64,
            None,
            true,
        ),
        (
            "attention with sinks, tiles of queries, GQA 2, a row with nothing visible",
            1,
            37,
            4,
            2,
            (0..37).map(|r| if r == 1 { -1 } else { 50 + r }).collect(),
            100,
            64,
            64,
            None,
            false,
        ),
        (
            "attention with sinks, prefill rows (160), GQA 4, v dim 24, window, a row with nothing visible",
            1,
            20,
            8,
            2,
            (20..40).map(|p| if p == 23 { -1 } else { p }).collect(),
            40,
            32,
            24,
            Some(8),
            false,
        ),
        (
            "attention with sinks, head dim 640, split, a row with nothing visible",
            2,
            1,
            2,
            1,
            vec![450, -1],
            600,
            640,
            640,
            None,
            false,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(290 + i as u64);
        let q = c.f32("q", &[rows, hq, t, dqk]);
        let k = c.f32("k", &[rows, hkv, len, dqk]);
        let v = c.positive("v", &[rows, hkv, len, dv]);
        let logits: Vec<f32> = [8.0, -8.0, 0.5, -1.5, 2.0, -0.25, 1.0, -3.0]
            .into_iter()
            .cycle()
            .take(hq)
            .collect();
        let sinks = if computed {
            let negated = c.f32_values("negated_sinks", &[hq], logits.iter().map(|x| -x).collect());
            c.b.neg(negated).expect("sinks")
        } else {
            c.f32_values("sinks", &[hq], logits)
        };
        let pos = c.slot_i32(Slot::Pos, pos, &[rows, t]);
        let mask = ops::causal_mask(&c.b, pos, len, window).expect("mask");
        let options = attention_options(hq, hkv, dqk, None);
        let o = ops::attention_masked_sinks(&c.b, q, k, v, mask, options, Some(sinks))
            .expect("attn");
        cases.push(c.finish(name, Outputs::new(o), reassociated(len)));
    }

    // The probabilities are an output too: not rewritten, planned unfused.
    let mut c = CaseBuilder::new(96);
    let q = c.f32("q", &[1, 2, 2, 8]);
    let k = c.f32("k", &[1, 2, 10, 8]);
    let v = c.f32("v", &[1, 2, 10, 8]);
    let scores = c.b.matmul(q, k, true).expect("scores");
    let p = ops::softmax(&c.b, scores, 3).expect("softmax");
    let o = c.b.matmul(p, v, false).expect("pv");
    cases.push(c.finish(
        "attention whose probabilities are returned (unfused)",
        Outputs::new(o).and(p),
        reassociated(10),
    ));

    // Sibling contractions (same left side) and cache writes sharing kernels, with the cases
    // that must stay apart: a write of a value read from another write's result, two writes
    // into one cache, a weight computed after the first sibling.
    let mut c = CaseBuilder::new(97);
    let x = c.f32("x", &[2, 3, 48]);
    let wa = c.f32("wa", &[20, 48]);
    let wb = c.packed("wb", GgmlType::Q8_0, 7, 64);
    let wc = c.half("wc", &[33, 48], DType::F16);
    let x64 = c.b.slice(x, vec![0, 0, 0], vec![2, 3, 48]).expect("slice");
    let ya = ops::linear(&c.b, x64, wa, None).expect("a");
    let yc = ops::linear(&c.b, x64, wc, None).expect("c");
    let late = c.f32("late", &[5, 48]);
    let late = c.b.tanh(late).expect("tanh");
    let yl = ops::linear(&c.b, x64, late, None).expect("late");
    let pad = c.f32("pad", &[2, 3, 16]);
    let xb = c.b.concat(&[x, pad], 2).expect("concat");
    let yb = ops::linear(&c.b, xb, wb, None).expect("b");
    let cache = c.f32("cache", &[2, 9, 5]);
    let cache2 = c.f32("cache2", &[3, 9, 5]);
    let pos = c.slot_i32(Slot::Pos, vec![4], &[]);
    let zero = c.b.lit_i32(0).expect("0");
    let upd = c.b.slice(yb, vec![0, 0, 0], vec![2, 3, 5]).expect("slice");
    let w1 =
        c.b.dynamic_update_slice(cache, upd, &[zero, pos, zero])
            .expect("dus");
    let again = c.b.slice(w1, vec![0, 4, 0], vec![1, 7, 5]).expect("slice");
    let w2 =
        c.b.dynamic_update_slice(cache2, again, &[zero, zero, zero])
            .expect("dus");
    let w3 =
        c.b.dynamic_update_slice(w1, c.b.neg(upd).expect("neg"), &[zero, zero, zero])
            .expect("dus");
    let ycs = c.b.slice(yc, vec![0, 0, 0], vec![1, 3, 5]).expect("slice");
    let w4 =
        c.b.dynamic_update_slice(cache2, ycs, &[c.b.lit_i32(2).expect("2"), pos, zero])
            .expect("dus");
    cases.push(
        c.finish(
            "sibling contractions and grouped cache writes",
            Outputs::new(ya)
                .and(yc)
                .and(yl)
                .and(yb)
                .and(w2)
                .and(w3)
                .and(w4),
            SUMS,
        ),
    );

    let base = LayerShape {
        hidden: 64,
        heads: 4,
        kv_heads: 2,
        head_dim: 16,
        capacity: 12,
        tokens: 1,
        window: None,
        softcap: None,
        qk_norm: false,
        sandwich: false,
        packed: None,
        kv_f16: false,
    };
    let layers = [
        ("decoder layer decode (GQA)", base, 7),
        (
            "decoder layer decode (MQA, qk-norm, sandwich norms, window 4, softcap)",
            LayerShape {
                kv_heads: 1,
                qk_norm: true,
                sandwich: true,
                window: Some(4),
                softcap: Some(20.0),
                ..base
            },
            9,
        ),
        (
            "decoder layer prefill chunks of 3 (MHA, Q8_0 projections)",
            LayerShape {
                kv_heads: 4,
                tokens: 3,
                packed: Some(GgmlType::Q8_0),
                ..base
            },
            4,
        ),
        (
            "decoder layer decode (head dim 64, long cache, window 40)",
            LayerShape {
                hidden: 128,
                heads: 2,
                kv_heads: 1,
                head_dim: 64,
                capacity: 300,
                window: Some(40),
                ..base
            },
            3,
        ),
    ];
    for (i, (name, shape, steps)) in layers.into_iter().enumerate() {
        cases.push(decoder_layer_case(name, 80 + i as u64, shape, steps));
    }
    // An f16 cache: keys written through a norm (a row reduction inside the write), two halves
    // to a word; decode rows, then prefill chunks (tiles of queries) over it.
    let f16_layers = [
        (
            "decoder layer decode, f16 KV cache (MQA, qk-norm, window 4, softcap)",
            LayerShape {
                kv_heads: 1,
                qk_norm: true,
                window: Some(4),
                softcap: Some(20.0),
                kv_f16: true,
                ..base
            },
            9,
        ),
        (
            "decoder layer prefill chunks of 24, f16 KV cache (GQA 4, head dim 64)",
            LayerShape {
                hidden: 128,
                heads: 8,
                kv_heads: 2,
                head_dim: 64,
                capacity: 72,
                tokens: 24,
                kv_f16: true,
                ..base
            },
            3,
        ),
    ];
    for (i, (name, shape, steps)) in f16_layers.into_iter().enumerate() {
        cases.push(decoder_layer_case(name, 90 + i as u64, shape, steps));
    }
    cases.push(paged_f16_case(
        6,
        1,
        296,
        "attention, 6 rows decoding over a paged f16 KV pool, GQA 4",
    ));
    cases.push(paged_f16_case(
        2,
        24,
        297,
        "attention, 2 rows prefilling 24 tokens over a paged f16 KV pool, GQA 4",
    ));
    cases
}

/// `rows` rows feeding `tokens` tokens each over a paged f16 KV pool, as a serving step traces
/// it: each row's new keys and values rounded to f16 and scattered to their write-map slots
/// (two halves a word), then every row's blocks gathered through the block table, widened and
/// attended to. Three steps, so later steps read what earlier ones wrote; when decoding, one
/// row's table reaches a block another row writes.
fn paged_f16_case(rows: usize, tokens: usize, seed: u64, name: &str) -> Case {
    let (hq, hkv, dh, block, capacity) = (8usize, 2usize, 64usize, 16usize, 64usize);
    let per_row = capacity / block;
    let blocks = rows * per_row + 1;
    let mut c = CaseBuilder::new(seed);
    let q = c.f32("q", &[rows, hq, tokens, dh]);
    let k_new = c.f32("k_new", &[rows, hkv, tokens, dh]);
    let v_new = c.positive("v_new", &[rows, hkv, tokens, dh]);
    let pool_ty = TensorType::new(DType::F16, vec![blocks * block, hkv, dh]);
    let k_in = c.b.state_input("k", pool_ty.clone()).expect("state");
    let v_in = c.b.state_input("v", pool_ty).expect("state");
    // Row r's blocks are r * per_row.., except that a decoding row 1's second block is row 0's
    // first. Rows feeding several tokens keep their own blocks: two rows writing one slot in a
    // step is a race, which no scheduler makes.
    let table: Vec<i32> = (0..rows * per_row)
        .map(|i| {
            if tokens == 1 && i == per_row + 1 {
                0
            } else {
                i as i32
            }
        })
        .collect();
    // Each row's tokens at consecutive positions from its first (within the capacity).
    let positions = |step: usize| -> Vec<i32> {
        (0..rows)
            .flat_map(|r| {
                let first = (r * 7 + step * 5) % (capacity - tokens + 1);
                (first..first + tokens).map(|p| p as i32)
            })
            .collect()
    };
    let write_map = |step: usize| -> Vec<i32> {
        let t = &table;
        positions(step)
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let (r, p) = (i / tokens, p as usize);
                t[r * per_row + p / block] * block as i32 + (p % block) as i32
            })
            .collect()
    };
    let slots = |step: usize| {
        vec![
            (
                Slot::SlotMap,
                HostTensor::i32(vec![rows, per_row], table.clone()).expect("sized"),
            ),
            (
                Slot::WriteMap,
                HostTensor::i32(vec![rows, tokens], write_map(step)).expect("sized"),
            ),
            (
                Slot::Pos,
                HostTensor::i32(vec![rows, tokens], positions(step)).expect("sized"),
            ),
        ]
    };
    let tbl = c.slot_i32(Slot::SlotMap, table.clone(), &[rows, per_row]);
    let write = c.slot_i32(Slot::WriteMap, write_map(0), &[rows, tokens]);
    let pos = c.slot_i32(Slot::Pos, positions(0), &[rows, tokens]);
    let b = &c.b;
    let write = b.reshape(write, [rows * tokens]).expect("write map");
    let cache = |state: Traced, new: Traced| -> (Traced, Traced) {
        let new = b.cast(new, DType::F16).expect("round");
        let new = b.transpose(new, vec![0, 2, 1, 3]).expect("t");
        let new = b.reshape(new, [rows * tokens, hkv, dh]).expect("r");
        let pool = b.scatter_update(state, write, new, 0).expect("scatter");
        let by_block = b.reshape(pool, [blocks, block, hkv, dh]).expect("r");
        let gathered = b.gather(by_block, tbl, 0).expect("gather");
        let gathered = b.reshape(gathered, [rows, capacity, hkv, dh]).expect("r");
        let gathered = b.transpose(gathered, vec![0, 2, 1, 3]).expect("t");
        (pool, b.cast(gathered, DType::F32).expect("widen"))
    };
    let (k_pool, k) = cache(k_in, k_new);
    let (v_pool, v) = cache(v_in, v_new);
    let mask = ops::causal_mask(b, pos, capacity, None).expect("mask");
    let o = ops::attention_masked(b, q, k, v, mask, attention_options(hq, hkv, dh, None))
        .expect("attention");
    let outputs = Outputs::new(o).with_state(&[(k_in, k_pool), (v_in, v_pool)]);
    let mut case = c.finish(name, outputs, HALF_FLIP);
    case.slots = slots(0);
    case.later_steps = (1..3).map(slots).collect();
    case
}

/// Cases for the tiled contraction (more than 8 left-side rows): every weight type the planner
/// reads (f32, f16, bf16 and every GGUF block format), rows that fill a tile, part of one and
/// parts of two, contraction and column counts that are not multiples of the tile, and the
/// fusions it keeps: a norm computed once per tile row (a layernorm's nested one too), sibling
/// projections, residual and gated epilogues, and a decoder layer's prefill chunks.
fn tiled_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let rows = [9, 64, 100];
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .enumerate()
    {
        for (j, &m) in rows.iter().enumerate() {
            let mut c = CaseBuilder::new(200 + 3 * i as u64 + j as u64);
            let x = c.f32("x", &[m, 70]);
            let w = match dtype {
                DType::F32 => c.f32("w", &[75, 70]),
                d => c.half("w", &[75, 70], d),
            };
            let mut outputs = Outputs::new(ops::linear(&c.b, x, w, None).expect("linear"));
            if dtype == DType::F32 {
                let wt = c.f32("wt", &[70, 75]);
                outputs = outputs.and(c.b.matmul(x, wt, false).expect("mm"));
            }
            cases.push(c.finish(
                &format!("tiled linear, {dtype} weights, {m}x70 by 70x75"),
                outputs,
                reassociated(70),
            ));
        }
    }
    for (i, format) in poot_formats::BlockFormat::ALL.into_iter().enumerate() {
        let m = rows[i % rows.len()];
        let k = 2 * format.block_elems();
        let mut c = CaseBuilder::new(220 + i as u64);
        let x = c.f32("x", &[m, k]);
        let w = c.packed("w", format.ggml_type(), 75, k);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(
            &format!("tiled linear, {} weights, {m}x{k} by {k}x75", format.name()),
            Outputs::new(y),
            reassociated(k),
        ));
    }

    // Half-precision weights throughout a layer's contractions (on a target with half-precision
    // matrix units, each multiplies in that precision): a norm into Q and K siblings, gate and
    // up into their product, down (over 512 elements: split at 16 rows) with the residual.
    for (i, (dtype, m)) in [(DType::F16, 48), (DType::BF16, 48), (DType::F16, 16)]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(260 + i as u64);
        let (d, ff) = (96, 512);
        let x = c.f32("x", &[m, d]);
        let nw = c.positive("norm", &[d]);
        let wq = c.half("wq", &[64, d], dtype);
        let wk = c.half("wk", &[40, d], dtype);
        let wg = c.half("w_gate", &[ff, d], dtype);
        let wu = c.half("w_up", &[ff, d], dtype);
        let wd = c.half("w_down", &[d, ff], dtype);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("rmsnorm");
        let q = ops::linear(&c.b, h, wq, None).expect("q");
        let k = ops::linear(&c.b, h, wk, None).expect("k");
        let g = ops::linear(&c.b, h, wg, None).expect("gate");
        let u = ops::linear(&c.b, h, wu, None).expect("up");
        let f =
            ops::linear(&c.b, ops::swiglu(&c.b, g, u).expect("swiglu"), wd, None).expect("down");
        let y = c.b.add(x, f).expect("residual");
        cases.push(c.finish(
            &format!("tiled {dtype} layer contractions, {m} rows, K {d} and {ff}"),
            Outputs::new(q).and(k).and(y),
            reassociated(ff),
        ));
    }

    // Contractions a device's library may take (stored half weights, sizes a multiple of 8):
    // row counts that are not, weights transposed as checkpoints store them and not, two
    // leading axes.
    for (i, (dtype, lead)) in [
        (DType::F16, vec![9]),
        (DType::BF16, vec![100]),
        (DType::F16, vec![2, 50]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(270 + i as u64);
        let mut dims = lead.clone();
        dims.push(64);
        let x = c.f32("x", &dims);
        let w = c.half("w", &[48, 64], dtype);
        let wt = c.half("wt", &[64, 40], dtype);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        let z = c.b.matmul(x, wt, false).expect("matmul");
        cases.push(c.finish(
            &format!("library-shaped {dtype} contractions, {lead:?} rows, K 64"),
            Outputs::new(y).and(z),
            reassociated(64),
        ));
    }

    // Block-quantized weights a device's library multiplies decoded to f16 (a prefill chunk's
    // rows, sizes a multiple of 8): a norm into two projections of two formats.
    for (i, (format, m)) in [(GgmlType::Q4_0, 128), (GgmlType::Q4_K, 136)]
        .into_iter()
        .enumerate()
    {
        let mut c = CaseBuilder::new(275 + i as u64);
        let k = 256;
        let x = c.f32("x", &[m, k]);
        let nw = c.positive("norm", &[k]);
        let wa = c.packed("wa", format, 48, k);
        let wb = c.packed("wb", GgmlType::Q8_0, 40, k);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("rmsnorm");
        let a = ops::linear(&c.b, h, wa, None).expect("a");
        let b = ops::linear(&c.b, h, wb, None).expect("b");
        cases.push(c.finish(
            &format!("decodable {format:?} and Q8_0 projections of a norm, {m} rows, K {k}"),
            Outputs::new(a).and(b),
            reassociated(k),
        ));
    }

    // Every other block format the library may take as stored blocks and decode to f16 itself
    // (Q2_K it does not: a kernel decodes that one), over a prefill chunk's rows.
    for (i, format) in [
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
    ]
    .into_iter()
    .enumerate()
    {
        let mut c = CaseBuilder::new(290 + i as u64);
        let k = 256;
        let x = c.f32("x", &[128, k]);
        let w = c.packed("w", format, 56, k);
        let y = ops::linear(&c.b, x, w, None).expect("linear");
        cases.push(c.finish(
            &format!(
                "{} weights decoded for the library, 128 rows, K {k}",
                format.name()
            ),
            Outputs::new(y),
            reassociated(k),
        ));
    }

    // A norm into three sibling projections of 100 rows over two leading axes; over 320
    // elements the contraction is split (its tiles are few) and a second kernel adds up.
    for (i, k_len) in [96, 320].into_iter().enumerate() {
        let mut c = CaseBuilder::new(240 + 10 * i as u64);
        let x = c.f32("x", &[2, 50, k_len]);
        let nw = c.positive("norm", &[k_len]);
        let wq = c.f32("wq", &[40, k_len]);
        let wk = c.packed("wk", GgmlType::Q8_0, 24, k_len);
        let wv = c.half("wv", &[70, k_len], DType::F16);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("rmsnorm");
        let q = ops::linear(&c.b, h, wq, None).expect("q");
        let k = ops::linear(&c.b, h, wk, None).expect("k");
        let v = ops::linear(&c.b, h, wv, None).expect("v");
        cases.push(c.finish(
            &format!("tiled sibling projections of a norm, 2x50 rows, K {k_len}"),
            Outputs::new(q).and(k).and(v),
            reassociated(k_len),
        ));
    }

    // A feed-forward block: norm, gate and up with the SiLU product, down (over 300 elements:
    // split) with the residual.
    for (i, m) in [9, 64].into_iter().enumerate() {
        let mut c = CaseBuilder::new(241 + i as u64);
        let x = c.f32("x", &[1, m, 80]);
        let nw = c.positive("norm", &[80]);
        let wg = c.f32("w_gate", &[300, 80]);
        let wu = c.half("w_up", &[300, 80], DType::BF16);
        let wd = c.f32("w_down", &[80, 300]);
        let h = ops::rmsnorm(&c.b, x, nw, 1e-6).expect("rmsnorm");
        let g = ops::linear(&c.b, h, wg, None).expect("gate");
        let u = ops::linear(&c.b, h, wu, None).expect("up");
        let f =
            ops::linear(&c.b, ops::swiglu(&c.b, g, u).expect("swiglu"), wd, None).expect("down");
        let y = c.b.add(x, f).expect("residual");
        cases.push(c.finish(
            &format!("tiled feed-forward with gated and residual epilogues, {m} rows"),
            Outputs::new(y),
            reassociated(300),
        ));
    }

    // A centring norm (a row reduction inside another, both per tile row) into a projection;
    // an epilogue summing contractions of two left sides.
    let mut c = CaseBuilder::new(243);
    let x = c.f32("x", &[20, 48]);
    let w = c.f32("w", &[33, 48]);
    let b = &c.b;
    let mean = b.reduce(ReduceOp::Sum, x, 1).expect("sum");
    let centred = b
        .sub(x, b.broadcast(mean, [20, 48]).expect("b"))
        .expect("sub");
    let var = b
        .reduce(ReduceOp::Sum, b.mul(centred, centred).expect("sq"), 1)
        .expect("sum");
    let normed = b
        .mul(centred, b.broadcast(var, [20, 48]).expect("b"))
        .expect("mul");
    let y = ops::linear(b, normed, w, None).expect("linear");
    let a = c.f32("a", &[20, 40]);
    let o = c.f32("o", &[20, 64]);
    let wg = c.f32("wg", &[24, 40]);
    let wu = c.half("wu", &[24, 40], DType::F16);
    let wo = c.packed("wo", GgmlType::Q4_0, 24, 64);
    let gate = ops::linear(&c.b, a, wg, None).expect("gate");
    let up = ops::linear(&c.b, a, wu, None).expect("up");
    let other = ops::linear(&c.b, o, wo, None).expect("other");
    let z =
        c.b.add(ops::geglu(&c.b, gate, up).expect("geglu"), other)
            .expect("add");
    cases.push(c.finish(
        "tiled projection of a nested row reduction; epilogue over two left sides, 20 rows",
        Outputs::new(y).and(z),
        reassociated(64),
    ));

    cases.push(decoder_layer_case(
        "decoder layer prefill chunks of 12 (GQA, Q4_1 projections, tiled)",
        244,
        LayerShape {
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            capacity: 36,
            tokens: 12,
            window: None,
            softcap: None,
            qk_norm: true,
            sandwich: false,
            packed: Some(GgmlType::Q4_1),
            kv_f16: false,
        },
        3,
    ));
    // A prefill chunk the CPU's library multiplies in 8-bit integers.
    cases.push(decoder_layer_case(
        "decoder layer prefill chunks of 20 (GQA, Q4_1 projections, integer products on the CPU)",
        245,
        LayerShape {
            hidden: 64,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            capacity: 60,
            tokens: 20,
            window: None,
            softcap: None,
            qk_norm: false,
            sandwich: false,
            packed: Some(GgmlType::Q4_1),
            kv_f16: false,
        },
        2,
    ));
    cases
}

/// Rows long enough for the planner to split their reductions across workgroups, 30000 values
/// each (not a whole number of partitions): row 0 random with its maximum tied at three places
/// far apart and ties among its next largest, row 1 with NaNs (the first one wins arg-max),
/// row 2 all zeros of both signs (every element ties).
fn long_rows(c: &mut CaseBuilder) -> Traced {
    const LEN: usize = 30000;
    let mut v: Vec<f32> = (0..3 * LEN).map(|_| c.rng.f32()).collect();
    for at in [4999, 17777, 29999] {
        v[at] = 2.5;
    }
    for at in [3, 1500, 20000, 29000] {
        v[at] = 1.5;
    }
    for at in [LEN + 9000, LEN + 700, LEN + 25000] {
        v[at] = f32::NAN;
    }
    for (i, x) in v[2 * LEN..].iter_mut().enumerate() {
        *x = if i % 3 == 0 { -0.0 } else { 0.0 };
    }
    c.f32_values("x", &[3, LEN], v)
}

/// Cases for reductions over long rows, split across workgroups: arg-max (ties across
/// partitions, NaN, signed zeros), max, min, top-k and an i32 row sharing the same kernels,
/// arg-max over a long leading axis; then a sum and a softmax over the row (reassociated).
fn split_reduction_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut c = CaseBuilder::new(260);
    let x = long_rows(&mut c);
    let am = c.b.argmax(x, 1).expect("argmax");
    let mx = c.b.reduce(ReduceOp::Max, x, 1).expect("max");
    let mn = c.b.reduce(ReduceOp::Min, x, 1).expect("min");
    let top = c.b.arg_top_k(x, 20).expect("top-k");
    let scaled =
        c.b.mul(
            x,
            c.b.broadcast(c.b.lit_f32(3.0).expect("l"), [3, 30000])
                .expect("b"),
        )
        .expect("mul");
    let xi = c.b.cast(scaled, DType::I32).expect("cast");
    let am_i = c.b.argmax(xi, 1).expect("argmax");
    let mx_i = c.b.reduce(ReduceOp::Max, xi, 1).expect("max");
    let tall = c.f32("tall", &[25000, 2]);
    let am_0 = c.b.argmax(tall, 0).expect("argmax");
    cases.push(
        c.finish(
            "split arg-max, max, min, top-k over 3x30000 (ties, NaN, signed zeros), i32, axis 0",
            Outputs::new(am)
                .and(mx)
                .and(mn)
                .and(top)
                .and(am_i)
                .and(mx_i)
                .and(am_0),
            Tolerance::Exact,
        ),
    );

    let mut c = CaseBuilder::new(261);
    let x = long_rows(&mut c);
    let sum = c.b.reduce(ReduceOp::Sum, x, 1).expect("sum");
    let sm = ops::softmax(&c.b, x, 1).expect("softmax");
    cases.push(c.finish(
        "split sum and softmax over 3x30000",
        Outputs::new(sum).and(sm),
        reassociated(30000),
    ));
    cases
}

/// Every case of the suite.
pub fn cases() -> Vec<Case> {
    let mut all = Vec::new();
    for op in [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Tanh,
        UnaryOp::Erf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Not,
    ] {
        all.push(unary_case(op));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::Shl,
        BinaryOp::Shr,
    ] {
        all.push(binary_case(op));
    }
    all.extend(movement_cases());
    all.extend(reduction_cases());
    all.extend(contraction_cases());
    all.extend(component_cases());
    all.extend(composite_cases());
    all.extend(fusion_cases());
    all.extend(tiled_cases());
    all.extend(split_reduction_cases());
    all.extend(decode_contraction_cases());
    all.extend(expert_cases());
    all
}

/// Runs every case, printing one line each, and returns the outcomes. With `POOT_SUITE_ONLY`
/// set, only the cases whose names contain it run (a `SKIP` line names each other one).
pub fn run(exec: &mut dyn Executor) -> Vec<Outcome> {
    let only = std::env::var("POOT_SUITE_ONLY").ok();
    let mut outcomes = run_matching(exec, |name| match &only {
        Some(only) if !name.contains(only.as_str()) => {
            println!("SKIP {name} (POOT_SUITE_ONLY={only})");
            false
        }
        _ => true,
    });
    let (case, _) = overlapped_case();
    if only
        .as_ref()
        .is_none_or(|only| case.name.contains(only.as_str()))
    {
        let o = run_overlapped(exec);
        report(&o);
        outcomes.push(o);
    }
    outcomes
}

/// Prints a case's outcome as one line.
fn report(o: &Outcome) {
    println!(
        "{} {}{}",
        if o.passed { "PASS" } else { "FAIL" },
        o.name,
        if o.detail.is_empty() {
            String::new()
        } else {
            format!(": {}", o.detail)
        }
    );
}

/// Checks [`Device::copy`](crate::Device::copy): the copied words land at the start of the
/// destination and nothing past them changes; a count that is not whole words, and a copy onto
/// its own buffer, are refused without poisoning.
pub fn check_copy<D: crate::Device>(device: &mut D) -> Outcome {
    let outcome = |r: Result<String, String>| {
        let passed = r.is_ok();
        Outcome {
            name: "device_copy".to_owned(),
            passed,
            detail: r.unwrap_or_else(|e| e),
        }
    };
    outcome(copy_round_trip(device))
}

fn copy_round_trip<D: crate::Device>(device: &mut D) -> Result<String, String> {
    let n = 8192u64;
    let copied = 4096u64;
    let src = device.alloc(n).map_err(|e| format!("alloc: {e}"))?;
    let dst = device.alloc(n).map_err(|e| format!("alloc: {e}"))?;
    let pattern: Vec<u8> = (0..n as u32)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 3)) as u8 | 1)
        .collect();
    device
        .write(&src, 0, &pattern)
        .map_err(|e| format!("write: {e}"))?;
    device
        .copy(&src, &dst, copied)
        .map_err(|e| format!("copy: {e}"))?;
    device
        .synchronize()
        .map_err(|e| format!("synchronize: {e}"))?;
    let mut back = vec![0xAAu8; n as usize];
    device
        .read(&dst, 0, &mut back)
        .map_err(|e| format!("read: {e}"))?;
    let split = copied as usize;
    if back[..split] != pattern[..split] {
        return Err("the copied bytes differ from the source".into());
    }
    if back[split..].iter().any(|&b| b != 0) {
        return Err("bytes past the copied range changed".into());
    }
    for (what, result) in [
        ("a copy of 4098 B", device.copy(&src, &dst, 4098)),
        ("a copy onto its own buffer", device.copy(&src, &src, 4096)),
    ] {
        match result {
            Err(e @ crate::DeviceError::BadLaunch { .. }) if !e.poisons() => {}
            other => return Err(format!("{what} was not refused as a bad launch: {other:?}")),
        }
    }
    device
        .synchronize()
        .map_err(|e| format!("the device is unusable after a refused copy: {e}"))?;
    Ok(format!(
        "{copied} of {n} B copied exactly; bad copies refused"
    ))
}

/// Runs the executor's bandwidth probe on small buffers: it must report a finite, positive
/// rate over the rounds asked for.
pub fn check_copy_bandwidth(exec: &mut dyn Executor) -> Outcome {
    let r = exec.copy_bandwidth(1 << 20, 2);
    let (passed, detail) = match r {
        Ok(b)
            if b.rounds == 2
                && b.buffer_bytes == 1 << 20
                && b.best_seconds > 0.0
                && b.bytes_per_second().is_finite() =>
        {
            (true, format!("{:.2} GB/s", b.bytes_per_second() / 1e9))
        }
        Ok(b) => (false, format!("implausible probe: {b:?}")),
        Err(e) => (false, e.to_string()),
    };
    Outcome {
        name: "copy_bandwidth".to_owned(),
        passed,
        detail,
    }
}

/// Opens a device for the suite and wraps it in an engine planned for `backend` (with the
/// single-buffer limit lowered to `max_buffer_bytes` when given). A device that does not open
/// here (`DeviceError::Unavailable`: no driver, no GPU) prints a `SKIP` line and gives `None`;
/// any other failure to open panics.
pub fn open_engine<D: crate::Device>(
    backend: poot_graph_plan::Backend,
    open: impl FnOnce() -> Result<D, crate::DeviceError>,
    max_buffer_bytes: Option<u64>,
) -> Option<crate::Engine<D>> {
    open_engine_with(backend, open, |target| {
        if let Some(limit) = max_buffer_bytes {
            target.limits.max_buffer_bytes = limit;
        }
    })
}

/// [`open_engine`] with block-quantized weights staged from their blocks in tiles on every
/// target (`block_tiles=2`: products on the FMA pipes where the device has no matrix units).
pub fn open_block_tiles_engine<D: crate::Device>(
    backend: poot_graph_plan::Backend,
    open: impl FnOnce() -> Result<D, crate::DeviceError>,
) -> Option<crate::Engine<D>> {
    open_engine_with(backend, open, |target| {
        target.tuning.block_tiles = poot_graph_plan::BlockTiles::Everywhere;
    })
}

/// [`open_block_tiles_engine`] with 32-element slices (`block_tk=32`): two sets of f32 slices
/// fit the FMA path's shared memory too, so its walk issues each slice's loads before the
/// products of the one before it, as the matrix-unit kernels' walk does with wider slices.
pub fn open_prefetching_block_tiles_engine<D: crate::Device>(
    backend: poot_graph_plan::Backend,
    open: impl FnOnce() -> Result<D, crate::DeviceError>,
) -> Option<crate::Engine<D>> {
    open_engine_with(backend, open, |target| {
        target.tuning.block_tiles = poot_graph_plan::BlockTiles::Everywhere;
        target.tuning.block_slice = 32;
        target.tuning.block_buffers = 2;
        target.tuning.block_prefetch = true;
    })
}

/// Opens the device (`None`, with a `SKIP` line, where it is unavailable) with the target it
/// reports under `POOT_TUNING`, then `adjust`ed.
fn open_engine_with<D: crate::Device>(
    backend: poot_graph_plan::Backend,
    open: impl FnOnce() -> Result<D, crate::DeviceError>,
    adjust: impl FnOnce(&mut poot_graph_plan::Target),
) -> Option<crate::Engine<D>> {
    match open() {
        Ok(device) => {
            let mut target = device.limits().target(backend);
            // A planner setting to check on this device (`POOT_TUNING`, as backends read it).
            target.tuning = poot_graph_plan::Tuning::from_env()
                .unwrap_or_else(|e| panic!("POOT_TUNING for the suite: {e}"));
            adjust(&mut target);
            Some(crate::Engine::new(device, target))
        }
        Err(crate::DeviceError::Unavailable { backend: b, reason }) => {
            println!("SKIP: no {b} device ({reason})");
            None
        }
        Err(e) => panic!("opening the {backend} device failed: {e}"),
    }
}

/// The cases with block-quantized weights (every format's contractions over few and many rows,
/// sibling and gated projections, decoder layers), printing one line each: what
/// [`open_block_tiles_engine`]'s tiles stage from the blocks.
pub fn run_block_weights(exec: &mut dyn Executor) -> Vec<Outcome> {
    run_matching(exec, |name| {
        name.contains("weights") || name.contains("projections") || name.contains("expert")
    })
}

/// Runs the cases whose names `wanted` takes, printing one line each.
fn run_matching(exec: &mut dyn Executor, mut wanted: impl FnMut(&str) -> bool) -> Vec<Outcome> {
    cases()
        .into_iter()
        .filter(|case| wanted(&case.name))
        .map(|case| {
            let o = run_case(exec, &case);
            report(&o);
            o
        })
        .collect()
}

/// Every case, then [`check_copy`] and [`check_copy_bandwidth`], on `engine`; panics naming
/// each failed case.
pub fn check_all<D: crate::Device>(engine: &mut crate::Engine<D>) {
    let mut outcomes = run(engine);
    let device_checks = [check_copy(engine.device()), check_copy_bandwidth(engine)];
    for o in &device_checks {
        report(o);
    }
    outcomes.extend(device_checks);
    assert_all_passed(&outcomes);
}

/// The shared device suite as a device crate's tests, in one line:
///
/// ```text
/// poot_executor::device_suite!(Backend::Wgpu, || WgpuDevice::open(WgpuOptions::default()));
/// ```
///
/// The first argument is the backend the engine plans for, the second an expression that
/// opens the device (`Result<D, DeviceError>`), called once per test. Each test reports a skip
/// where the device is unavailable. It defines three tests: every case and the device checks
/// ([`check_all`]), tables split for a lowered buffer limit ([`run_split`]), and a step whose
/// late slot is written while its first part runs ([`run_overlapped`]).
#[macro_export]
macro_rules! device_suite {
    ($backend:expr, $open:expr) => {
        #[test]
        fn device_suite_matches_the_oracle() {
            if let Some(mut engine) = $crate::suite::open_engine($backend, $open, None) {
                $crate::suite::check_all(&mut engine);
            }
        }

        /// Tables over a lowered single-buffer limit, split into row chunks by the planner and
        /// uploaded from byte ranges of the stored bytes, match the oracle.
        #[test]
        fn split_tables_match_the_oracle() {
            let limit = Some($crate::suite::SPLIT_LIMIT_BYTES);
            if let Some(mut engine) = $crate::suite::open_engine($backend, $open, limit) {
                $crate::suite::assert_all_passed(&$crate::suite::run_split(&mut engine));
            }
        }

        /// Block-quantized weights staged from their blocks a unit per thread and rounded to
        /// f16 (`block_tiles=2`, on the FMA pipes where the device has no matrix units) match
        /// the rounded oracle: the staging the matrix-unit kernels use, on every backend.
        #[test]
        fn block_tiles_match_the_rounded_oracle() {
            if let Some(mut engine) = $crate::suite::open_block_tiles_engine($backend, $open) {
                $crate::suite::assert_all_passed(&$crate::suite::run_block_weights(&mut engine));
            }
        }

        /// The same with narrower slices in two sets, each slice's loads issued before the
        /// products of the slice before it.
        #[test]
        fn prefetching_block_tiles_match_the_rounded_oracle() {
            let open = $crate::suite::open_prefetching_block_tiles_engine($backend, $open);
            if let Some(mut engine) = open {
                $crate::suite::assert_all_passed(&$crate::suite::run_block_weights(&mut engine));
            }
        }

        /// A step whose last slot is written while the kernels before its first reader run
        /// matches the oracle, and ran as two parts.
        #[test]
        fn a_late_slot_is_written_between_the_two_parts_of_a_step() {
            if let Some(mut engine) = $crate::suite::open_engine($backend, $open, None) {
                $crate::suite::assert_all_passed(&[$crate::suite::run_overlapped(&mut engine)]);
                assert_eq!($crate::Executor::stats(&engine).overlapped_steps, 1);
            }
        }
    };
}
