//! The contraction library against a direct sum: every format it decodes, row counts on both
//! sides of its few-rows/many-rows split, ragged tiles and chunked depths, the weights decoded
//! by `poot_formats` (ggml's values) and summed in f64.

#![allow(clippy::unwrap_used)]

use poot_cpu_device::{CpuDevice, CpuOptions};
use poot_executor::{Command, Contraction, Device};
use poot_executor::{EXACT_LIBRARY_BLOCKS, LibraryOperands, StoredWeights};
use poot_formats::{FieldKind, decode_blocks};

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// `cols` rows of `depth` weights stored as `w`, with the f32 values they decode to.
fn weights(w: StoredWeights, cols: usize, depth: usize, rng: &mut Rng) -> (Vec<u8>, Vec<f32>) {
    match w {
        StoredWeights::F32 => {
            let v: Vec<f32> = (0..cols * depth).map(|_| rng.unit()).collect();
            (bytemuck_f32(&v), v)
        }
        StoredWeights::F16 | StoredWeights::BF16 => {
            let mut bytes = Vec::with_capacity(cols * depth * 2);
            let mut values = Vec::with_capacity(cols * depth);
            for _ in 0..cols * depth {
                let x = rng.unit();
                let (b, v) = if w == StoredWeights::F16 {
                    let h = half::f16::from_f32(x);
                    (h.to_le_bytes(), h.to_f32())
                } else {
                    let h = half::bf16::from_f32(x);
                    (h.to_le_bytes(), h.to_f32())
                };
                bytes.extend_from_slice(&b);
                values.push(v);
            }
            (bytes, values)
        }
        StoredWeights::Blocks(b) => {
            let blocks = cols * depth / b.block_elems();
            let mut bytes: Vec<u8> = (0..blocks * b.block_bytes())
                .map(|_| rng.next() as u8)
                .collect();
            // Scales and minimums of a size weights have, so no block decodes to inf or NaN.
            for block in bytes.chunks_mut(b.block_bytes()) {
                for f in b.fields() {
                    if f.kind == FieldKind::F16 {
                        let v = half::f16::from_f32(0.01 + 0.02 * rng.unit().abs());
                        block[f.offset_bytes..f.offset_bytes + 2].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            let mut values = vec![0.0f32; cols * depth];
            decode_blocks(b, &bytes, &mut values).expect("whole blocks");
            (bytes, values)
        }
    }
}

fn bytemuck_f32(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `x` rounded to 8-bit blocks of 32 with the graph's f32 operations (poot-graph-plan's
/// `activation_blocks`).
fn rounded_to_blocks(x: &[f32]) -> Vec<f32> {
    x.chunks(32)
        .flat_map(|b| {
            let d = b.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
            let inverse = if d > 0.0 { 1.0 / d } else { 0.0 };
            b.iter().map(move |v| (v * inverse).round_ties_even() * d)
        })
        .collect()
}

/// How the library is asked to multiply.
#[derive(Clone, Copy, PartialEq)]
enum Products {
    Exact,
    /// The left side rounded to 8-bit blocks, integer products.
    Integer,
}

fn run_case(
    device: &mut CpuDevice,
    w: StoredWeights,
    products: Products,
    rows: usize,
    cols: usize,
    depth: usize,
) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (rows * 131 + cols * 7 + depth) as u64);
    let (stored, values) = weights(w, cols, depth, &mut rng);
    // Some elements exactly between two integers of their block once scaled, and a block of
    // zeros, which the rounding must take as the graph does.
    let mut lhs: Vec<f32> = (0..rows * depth).map(|_| rng.unit()).collect();
    if products == Products::Integer {
        for b in lhs.chunks_mut(32) {
            b[0] = 127.0 / 64.0;
            b[1] = 2.5 / 64.0;
            b[2] = -3.5 / 64.0;
        }
        lhs[depth - 32..depth].fill(0.0);
    }
    let operands = match (products, w) {
        (Products::Integer, StoredWeights::Blocks(b)) => LibraryOperands::Integer(b),
        _ => LibraryOperands::Exact(w),
    };
    let summed = match products {
        Products::Exact => lhs.clone(),
        Products::Integer => rounded_to_blocks(&lhs),
    };
    let buffer = |d: &mut CpuDevice, bytes: &[u8]| {
        let b = d.alloc(bytes.len().max(4) as u64).unwrap();
        d.write(&b, 0, bytes).unwrap();
        b
    };
    let lhs_buf = buffer(device, &bytemuck_f32(&lhs));
    let w_buf = buffer(device, &stored);
    let out = device.alloc((rows * cols * 4) as u64).unwrap();
    let recording = device
        .record_commands(&[Command::Contract(Contraction {
            operands,
            lhs: &lhs_buf,
            weights: &w_buf,
            transpose_weights: true,
            out: &out,
            rows: rows as u32,
            cols: cols as u32,
            depth: depth as u32,
        })])
        .unwrap();
    device.replay(&recording).unwrap();
    let mut got = vec![0u8; rows * cols * 4];
    device.read(&out, 0, &mut got).unwrap();
    for m in 0..rows {
        for n in 0..cols {
            let (mut want, mut scale) = (0.0f64, 0.0f64);
            for k in 0..depth {
                let p = f64::from(summed[m * depth + k]) * f64::from(values[n * depth + k]);
                want += p;
                scale += p.abs();
            }
            let at = 4 * (m * cols + n);
            let g = f32::from_le_bytes(got[at..at + 4].try_into().unwrap());
            let err = (f64::from(g) - want).abs();
            assert!(
                g.is_finite() && err <= 1e-5 * scale.max(1e-6),
                "{w:?} {rows}x{cols}x{depth}: out[{m}, {n}] = {g}, want {want} (sum of |terms| {scale})"
            );
        }
    }
}

#[test]
fn every_format_matches_a_direct_sum_at_every_shape() {
    let mut device = match CpuDevice::open(CpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no C compiler ({e})");
            return;
        }
    };
    let mut formats = vec![StoredWeights::F32, StoredWeights::F16, StoredWeights::BF16];
    formats.extend(
        EXACT_LIBRARY_BLOCKS
            .iter()
            .map(|&b| StoredWeights::Blocks(b)),
    );
    for w in formats {
        let unit = match w {
            StoredWeights::Blocks(b) => b.block_elems(),
            _ => 1,
        };
        // Depths past one decode chunk (1024) and past one packed chunk (256), and odd ones
        // where the format allows.
        let depths: Vec<usize> = if unit == 1 {
            vec![5, 67, 300, 1030]
        } else {
            vec![unit, 5 * unit, 1280_usize.next_multiple_of(unit)]
        };
        for depth in depths {
            // Rows below and above the many-rows threshold (16), tiles cut at either edge.
            for (rows, cols) in [(1, 1), (1, 70), (3, 7), (16, 33), (37, 70), (9, 200)] {
                run_case(&mut device, w, Products::Exact, rows, cols, depth);
            }
        }
    }
}

#[test]
fn integer_products_match_a_direct_sum_of_the_rounded_left_side() {
    let mut device = match CpuDevice::open(CpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no C compiler ({e})");
            return;
        }
    };
    for &b in &poot_executor::INTEGER_BLOCKS {
        let unit = b.block_elems();
        for depth in [
            unit,
            5 * unit,
            1280_usize.next_multiple_of(unit),
            576_usize.next_multiple_of(unit),
        ] {
            // Whole and ragged tiles of six rows by 32 columns, one chunk of 256 columns and more.
            for (rows, cols) in [(1, 1), (3, 7), (16, 33), (37, 70), (7, 300), (25, 1536)] {
                run_case(
                    &mut device,
                    StoredWeights::Blocks(b),
                    Products::Integer,
                    rows,
                    cols,
                    depth,
                );
            }
        }
    }
}

#[test]
fn a_half_precision_contraction_is_refused() {
    let Ok(mut device) = CpuDevice::open(CpuOptions::default()) else {
        return;
    };
    let b = device.alloc(64).unwrap();
    let out = device.alloc(64).unwrap();
    let refused = device.record_commands(&[Command::Contract(Contraction {
        operands: LibraryOperands::Half {
            half: poot_executor::HalfType::F16,
            words: poot_executor::WeightWords::Stored,
        },
        lhs: &b,
        weights: &b,
        transpose_weights: true,
        out: &out,
        rows: 1,
        cols: 1,
        depth: 8,
    })]);
    assert!(refused.is_err());
}
