//! VulkanDevice on hand-written WGSL: what the driver reports, memory, launches, record/replay,
//! faults and timeouts. Runs on any Vulkan device (lavapipe in CI); without one each test
//! prints a `SKIP` line and returns.

use std::time::{Duration, Instant};

use poot_executor::{Device, DeviceError, Launch};
use poot_kernel::Access;
use poot_vulkan_device::{
    DeviceKind, VulkanBuffer, VulkanDevice, VulkanKernel, VulkanOptions, WgslShader,
};

fn open() -> Option<VulkanDevice> {
    match VulkanDevice::open(VulkanOptions::default()) {
        Ok(d) => Some(d),
        Err(DeviceError::Unavailable { reason, .. }) => {
            println!("SKIP: no Vulkan device ({reason})");
            None
        }
        Err(e) => panic!("opening the device failed: {e}"),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_u32(d: &mut VulkanDevice, b: &VulkanBuffer, n: usize) -> Result<Vec<u32>, DeviceError> {
    let mut bytes = vec![0u8; n * 4];
    d.read(b, 0, &mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn read_f32(d: &mut VulkanDevice, b: &VulkanBuffer, n: usize) -> Result<Vec<f32>, DeviceError> {
    Ok(read_u32(d, b, n)?.into_iter().map(f32::from_bits).collect())
}

/// `out[i] = a[i] * 2 + b[i]`, grid-stride over `n = arrayLength(&out)`.
const AXPY: &str = r#"
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&out);
    for (var i = wid.x * 64u + lid.x; i < n; i += nwg.x * 64u) {
        out[i] = a[i] * 2.0 + b[i];
    }
}
"#;

fn axpy(d: &mut VulkanDevice) -> VulkanKernel {
    let params = [Access::Read, Access::Read, Access::ReadWrite];
    d.compile_wgsl(&WgslShader {
        name: "axpy",
        source: AXPY,
        entry: "main",
        params: &params,
        fault_binding: None,
    })
    .expect("axpy compiles")
}

/// `out[i] = x[i]`, faulting with `code` where `x[i] > limit[0]` (the renderer's fault words:
/// the largest code in word 0, a flag in word 1).
fn checked_copy(d: &mut VulkanDevice, name: &str, code: u32) -> VulkanKernel {
    let source = format!(
        r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read> limit: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> fault: array<atomic<u32>>;
@compute @workgroup_size(32)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = gid.x;
    if (i < arrayLength(&out)) {{
        if (x[i] > limit[0]) {{
            atomicMax(&fault[0], {code}u);
            atomicOr(&fault[1], 1u);
        }}
        out[i] = x[i];
    }}
}}
"#
    );
    let params = [Access::Read, Access::Read, Access::ReadWrite];
    d.compile_wgsl(&WgslShader {
        name,
        source: &source,
        entry: "main",
        params: &params,
        fault_binding: Some(3),
    })
    .expect("checked_copy compiles")
}

#[test]
fn reports_its_limits_and_its_matrix_hardware() {
    let Some(d) = open() else { return };
    let info = d.info();
    let l = d.limits();
    println!("device: {info:?}");
    println!("limits: {l:?}");
    match &info.cooperative_matrix {
        Some(m) => {
            println!(
                "VK_KHR_cooperative_matrix: {} shapes, f16 x f16 -> f32: {}",
                m.shapes.len(),
                m.has_f16_f32()
            );
            assert!(
                !m.shapes.is_empty(),
                "an offered extension lists its shapes"
            );
            assert!(m.shapes.iter().all(|s| s.m > 0 && s.n > 0 && s.k > 0));
        }
        None => println!("VK_KHR_cooperative_matrix: not offered"),
    }
    if info.kind == DeviceKind::Cpu && info.driver.starts_with("llvmpipe") {
        assert_eq!(
            d.loop_iteration_budget(),
            Some(65535),
            "lavapipe caps loops at 65535 iterations per invocation"
        );
        assert_eq!(
            info.cooperative_matrix, None,
            "lavapipe has no matrix units"
        );
    }
    assert_eq!(l.max_loop_iterations, d.loop_iteration_budget());
    assert!(info.api_version >= (1, 2, 0));
    assert!(l.max_buffer_bytes >= 128 << 20);
    // Every Vulkan device has a device-local heap.
    assert!(l.memory_bytes.is_some_and(|m| m >= l.max_buffer_bytes));
    assert!(l.max_workgroup_threads >= 256);
    assert!(l.max_groups_x >= 65535);
    assert!(l.max_shared_bytes >= 16384);
    assert!(l.max_bindings >= 7);
    assert!(l.subgroup_sizes.0 >= 1 && l.subgroup_sizes.0 <= l.subgroup_sizes.1);
}

#[test]
fn writes_and_reads_any_byte_range() {
    let Some(mut d) = open() else { return };
    for size in [1u64, 3, 4, 5, 13, 1023] {
        let b = d.alloc(size).expect("alloc");
        let mut fresh = vec![0xAAu8; size as usize];
        d.read(&b, 0, &mut fresh).expect("read fresh");
        assert!(
            fresh.iter().all(|&x| x == 0),
            "a fresh buffer of {size} B is zero"
        );
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
        d.write(&b, 0, &data).expect("write");
        let mut back = vec![0u8; size as usize];
        d.read(&b, 0, &mut back).expect("read");
        assert_eq!(back, data, "{size} B round trip");
    }
    let b = d.alloc(13).expect("alloc");
    let mut expect: Vec<u8> = (100..113).collect();
    d.write(&b, 0, &expect).expect("write");
    for (offset, patch) in [
        (1usize, vec![1u8]),
        (5, vec![2, 3, 4, 5, 6]),
        (11, vec![7, 8]),
        (2, vec![9, 10]),
    ] {
        d.write(&b, offset as u64, &patch).expect("patch");
        expect[offset..offset + patch.len()].copy_from_slice(&patch);
    }
    for (offset, len) in [(0usize, 13usize), (3, 7), (1, 1), (12, 1), (0, 0), (13, 0)] {
        let mut part = vec![0u8; len];
        d.read(&b, offset as u64, &mut part).expect("partial read");
        assert_eq!(
            part,
            expect[offset..offset + len],
            "read {len} B at {offset}"
        );
    }
}

/// 72 MiB goes through every upload arena more than once and comes back in two readbacks.
#[test]
fn a_large_write_streams_through_the_staging_buffers() {
    let Some(mut d) = open() else { return };
    let n = 72usize << 20;
    let data: Vec<u8> = (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let b = d.alloc(n as u64).expect("alloc");
    d.write(&b, 0, &data).expect("write");
    let mut back = vec![0u8; n];
    d.read(&b, 0, &mut back).expect("read");
    assert!(back == data, "72 MiB round trip");
}

#[test]
fn out_of_bounds_copy_is_typed() {
    let Some(mut d) = open() else { return };
    let b = d.alloc(10).expect("alloc");
    let mut dst = [0u8; 4];
    assert_eq!(
        d.read(&b, 8, &mut dst),
        Err(DeviceError::OutOfBounds {
            offset: 8,
            len: 4,
            size: 10
        })
    );
    // An out-of-bounds copy is an engine bug; the device follows `DeviceError::poisons`.
    assert!(matches!(
        d.write(&b, 0, &[1]),
        Err(DeviceError::Poisoned { .. })
    ));
}

#[test]
fn a_bad_launch_is_refused_before_the_device_sees_it() {
    let Some(mut d) = open() else { return };
    let k = axpy(&mut d);
    let b = d.alloc(64).expect("alloc");
    let too_few = d.launch(&Launch {
        kernel: &k,
        grid: [1, 1, 1],
        args: &[&b, &b],
    });
    assert!(
        matches!(too_few, Err(DeviceError::BadLaunch { .. })),
        "{too_few:?}"
    );
    let too_wide = d.launch(&Launch {
        kernel: &k,
        grid: [u32::MAX, 1, 1],
        args: &[&b, &b, &b],
    });
    assert!(
        matches!(too_wide, Err(DeviceError::BadLaunch { .. })),
        "{too_wide:?}"
    );
    assert!(!d.is_poisoned());
    d.synchronize().expect("still usable");
}

#[test]
fn eager_launch_matches_cpu_bit_for_bit() {
    let Some(mut d) = open() else { return };
    let k = axpy(&mut d);
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| (i as f32) * 0.37 - 100.0).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let (ba, bb, bo) = (
        d.alloc(4 * n as u64).expect("a"),
        d.alloc(4 * n as u64).expect("b"),
        d.alloc(4 * n as u64).expect("out"),
    );
    d.write(&ba, 0, &f32_bytes(&a)).expect("write a");
    d.write(&bb, 0, &f32_bytes(&b)).expect("write b");
    d.launch(&Launch {
        kernel: &k,
        grid: [3, 1, 1],
        args: &[&ba, &bb, &bo],
    })
    .expect("launch");
    let out = read_f32(&mut d, &bo, n).expect("read");
    for i in 0..n {
        assert_eq!(
            out[i].to_bits(),
            (a[i] * 2.0 + b[i]).to_bits(),
            "element {i}"
        );
    }
}

#[test]
fn compile_error_is_typed_and_leaves_the_device_usable() {
    let Some(mut d) = open() else { return };
    let params = [Access::ReadWrite];
    let bad = WgslShader {
        name: "broken",
        source: "fn main( {",
        entry: "main",
        params: &params,
        fault_binding: None,
    };
    match d.compile_wgsl(&bad) {
        Err(DeviceError::Compile { kernel, log }) => {
            assert_eq!(kernel, "broken");
            assert!(!log.is_empty());
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    assert!(!d.is_poisoned());
    axpy(&mut d);
    d.synchronize().expect("still usable");
}

/// One recording replayed for several steps, its inputs rewritten between replays with no wait
/// in between (the writes must land after the previous replay and before the next), equals
/// eager launches and the CPU bit for bit.
#[test]
fn replays_see_the_inputs_written_before_them() {
    let Some(mut d) = open() else { return };
    let k = axpy(&mut d);
    let n = 777usize;
    let bytes = 4 * n as u64;
    let (ba, bb, bt) = (
        d.alloc(bytes).expect("a"),
        d.alloc(bytes).expect("b"),
        d.alloc(bytes).expect("t"),
    );
    let outs: Vec<VulkanBuffer> = (0..4).map(|_| d.alloc(bytes).expect("out")).collect();
    let copy = d
        .compile_wgsl(&WgslShader {
            name: "copy",
            source: r#"
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x < arrayLength(&dst)) { dst[gid.x] = src[gid.x]; }
}
"#,
            entry: "main",
            params: &[Access::Read, Access::ReadWrite],
            fault_binding: None,
        })
        .expect("copy compiles");
    let bo = d.alloc(bytes).expect("out");
    // t = a*2 + b, then out = t*2 + a: the second dispatch reads what the first wrote.
    let recording = d
        .record(&[
            Launch {
                kernel: &k,
                grid: [2, 1, 1],
                args: &[&ba, &bb, &bt],
            },
            Launch {
                kernel: &k,
                grid: [5, 1, 1],
                args: &[&bt, &ba, &bo],
            },
        ])
        .expect("record");
    assert_eq!(recording.len(), 2);
    let inputs = |step: u32| {
        let a: Vec<f32> = (0..n)
            .map(|i| ((i as u32 * 31 + step * 17) % 101) as f32 * 0.013 - 0.5)
            .collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 + step as f32).sin()).collect();
        (a, b)
    };
    for (step, out) in outs.iter().enumerate() {
        let (a, b) = inputs(step as u32);
        d.write(&ba, 0, &f32_bytes(&a)).expect("write a");
        d.write(&bb, 0, &f32_bytes(&b)).expect("write b");
        d.replay(&recording).expect("replay");
        d.launch(&Launch {
            kernel: &copy,
            grid: [n.div_ceil(64) as u32, 1, 1],
            args: &[&bo, out],
        })
        .expect("keep the step's output");
    }
    d.synchronize().expect("synchronize");
    for (step, out) in outs.iter().enumerate() {
        let (a, b) = inputs(step as u32);
        let got = read_u32(&mut d, out, n).expect("read");
        for i in 0..n {
            let t = a[i] * 2.0 + b[i];
            assert_eq!(
                got[i],
                (t * 2.0 + a[i]).to_bits(),
                "step {step} element {i}"
            );
        }
    }
}

#[test]
fn kernel_fault_names_the_first_faulting_dispatch() {
    let Some(mut d) = open() else { return };
    let first = checked_copy(&mut d, "first_check", 7);
    let second = checked_copy(&mut d, "second_check", 9);
    let third = checked_copy(&mut d, "third_check", 11);
    let n = 100usize;
    let bytes = 4 * n as u64;
    let (bx, by, bz, bw) = (
        d.alloc(bytes).expect("x"),
        d.alloc(bytes).expect("y"),
        d.alloc(bytes).expect("z"),
        d.alloc(bytes).expect("w"),
    );
    let (lim_first, lim_rest) = (d.alloc(4).expect("limit"), d.alloc(4).expect("limit"));
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    d.write(&bx, 0, &f32_bytes(&x)).expect("write x");
    d.write(&lim_first, 0, &f32_bytes(&[1000.0]))
        .expect("limit");
    let grid = [n.div_ceil(32) as u32, 1, 1];
    let recording = d
        .record(&[
            Launch {
                kernel: &first,
                grid,
                args: &[&bx, &lim_first, &by],
            },
            Launch {
                kernel: &second,
                grid,
                args: &[&by, &lim_rest, &bz],
            },
            Launch {
                kernel: &third,
                grid,
                args: &[&bz, &lim_rest, &bw],
            },
        ])
        .expect("record");
    let second_faults = Err(DeviceError::KernelFault {
        kernel: "second_check".to_owned(),
        code: 9,
    });

    // Limit 1000 everywhere: nothing faults.
    d.write(&lim_rest, 0, &f32_bytes(&[1000.0])).expect("limit");
    d.replay(&recording).expect("replay");
    d.synchronize().expect("no fault");
    assert_eq!(read_f32(&mut d, &bw, n).expect("read"), x);

    // Limit 50 for the second and third: the second faults first, replayed twice.
    d.write(&lim_rest, 0, &f32_bytes(&[50.0])).expect("limit");
    d.replay(&recording).expect("replay");
    d.replay(&recording).expect("replay twice");
    assert_eq!(d.synchronize(), second_faults);
    assert!(!d.is_poisoned(), "a kernel fault leaves the device usable");
    d.synchronize().expect("the fault words were reset");

    // A read raises it too, and copies nothing.
    d.replay(&recording).expect("replay");
    let mut out = vec![0xEEu8; 8];
    assert_eq!(d.read(&bw, 0, &mut out), second_faults);
    assert_eq!(out, vec![0xEE; 8]);

    // Eager launches: the first faulting launch in submission order is named.
    d.write(&lim_rest, 0, &f32_bytes(&[1000.0])).expect("limit");
    d.replay(&recording).expect("replay");
    for (kernel, limit) in [
        (&first, 1000.0),
        (&third, 1000.0),
        (&third, 10.0),
        (&second, 10.0),
    ] {
        d.write(&lim_first, 0, &f32_bytes(&[limit])).expect("limit");
        d.launch(&Launch {
            kernel,
            grid,
            args: &[&bx, &lim_first, &bw],
        })
        .expect("launch");
    }
    assert_eq!(
        d.synchronize(),
        Err(DeviceError::KernelFault {
            kernel: "third_check".to_owned(),
            code: 11
        })
    );
    d.synchronize().expect("reset");

    // More eager launches between waits than one page of slots, the last one faulting.
    d.write(&lim_first, 0, &f32_bytes(&[1000.0]))
        .expect("limit");
    for _ in 0..300 {
        d.launch(&Launch {
            kernel: &first,
            grid,
            args: &[&bx, &lim_first, &by],
        })
        .expect("launch");
    }
    d.write(&lim_rest, 0, &f32_bytes(&[50.0])).expect("limit");
    d.launch(&Launch {
        kernel: &second,
        grid,
        args: &[&bx, &lim_rest, &by],
    })
    .expect("launch");
    assert_eq!(d.synchronize(), second_faults);
    d.synchronize().expect("reset");
}

/// `iters[0]` rounds of an LCG per thread: a kernel whose run time the test controls through
/// its grid (lavapipe ends every loop after 65535 iterations in total per invocation).
const SPIN: &str = r#"
@group(0) @binding(0) var<storage, read> iters: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    var x = gid.x;
    for (var i = 0u; i < iters[0]; i++) {
        x = x * 1664525u + 1013904223u;
    }
    out[gid.x] = x;
}
"#;

#[test]
fn wait_past_the_timeout_is_typed_and_poisons() {
    let Some(mut d) = open() else { return };
    let params = [Access::Read, Access::ReadWrite];
    let k = d
        .compile_wgsl(&WgslShader {
            name: "spin",
            source: SPIN,
            entry: "main",
            params: &params,
            fault_binding: None,
        })
        .expect("compile");
    let max_groups = 1u32 << 14;
    let bi = d.alloc(4).expect("iters");
    let bo = d.alloc(4 * 64 * u64::from(max_groups)).expect("out");
    d.write(&bi, 0, &60_000u32.to_le_bytes()).expect("write");
    // Calibrate: find a grid that takes at least 200 ms.
    let mut groups = 16u32;
    loop {
        let t = Instant::now();
        d.launch(&Launch {
            kernel: &k,
            grid: [groups, 1, 1],
            args: &[&bi, &bo],
        })
        .expect("launch");
        d.synchronize().expect("synchronize");
        if t.elapsed() >= Duration::from_millis(200) || groups >= max_groups {
            println!("{groups} workgroups take {:?}", t.elapsed());
            break;
        }
        groups *= 2;
    }
    d.set_wait_timeout(Duration::from_millis(1));
    d.launch(&Launch {
        kernel: &k,
        grid: [groups, 1, 1],
        args: &[&bi, &bo],
    })
    .expect("launch");
    let mut out = [0u8; 4];
    assert_eq!(
        d.read(&bo, 0, &mut out),
        Err(DeviceError::Timeout { seconds: 0 })
    );
    assert!(d.is_poisoned());
    assert!(matches!(d.synchronize(), Err(DeviceError::Poisoned { .. })));
    assert!(matches!(d.alloc(4), Err(DeviceError::Poisoned { .. })));
}
