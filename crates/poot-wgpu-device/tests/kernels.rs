//! WgpuDevice on kernel descriptions: kernels written with `KernelBuilder`, rendered by
//! `poot-kernel`'s WGSL renderer and compiled by `Device::compile`, checked bit for bit against CPU
//! loops. Without a Vulkan adapter each test prints `SKIP: no Vulkan adapter` and returns.

use half::{bf16, f16};
use poot_executor::{Device, DeviceError, Launch};
use poot_kernel::build::{
    KernelBuilder, group_count_x, group_id, load, load_byte, load_half, load_shared, local_id, lt,
    u32c,
};
use poot_kernel::{Access, Half, Kernel, Ty, UnOp, Word};
use poot_wgpu_device::{WgpuBuffer, WgpuDevice, WgpuOptions};

fn open() -> Option<WgpuDevice> {
    match WgpuDevice::open(WgpuOptions::default()) {
        Ok(d) => Some(d),
        Err(DeviceError::Unavailable { reason, .. }) => {
            println!("SKIP: no Vulkan adapter ({reason})");
            None
        }
        Err(e) => panic!("opening the device failed: {e}"),
    }
}

fn words(v: impl IntoIterator<Item = u32>) -> Vec<u8> {
    v.into_iter().flat_map(u32::to_le_bytes).collect()
}

fn upload(d: &mut WgpuDevice, bytes: &[u8]) -> WgpuBuffer {
    let b = d.alloc(bytes.len() as u64).expect("alloc");
    d.write(&b, 0, bytes).expect("write");
    b
}

fn read_words(d: &mut WgpuDevice, b: &WgpuBuffer, n: usize) -> Result<Vec<u32>, DeviceError> {
    let mut bytes = vec![0u8; 4 * n];
    d.read(b, 0, &mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// A grid-stride loop over `0..n`: `body(builder, i)` for each index this thread owns.
fn grid_stride(
    b: &mut KernelBuilder,
    n: u32,
    body: impl FnOnce(&mut KernelBuilder, poot_kernel::Expr),
) {
    let wg = b.workgroup();
    let start = group_id(0) * u32c(wg) + local_id();
    b.for_(start, u32c(n), group_count_x() * u32c(wg), body);
}

/// `out[i] = a[i] * 2 + b[i]` for `i < n`.
fn axpy(n: u32) -> Kernel {
    let mut b = KernelBuilder::new("axpy", 64);
    let a = b.param("a", Word::F32, Access::Read);
    let x = b.param("b", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    grid_stride(&mut b, n, |b, i| {
        let v = load(a, i.clone()) * poot_kernel::Expr::F32(2.0) + load(x, i.clone());
        b.store(out, i, v);
    });
    b.finish()
}

#[test]
fn elementwise_kernel_matches_cpu_bit_for_bit() {
    let Some(mut d) = open() else { return };
    let n = 1001u32;
    let k = d.compile(&axpy(n)).expect("compile");
    assert!(!k.can_fault());
    let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.731).sin() * 1e3).collect();
    let x: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 0.5)).collect();
    let ba = upload(&mut d, &words(a.iter().map(|v| v.to_bits())));
    let bx = upload(&mut d, &words(x.iter().map(|v| v.to_bits())));
    let bo = d.alloc(4 * u64::from(n)).expect("alloc");
    // 4 workgroups of 64 threads cover 1001 elements by striding.
    d.launch(&Launch {
        kernel: &k,
        grid: [4, 1, 1],
        args: &[&ba, &bx, &bo],
    })
    .expect("launch");
    d.synchronize().expect("synchronize");
    let out = read_words(&mut d, &bo, n as usize).expect("read");
    for i in 0..n as usize {
        assert_eq!(out[i], (a[i] * 2.0 + x[i]).to_bits(), "element {i}");
    }
}

#[test]
fn record_replay_of_rendered_kernels_equals_eager() {
    let Some(mut d) = open() else { return };
    let n = 300u32;
    let k = d.compile(&axpy(n)).expect("compile");
    let bytes = 4 * u64::from(n);
    let (ba, bx, bt, bo) = (
        d.alloc(bytes).expect("a"),
        d.alloc(bytes).expect("b"),
        d.alloc(bytes).expect("t"),
        d.alloc(bytes).expect("out"),
    );
    let launches = [
        Launch {
            kernel: &k,
            grid: [2, 1, 1],
            args: &[&ba, &bx, &bt],
        },
        Launch {
            kernel: &k,
            grid: [1, 1, 1],
            args: &[&bt, &bx, &bo],
        },
    ];
    let recording = d.record(&launches).expect("record");
    for step in 0..3u32 {
        let a = words((0..n).map(|i| ((i * 7 + step * 13) as f32 * 0.25).to_bits()));
        let x = words((0..n).map(|i| ((i ^ step) as f32 - 100.0).to_bits()));
        d.write(&ba, 0, &a).expect("write");
        d.write(&bx, 0, &x).expect("write");
        for l in &launches {
            d.launch(l).expect("launch");
        }
        let eager = read_words(&mut d, &bo, n as usize).expect("eager");
        d.write(&bo, 0, &vec![0; bytes as usize]).expect("clear");
        d.write(&bt, 0, &vec![0; bytes as usize]).expect("clear");
        d.replay(&recording).expect("replay");
        d.synchronize().expect("synchronize");
        assert_eq!(
            read_words(&mut d, &bo, n as usize).expect("replayed"),
            eager,
            "step {step}"
        );
    }
}

#[test]
fn shared_memory_reduction_with_barriers() {
    let Some(mut d) = open() else { return };
    let wg = 32u32;
    let n = 200u32;
    let groups = n.div_ceil(wg);
    // Each workgroup sums its block of u32 values through a shared tree.
    let mut b = KernelBuilder::new("block_sum_u32", wg);
    let x = b.param("x", Word::U32, Access::Read);
    let sums = b.param("sums", Word::U32, Access::ReadWrite);
    let s = b.shared("partial", Ty::U32, wg);
    let i = b.let_(Ty::U32, group_id(0) * u32c(wg) + local_id());
    let v = b.var(Ty::U32, u32c(0));
    b.if_(lt(i.clone(), u32c(n)), |b| b.set(v, load(x, i.clone())));
    b.store_shared(s, local_id(), poot_kernel::Expr::Var(v));
    b.barrier();
    let mut stride = wg / 2;
    while stride > 0 {
        b.if_(lt(local_id(), u32c(stride)), |b| {
            let sum = load_shared(s, local_id()) + load_shared(s, local_id() + u32c(stride));
            b.store_shared(s, local_id(), sum);
        });
        b.barrier();
        stride /= 2;
    }
    b.if_(poot_kernel::build::eq(local_id(), u32c(0)), |b| {
        b.store(sums, group_id(0), load_shared(s, u32c(0)))
    });
    let k = d.compile(&b.finish()).expect("compile");
    let xs: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761) >> 8).collect();
    let bx = upload(&mut d, &words(xs.iter().copied()));
    let bs = d.alloc(4 * u64::from(groups)).expect("alloc");
    d.launch(&Launch {
        kernel: &k,
        grid: [groups, 1, 1],
        args: &[&bx, &bs],
    })
    .expect("launch");
    let got = read_words(&mut d, &bs, groups as usize).expect("read");
    let want: Vec<u32> = xs
        .chunks(wg as usize)
        .map(|c| c.iter().fold(0u32, |a, &v| a.wrapping_add(v)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn byte_and_half_loads_match_cpu() {
    let Some(mut d) = open() else { return };
    let n = 37u32; // odd: the last half sits in the low half of a word
    let mut b = KernelBuilder::new("sub_word_loads", 16);
    let packed = b.param("packed", Word::U32, Access::Read);
    let bytes_out = b.param("bytes_out", Word::U32, Access::ReadWrite);
    let f16_out = b.param("f16_out", Word::F32, Access::ReadWrite);
    let bf16_out = b.param("bf16_out", Word::F32, Access::ReadWrite);
    grid_stride(&mut b, n, |b, i| {
        b.store(
            bytes_out,
            i.clone(),
            load_byte(packed, i.clone() * u32c(3) + u32c(1)),
        );
        b.store(f16_out, i.clone(), load_half(packed, i.clone(), Half::F16));
        b.store(bf16_out, i.clone(), load_half(packed, i, Half::Bf16));
    });
    let k = d.compile(&b.finish()).expect("compile");
    // Halves covering normals, subnormals, zeros, infinities and NaN; the same bits read as
    // bf16.
    let special = [
        0x0000u16, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff, 0x7c00, 0xfc00, 0x7e00,
        0x7c01, 0x3555,
    ];
    let halves: Vec<u16> = (0..128u32)
        .map(|i| {
            special
                .get(i as usize)
                .copied()
                .unwrap_or((i.wrapping_mul(40503) >> 3) as u16)
        })
        .collect();
    let packed_bytes: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let bp = upload(&mut d, &packed_bytes);
    let (bb, bh, bbf) = (
        d.alloc(4 * u64::from(n)).expect("a"),
        d.alloc(4 * u64::from(n)).expect("a"),
        d.alloc(4 * u64::from(n)).expect("a"),
    );
    d.launch(&Launch {
        kernel: &k,
        grid: [2, 1, 1],
        args: &[&bp, &bb, &bh, &bbf],
    })
    .expect("launch");
    let got_bytes = read_words(&mut d, &bb, n as usize).expect("read");
    let got_f16 = read_words(&mut d, &bh, n as usize).expect("read");
    let got_bf16 = read_words(&mut d, &bbf, n as usize).expect("read");
    for i in 0..n as usize {
        assert_eq!(
            got_bytes[i],
            u32::from(packed_bytes[i * 3 + 1]),
            "byte {}",
            i * 3 + 1
        );
        let h = halves[i];
        // NaNs too: both keep the payload's top bits and set the quiet bit.
        assert_eq!(
            got_f16[i],
            f16::from_bits(h).to_f32().to_bits(),
            "f16 {h:#06x}"
        );
        assert_eq!(
            got_bf16[i],
            bf16::from_bits(h).to_f32().to_bits(),
            "bf16 {h:#06x}"
        );
    }
}

#[test]
fn rendered_fault_comes_back_with_kernel_and_code() {
    let Some(mut d) = open() else { return };
    let n = 50u32;
    // `out[i] = sqrt(x[i])`, faulting with code 42 on a negative input.
    let mut b = KernelBuilder::new("checked_sqrt", 32);
    let x = b.param("x", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    grid_stride(&mut b, n, |b, i| {
        let v = b.let_(Ty::F32, load(x, i.clone()));
        b.if_(lt(v.clone(), poot_kernel::Expr::F32(0.0)), |b| b.fault(42));
        b.store(out, i, poot_kernel::build::un(UnOp::Sqrt, v));
    });
    let checked = d.compile(&b.finish()).expect("compile");
    assert!(checked.can_fault());
    let plain = d.compile(&axpy(n)).expect("compile");
    let bytes = 4 * u64::from(n);
    let (bx, by, bo) = (
        d.alloc(bytes).expect("x"),
        d.alloc(bytes).expect("y"),
        d.alloc(bytes).expect("out"),
    );
    let recording = d
        .record(&[
            Launch {
                kernel: &plain,
                grid: [1, 1, 1],
                args: &[&bx, &bx, &by],
            },
            Launch {
                kernel: &checked,
                grid: [2, 1, 1],
                args: &[&by, &bo],
            },
        ])
        .expect("record");
    d.write(&bx, 0, &words((0..n).map(|i| (i as f32).to_bits())))
        .expect("write");
    d.replay(&recording).expect("replay");
    d.synchronize().expect("no fault on non-negative inputs");
    d.write(&bx, 0, &words((0..n).map(|i| (i as f32 - 10.0).to_bits())))
        .expect("write");
    d.replay(&recording).expect("replay");
    assert_eq!(
        d.synchronize(),
        Err(DeviceError::KernelFault {
            kernel: "checked_sqrt".to_owned(),
            code: 42
        })
    );
    // The words were reset and the device is usable.
    d.write(&bx, 0, &words((0..n).map(|i| (i as f32).to_bits())))
        .expect("write");
    d.replay(&recording).expect("replay");
    d.synchronize().expect("clean again");
    let got = read_words(&mut d, &bo, n as usize).expect("read");
    assert_eq!(got[9], (27.0f32).sqrt().to_bits());
}

#[test]
fn renderer_rejects_are_compile_errors() {
    let Some(mut d) = open() else { return };
    let mut b = KernelBuilder::new("bad_store", 8);
    let x = b.param("x", Word::F32, Access::Read);
    b.store(x, u32c(0), poot_kernel::Expr::F32(1.0));
    assert!(
        matches!(d.compile(&b.finish()), Err(DeviceError::Compile { kernel, .. }) if kernel == "bad_store")
    );
    assert!(!d.is_poisoned());
}
