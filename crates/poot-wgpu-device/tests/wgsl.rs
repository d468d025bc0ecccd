//! WgpuDevice on hand-written WGSL: memory, launches, record/replay, shared memory, faults,
//! timeouts and loss. Runs on any Vulkan adapter (lavapipe in CI); without one each test
//! prints `SKIP: no Vulkan adapter` and returns.

use std::time::{Duration, Instant};

use poot_executor::{Device, DeviceError, Launch};
use poot_kernel::Access;
use poot_wgpu_device::{WgpuDevice, WgpuKernel, WgpuOptions, WgslShader};

fn open() -> Option<WgpuDevice> {
    open_with(WgpuOptions::default())
}

fn open_with(options: WgpuOptions) -> Option<WgpuDevice> {
    match WgpuDevice::open(options) {
        Ok(d) => Some(d),
        Err(DeviceError::Unavailable { reason, .. }) => {
            println!("SKIP: no Vulkan adapter ({reason})");
            None
        }
        Err(e) => panic!("opening the device failed: {e}"),
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn u32_bytes(v: &[u32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_u32(
    d: &mut WgpuDevice,
    b: &poot_wgpu_device::WgpuBuffer,
    n: usize,
) -> Result<Vec<u32>, DeviceError> {
    let mut bytes = vec![0u8; n * 4];
    d.read(b, 0, &mut bytes)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn read_f32(
    d: &mut WgpuDevice,
    b: &poot_wgpu_device::WgpuBuffer,
    n: usize,
) -> Result<Vec<f32>, DeviceError> {
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

fn axpy(d: &mut WgpuDevice) -> WgpuKernel {
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
fn checked_copy(d: &mut WgpuDevice, name: &str, code: u32) -> WgpuKernel {
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
fn reports_limits() {
    let Some(d) = open() else { return };
    let l = d.limits();
    println!("adapter: {:?}", d.adapter_info());
    println!("limits: {l:?}");
    println!("features: {:?}", d.features());
    println!("loop iteration budget: {:?}", d.loop_iteration_budget());
    if d.adapter_info().driver == "llvmpipe" {
        assert_eq!(
            d.loop_iteration_budget(),
            Some(65535),
            "lavapipe caps loops at 65535 iterations per invocation"
        );
    }
    assert!(l.max_buffer_bytes >= 128 << 20);
    println!("device memory: {:?} B", l.memory_bytes);
    // Every Vulkan device has a device-local heap.
    assert!(l.memory_bytes.is_some_and(|m| m >= l.max_buffer_bytes));
    assert!(l.max_buffer_bytes <= d.wgpu_limits().max_storage_buffer_binding_size);
    assert!(l.max_workgroup_threads >= 256);
    assert!(l.max_groups_x >= 65535);
    assert!(l.max_shared_bytes >= 16384);
    assert!(l.max_bindings >= 7);
    assert!(l.subgroup_sizes.0 >= 4 && l.subgroup_sizes.0 <= l.subgroup_sizes.1);
}

#[test]
fn write_read_round_trip_odd_sizes() {
    let Some(mut d) = open() else { return };
    for size in [1u64, 3, 4, 5, 13, 1023] {
        let b = d.alloc(size).expect("alloc");
        let mut zeros = vec![0xAAu8; size as usize];
        d.read(&b, 0, &mut zeros).expect("read fresh");
        assert!(
            zeros.iter().all(|&x| x == 0),
            "a fresh buffer of {size} B is zero"
        );
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + 1) as u8).collect();
        d.write(&b, 0, &data).expect("write");
        let mut back = vec![0u8; size as usize];
        d.read(&b, 0, &mut back).expect("read");
        assert_eq!(back, data, "{size} B round trip");
    }
    // Unaligned sub-ranges: a write inside one word, across words, reads at odd offsets.
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
    let mut back = vec![0u8; 13];
    d.read(&b, 0, &mut back).expect("read");
    assert_eq!(back, expect);
    for (offset, len) in [(3usize, 7usize), (1, 1), (12, 1), (0, 0), (13, 0)] {
        let mut part = vec![0u8; len];
        d.read(&b, offset as u64, &mut part).expect("partial read");
        assert_eq!(
            part,
            expect[offset..offset + len],
            "read {len} B at {offset}"
        );
    }
    d.synchronize().expect("synchronize");
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
    // 3 workgroups of 64 threads: the grid-stride loop covers the rest.
    d.launch(&Launch {
        kernel: &k,
        grid: [3, 1, 1],
        args: &[&ba, &bb, &bo],
    })
    .expect("launch");
    d.synchronize().expect("synchronize");
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

#[test]
fn record_replay_matches_eager_with_rewritten_inputs() {
    let Some(mut d) = open() else { return };
    let k = axpy(&mut d);
    let n = 777usize;
    let bytes = 4 * n as u64;
    let (ba, bb, bt, bo) = (
        d.alloc(bytes).expect("a"),
        d.alloc(bytes).expect("b"),
        d.alloc(bytes).expect("t"),
        d.alloc(bytes).expect("out"),
    );
    // t = a*2 + b, then out = t*2 + a: the second dispatch reads what the first wrote.
    let launches = [
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
    ];
    let recording = d.record(&launches).expect("record");
    assert_eq!(recording.len(), 2);
    for step in 0..4u32 {
        let a: Vec<f32> = (0..n)
            .map(|i| ((i as u32 * 31 + step * 17) % 101) as f32 * 0.013 - 0.5)
            .collect();
        let b: Vec<f32> = (0..n).map(|i| (i as f32 + step as f32).sin()).collect();
        // Eager on the same buffers.
        d.write(&ba, 0, &f32_bytes(&a)).expect("write a");
        d.write(&bb, 0, &f32_bytes(&b)).expect("write b");
        for l in &launches {
            d.launch(l).expect("launch");
        }
        let eager = read_u32(&mut d, &bo, n).expect("read eager");
        // Clear the outputs, rewrite the same inputs, replay.
        d.write(&bt, 0, &vec![0u8; bytes as usize])
            .expect("clear t");
        d.write(&bo, 0, &vec![0u8; bytes as usize])
            .expect("clear out");
        d.write(&ba, 0, &f32_bytes(&a)).expect("write a");
        d.write(&bb, 0, &f32_bytes(&b)).expect("write b");
        d.replay(&recording).expect("replay");
        d.synchronize().expect("synchronize");
        let replayed = read_u32(&mut d, &bo, n).expect("read replay");
        assert_eq!(
            replayed, eager,
            "step {step}: replay equals eager bit for bit"
        );
        for i in 0..n {
            let t = a[i] * 2.0 + b[i];
            assert_eq!(
                replayed[i],
                (t * 2.0 + a[i]).to_bits(),
                "step {step} element {i} against the CPU"
            );
        }
    }
}

/// Each workgroup of 64 threads sums its 64-element block: a grid-stride load into workgroup
/// memory, then a barrier-separated tree.
const BLOCK_SUM: &str = r#"
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> sums: array<f32>;
var<workgroup> s: array<f32, 64>;
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = wid.x * 64u + lid.x;
    s[lid.x] = select(0.0, x[i], i < arrayLength(&x));
    workgroupBarrier();
    for (var stride = 32u; stride > 0u; stride = stride / 2u) {
        if (lid.x < stride) {
            s[lid.x] = s[lid.x] + s[lid.x + stride];
        }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        sums[wid.x] = s[0];
    }
}
"#;

#[test]
fn shared_memory_reduction_matches_cpu_tree() {
    let Some(mut d) = open() else { return };
    let params = [Access::Read, Access::ReadWrite];
    let k = d
        .compile_wgsl(&WgslShader {
            name: "block_sum",
            source: BLOCK_SUM,
            entry: "main",
            params: &params,
            fault_binding: None,
        })
        .expect("compile");
    let n = 1000usize;
    let groups = n.div_ceil(64);
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 2654435761usize) % 1000) as f32 / 7.0 - 60.0)
        .collect();
    let bx = d.alloc(4 * n as u64).expect("x");
    let bs = d.alloc(4 * groups as u64).expect("sums");
    d.write(&bx, 0, &f32_bytes(&x)).expect("write");
    d.launch(&Launch {
        kernel: &k,
        grid: [groups as u32, 1, 1],
        args: &[&bx, &bs],
    })
    .expect("launch");
    let sums = read_f32(&mut d, &bs, groups).expect("read");
    for (g, sum) in sums.iter().enumerate() {
        let mut s: Vec<f32> = (0..64)
            .map(|l| x.get(g * 64 + l).copied().unwrap_or(0.0))
            .collect();
        let mut stride = 32;
        while stride > 0 {
            for l in 0..stride {
                s[l] += s[l + stride];
            }
            stride /= 2;
        }
        assert_eq!(sum.to_bits(), s[0].to_bits(), "workgroup {g}");
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

    // Limit 1000 everywhere: nothing faults.
    d.write(&lim_rest, 0, &f32_bytes(&[1000.0])).expect("limit");
    d.replay(&recording).expect("replay");
    d.synchronize().expect("no fault");
    assert_eq!(read_f32(&mut d, &bw, n).expect("read"), x);

    // Limit 50 for the second and third: the second faults first.
    d.write(&lim_rest, 0, &f32_bytes(&[50.0])).expect("limit");
    d.replay(&recording).expect("replay");
    d.replay(&recording).expect("replay twice");
    assert_eq!(
        d.synchronize(),
        Err(DeviceError::KernelFault {
            kernel: "second_check".to_owned(),
            code: 9
        })
    );
    assert!(
        !d.is_poisoned(),
        "a kernel fault leaves the wgpu device usable"
    );
    d.synchronize().expect("the fault words were reset");

    // A fault is raised by a read as well, and the read copies nothing.
    d.replay(&recording).expect("replay");
    let mut out = vec![0xEEu8; 8];
    assert_eq!(
        d.read(&bw, 0, &mut out),
        Err(DeviceError::KernelFault {
            kernel: "second_check".to_owned(),
            code: 9
        })
    );
    assert_eq!(out, vec![0xEE; 8]);

    // Eager launches: the first faulting launch in submission order is named.
    d.write(&lim_rest, 0, &f32_bytes(&[1000.0])).expect("limit");
    d.replay(&recording).expect("replay");
    d.launch(&Launch {
        kernel: &first,
        grid,
        args: &[&bx, &lim_first, &by],
    })
    .expect("launch");
    d.launch(&Launch {
        kernel: &third,
        grid,
        args: &[&bx, &lim_first, &bw],
    })
    .expect("launch");
    d.write(&lim_first, 0, &f32_bytes(&[10.0])).expect("limit");
    d.launch(&Launch {
        kernel: &third,
        grid,
        args: &[&bx, &lim_first, &bw],
    })
    .expect("launch");
    d.launch(&Launch {
        kernel: &second,
        grid,
        args: &[&bx, &lim_first, &bw],
    })
    .expect("launch");
    assert_eq!(
        d.synchronize(),
        Err(DeviceError::KernelFault {
            kernel: "third_check".to_owned(),
            code: 11
        })
    );
    d.synchronize().expect("reset");

    // Many eager launches between waits (more than one page of slots), the last one faulting.
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
    assert_eq!(
        d.synchronize(),
        Err(DeviceError::KernelFault {
            kernel: "second_check".to_owned(),
            code: 9
        })
    );
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
    d.write(&bi, 0, &u32_bytes(&[60_000])).expect("write");
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

#[test]
fn device_loss_is_lost_then_poisoned() {
    let Some(mut d) = open() else { return };
    let b = d.alloc(16).expect("alloc");
    d.destroy();
    assert!(matches!(
        d.write(&b, 0, &[0; 4]),
        Err(DeviceError::Lost { .. })
    ));
    assert!(matches!(d.synchronize(), Err(DeviceError::Poisoned { .. })));
}

/// Binds `array<vec4<f32>>` (16-byte elements) to a 4-byte buffer: wgpu rejects the binding
/// as an uncaptured validation error, which poisons the device in the call that caused it.
#[test]
fn uncaptured_wgpu_error_poisons() {
    let Some(mut d) = open() else { return };
    let source = r#"
@group(0) @binding(0) var<storage, read_write> v: array<vec4<f32>, 2>;
@compute @workgroup_size(1)
fn main() { v[0] = vec4<f32>(1.0); }
"#;
    let params = [Access::ReadWrite];
    let k = d
        .compile_wgsl(&WgslShader {
            name: "vec4",
            source,
            entry: "main",
            params: &params,
            fault_binding: None,
        })
        .expect("compile");
    let small = d.alloc(4).expect("alloc");
    let err = d
        .launch(&Launch {
            kernel: &k,
            grid: [1, 1, 1],
            args: &[&small],
        })
        .expect_err("the binding is too small");
    assert!(matches!(err, DeviceError::Lost { .. }), "{err:?}");
    assert!(matches!(d.synchronize(), Err(DeviceError::Poisoned { .. })));
}
