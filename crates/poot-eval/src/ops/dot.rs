//! Accumulation kernels: sums and dot products in a fixed order.
//!
//! f32 kernels keep eight interleaved partial sums (lane `i` takes elements `i, i + 8, ...`),
//! combine them pairwise and then add the tail left to right. The order is part of the oracle's
//! definition: it does not depend on the host, the thread count or the SIMD width, and products
//! are never fused into FMAs. f64 kernels widen every element (an f32 product is exact in f64)
//! and keep four partial sums.

const LANES: usize = 8;

fn combine8(acc: [f32; LANES]) -> f32 {
    ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
}

pub(crate) fn sum_f32(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    tail.iter().fold(combine8(acc), |s, &v| s + v)
}

pub(crate) fn sum_f64(x: &[f32]) -> f64 {
    let mut acc = [0f64; 4];
    let chunks = x.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..4 {
            acc[l] += f64::from(c[l]);
        }
    }
    tail.iter()
        .fold((acc[0] + acc[1]) + (acc[2] + acc[3]), |s, &v| {
            s + f64::from(v)
        })
}

/// `Σ a[i] * b[i]` in f32 (the slices have one length).
pub(crate) fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (ca, ta) = a[..n].as_chunks::<LANES>();
    let (cb, tb) = b[..n].as_chunks::<LANES>();
    let mut acc = [0f32; LANES];
    for (x, y) in ca.iter().zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] * y[l];
        }
    }
    ta.iter()
        .zip(tb)
        .fold(combine8(acc), |s, (&x, &y)| s + x * y)
}

/// `dot_f32(a[r], b)` for four rows at once, bit for bit: each row keeps its own eight lanes, so
/// sharing the loads of `b` changes nothing in the result.
pub(crate) fn dot4_f32(a: [&[f32]; 4], b: &[f32]) -> [f32; 4] {
    // Equal lengths are the caller's contract; trimming to the shortest keeps this total.
    let n = a.iter().fold(b.len(), |n, a| n.min(a.len()));
    let (cb, tb) = b[..n].as_chunks::<LANES>();
    let [c0, c1, c2, c3] = a.map(|a| a[..n].as_chunks::<LANES>().0);
    let mut acc = [[0f32; LANES]; 4];
    for ((((y, x0), x1), x2), x3) in cb.iter().zip(c0).zip(c1).zip(c2).zip(c3) {
        for l in 0..LANES {
            acc[0][l] += x0[l] * y[l];
            acc[1][l] += x1[l] * y[l];
            acc[2][l] += x2[l] * y[l];
            acc[3][l] += x3[l] * y[l];
        }
    }
    let mut out = [0f32; 4];
    for (r, o) in out.iter_mut().enumerate() {
        let ta = &a[r][n - tb.len()..n];
        *o = ta
            .iter()
            .zip(tb)
            .fold(combine8(acc[r]), |s, (&x, &y)| s + x * y);
    }
    out
}

/// `dot_f64(a[r], b)` for four rows at once, bit for bit (each row keeps its own four lanes).
pub(crate) fn dot4_f64(a: [&[f32]; 4], b: &[f32]) -> [f32; 4] {
    let n = a.iter().fold(b.len(), |n, a| n.min(a.len()));
    let (cb, tb) = b[..n].as_chunks::<4>();
    let [c0, c1, c2, c3] = a.map(|a| a[..n].as_chunks::<4>().0);
    let mut acc = [[0f64; 4]; 4];
    for ((((y, x0), x1), x2), x3) in cb.iter().zip(c0).zip(c1).zip(c2).zip(c3) {
        for l in 0..4 {
            let w = f64::from(y[l]);
            acc[0][l] += f64::from(x0[l]) * w;
            acc[1][l] += f64::from(x1[l]) * w;
            acc[2][l] += f64::from(x2[l]) * w;
            acc[3][l] += f64::from(x3[l]) * w;
        }
    }
    let mut out = [0f32; 4];
    for (r, o) in out.iter_mut().enumerate() {
        let ta = &a[r][n - tb.len()..n];
        let s = ta.iter().zip(tb).fold(
            (acc[r][0] + acc[r][1]) + (acc[r][2] + acc[r][3]),
            |s, (&x, &y)| s + f64::from(x) * f64::from(y),
        );
        *o = s as f32;
    }
    out
}

/// `Σ a[i] * b[i]` in f64, rounded once to f32.
pub(crate) fn dot_f64(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..4 {
            acc[l] += f64::from(x[l]) * f64::from(y[l]);
        }
    }
    let s = ta
        .iter()
        .zip(tb)
        .fold((acc[0] + acc[1]) + (acc[2] + acc[3]), |s, (&x, &y)| {
            s + f64::from(x) * f64::from(y)
        });
    s as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_match_plain_sums_on_exact_data() {
        let a: Vec<f32> = (0..37).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..37).map(|i| (i % 5) as f32).collect();
        let want: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert_eq!(dot_f32(&a, &b), want);
        assert_eq!(dot_f64(&a, &b), want);
        assert_eq!(sum_f32(&a), 666.0);
        assert_eq!(sum_f64(&a), 666.0);
        assert_eq!(dot_f32(&[], &[]), 0.0);
    }

    #[test]
    fn four_row_kernels_equal_the_one_row_kernels_bit_for_bit() {
        for n in [0, 1, 7, 8, 9, 31, 576, 1000] {
            let rows: Vec<Vec<f32>> = (0..4)
                .map(|r| {
                    (0..n)
                        .map(|i| ((i * 7 + r * 13) % 17) as f32 * 0.37 - 2.9)
                        .collect()
                })
                .collect();
            let b: Vec<f32> = (0..n).map(|i| ((i * 5) % 11) as f32 * 0.61 - 3.1).collect();
            let a = [&rows[0][..], &rows[1][..], &rows[2][..], &rows[3][..]];
            let (q32, q64) = (dot4_f32(a, &b), dot4_f64(a, &b));
            for r in 0..4 {
                assert_eq!(q32[r].to_bits(), dot_f32(a[r], &b).to_bits());
                assert_eq!(q64[r].to_bits(), dot_f64(a[r], &b).to_bits());
            }
        }
    }
}

#[cfg(test)]
mod bench {
    use super::*;

    #[test]
    #[ignore]
    fn dot_speed() {
        let a: Vec<f32> = (0..576).map(|i| i as f32 * 0.001).collect();
        let rows: Vec<Vec<f32>> = (0..4)
            .map(|r| (0..576).map(|i| (i + r) as f32 * 0.002).collect())
            .collect();
        let t = std::time::Instant::now();
        let mut s = 0.0;
        for _ in 0..100_000 {
            s += dot_f32(std::hint::black_box(&a), std::hint::black_box(&rows[0]));
        }
        let e = t.elapsed().as_secs_f64();
        println!("dot_f32: {:.2} GMAC/s ({s})", 576e5 / e / 1e9);
        let t = std::time::Instant::now();
        for _ in 0..25_000 {
            let r = dot4_f32(
                [&rows[0], &rows[1], &rows[2], &rows[3]],
                std::hint::black_box(&a),
            );
            s += r[0];
        }
        let e = t.elapsed().as_secs_f64();
        println!("dot4_f32: {:.2} GMAC/s ({s})", 576e5 / e / 1e9);
        let t = std::time::Instant::now();
        for _ in 0..100_000 {
            s += dot_f64(std::hint::black_box(&a), std::hint::black_box(&rows[0]));
        }
        let e = t.elapsed().as_secs_f64();
        println!("dot_f64: {:.2} GMAC/s ({s})", 576e5 / e / 1e9);
    }
}
