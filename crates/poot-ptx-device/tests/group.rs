//! A group of CUDA devices with NCCL: opening it (typed refusals without CUDA or NCCL, with a
//! repeated or missing ordinal), and its all-reduce and broadcast run eagerly and replayed from a
//! captured CUDA graph among kernels, on every GPU present (up to 4; one GPU is a group of one,
//! which still runs NCCL). On a machine without CUDA each test prints SKIP.

#![allow(clippy::unwrap_used)]

use poot_executor::{Command, Device, DeviceError, Executor, Launch};
use poot_kernel::build::{KernelBuilder, group_id, load, local_id, lt, u32c};
use poot_kernel::ir::{Access, Kernel, Ty, Word};
use poot_ptx_device::{PtxConfig, PtxDevice, open_group, open_group_devices};

/// The largest group this machine has (up to 4 devices), or `None` after a SKIP line.
fn group() -> Option<Vec<PtxDevice>> {
    let mut last = None;
    for n in (1..=4usize).rev() {
        let ordinals: Vec<usize> = (0..n).collect();
        match open_group_devices(&ordinals, PtxConfig::default()) {
            Ok((devices, _abort)) => return Some(devices),
            Err(e) => last = Some(e),
        }
    }
    println!(
        "SKIP: no CUDA group ({})",
        last.map(|e| e.to_string()).unwrap_or_default()
    );
    None
}

/// `out[i] = in[i] * 2` over `n` f32.
fn doubling(n: u32) -> Kernel {
    let mut k = KernelBuilder::new("double", 64);
    let x = k.param("x", Word::F32, Access::Read);
    let y = k.param("y", Word::F32, Access::ReadWrite);
    let i = k.let_(Ty::U32, group_id(0) * u32c(64) + local_id());
    k.if_(lt(i.clone(), u32c(n)), |k| {
        k.store(
            y,
            i.clone(),
            load(x, i.clone()) * poot_kernel::build::f32c(2.0),
        )
    });
    k.finish()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

#[test]
fn a_groups_all_reduce_sums_every_ranks_buffer_eagerly_and_replayed() {
    let Some(mut devices) = group() else { return };
    let ranks = devices.len();
    let n = 1000usize;
    println!("{ranks} ranks on {}", devices[0].limits().name);
    // Rank r holds (r + 1) * i; the sum is i * R(R + 1)/2, exact in f32 for these sizes.
    let want: Vec<f32> = (0..n)
        .map(|i| i as f32 * (ranks * (ranks + 1) / 2) as f32)
        .collect();
    std::thread::scope(|s| {
        for (r, d) in devices.iter_mut().enumerate() {
            let want = &want;
            s.spawn(move || {
                assert_eq!(d.rank(), Some(r));
                assert_eq!(d.limits().group_ranks, ranks);
                let src = d.alloc(4 * n as u64).unwrap();
                let mid = d.alloc(4 * n as u64).unwrap();
                let dst = d.alloc(4 * n as u64).unwrap();
                let part: Vec<u8> = (0..n)
                    .flat_map(|i| (i as f32 * (r + 1) as f32).to_le_bytes())
                    .collect();
                d.write(&src, 0, &part).unwrap();
                // Eager.
                d.all_reduce_sum(&src, &dst, n as u64).unwrap();
                let mut out = vec![0u8; 4 * n];
                d.read(&dst, 0, &mut out).unwrap();
                assert_eq!(&f32s(&out), want, "rank {r}, eager");
                // Captured between two kernels: dst = 2 * src, all-reduce dst -> mid, dst =
                // 2 * mid, replayed twice.
                let k = d.compile(&doubling(n as u32)).unwrap();
                let grid = [(n as u32).div_ceil(64), 1, 1];
                let rec = d
                    .record_commands(&[
                        Command::Launch(Launch {
                            kernel: &k,
                            grid,
                            args: &[&src, &dst],
                        }),
                        Command::AllReduceSum {
                            src: &dst,
                            dst: &mid,
                            n_elems: n as u64,
                        },
                        Command::Launch(Launch {
                            kernel: &k,
                            grid,
                            args: &[&mid, &dst],
                        }),
                    ])
                    .unwrap();
                for _ in 0..2 {
                    d.replay(&rec).unwrap();
                    d.synchronize().unwrap();
                    d.read(&dst, 0, &mut out).unwrap();
                    let four: Vec<f32> = want.iter().map(|x| 4.0 * x).collect();
                    assert_eq!(f32s(&out), four, "rank {r}, replayed");
                }
            });
        }
    });
}

#[test]
fn a_groups_broadcast_copies_the_roots_words_eagerly_and_replayed() {
    let Some(mut devices) = group() else { return };
    let ranks = devices.len();
    let n = 1000usize;
    println!("{ranks} ranks on {}", devices[0].limits().name);
    // Rank r holds words r * 1_000_000 + i (a NaN payload in word 0 of every rank, so the copy
    // is checked bit for bit); every root in turn.
    let words = |r: usize| -> Vec<u32> {
        (0..n)
            .map(|i| {
                if i == 0 {
                    0x7fc0_0000 | r as u32
                } else {
                    (r * 1_000_000 + i) as u32
                }
            })
            .collect()
    };
    let bytes = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_le_bytes()).collect() };
    std::thread::scope(|s| {
        for (r, d) in devices.iter_mut().enumerate() {
            s.spawn(move || {
                let src = d.alloc(4 * n as u64).unwrap();
                let mid = d.alloc(4 * n as u64).unwrap();
                let dst = d.alloc(4 * n as u64).unwrap();
                d.write(&src, 0, &bytes(&words(r))).unwrap();
                let mut out = vec![0u8; 4 * n];
                for root in 0..ranks {
                    d.broadcast(&src, &dst, n as u64, root).unwrap();
                    d.read(&dst, 0, &mut out).unwrap();
                    assert_eq!(out, bytes(&words(root)), "rank {r}, root {root}, eager");
                }
                // A root outside the group is refused before NCCL sees it.
                assert!(matches!(
                    d.broadcast(&src, &dst, n as u64, ranks),
                    Err(DeviceError::BadLaunch { .. })
                ));
                // Captured between two kernels: dst = 2 * src (as f32), broadcast dst -> mid
                // from the last rank, dst = 2 * mid, replayed twice.
                let k = d.compile(&doubling(n as u32)).unwrap();
                let grid = [(n as u32).div_ceil(64), 1, 1];
                let root = ranks - 1;
                let plain: Vec<u8> = (0..n)
                    .flat_map(|i| (i as f32 + r as f32 * 1000.0).to_le_bytes())
                    .collect();
                d.write(&src, 0, &plain).unwrap();
                let rec = d
                    .record_commands(&[
                        Command::Launch(Launch {
                            kernel: &k,
                            grid,
                            args: &[&src, &dst],
                        }),
                        Command::Broadcast {
                            src: &dst,
                            dst: &mid,
                            n_elems: n as u64,
                            root,
                        },
                        Command::Launch(Launch {
                            kernel: &k,
                            grid,
                            args: &[&mid, &dst],
                        }),
                    ])
                    .unwrap();
                let want: Vec<f32> = (0..n)
                    .map(|i| 4.0 * (i as f32 + root as f32 * 1000.0))
                    .collect();
                for _ in 0..2 {
                    d.replay(&rec).unwrap();
                    d.synchronize().unwrap();
                    d.read(&dst, 0, &mut out).unwrap();
                    assert_eq!(f32s(&out), want, "rank {r}, replayed");
                }
            });
        }
    });
}

#[test]
fn the_test_kernel_renders() {
    let k = doubling(1000);
    k.validate().unwrap();
    poot_kernel::render::render_cuda(&k).unwrap();
}

#[test]
fn a_device_alone_refuses_collectives() {
    let mut d = match PtxDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP: no CUDA ({e})");
            return;
        }
    };
    let a = d.alloc(16).unwrap();
    let b = d.alloc(16).unwrap();
    assert!(matches!(
        d.all_reduce_sum(&a, &b, 4),
        Err(DeviceError::NoCollectives { .. })
    ));
    let refused = d.record_commands(&[Command::AllReduceSum {
        src: &a,
        dst: &b,
        n_elems: 4,
    }]);
    assert!(matches!(refused, Err(DeviceError::NoCollectives { .. })));
    assert!(matches!(
        d.broadcast(&a, &b, 4, 0),
        Err(DeviceError::NoCollectives { .. })
    ));
    let refused = d.record_commands(&[Command::Broadcast {
        src: &a,
        dst: &b,
        n_elems: 4,
        root: 0,
    }]);
    assert!(matches!(refused, Err(DeviceError::NoCollectives { .. })));
    assert!(d.poisoned().is_none());
}

#[test]
fn bad_ordinals_are_refused_before_any_device_opens() {
    for ordinals in [&[][..], &[0, 0][..], &[1, 0, 1][..]] {
        match open_group(ordinals) {
            Err(DeviceError::Unavailable { backend, reason }) => {
                assert_eq!(backend, "NCCL");
                assert!(
                    reason.contains("twice") || reason.contains("at least one"),
                    "{reason}"
                );
            }
            Err(e) => panic!("unexpected: {e}"),
            Ok(_) => panic!("opened a group of {ordinals:?}"),
        }
    }
    // A group on a machine without CUDA (or without that many devices) is a typed refusal.
    match open_group(&[0, 1 << 20]) {
        Err(DeviceError::Unavailable { .. }) => {}
        Err(e) => panic!("unexpected: {e}"),
        Ok(c) => panic!("opened {} ranks", c.ranks()),
    }
}
