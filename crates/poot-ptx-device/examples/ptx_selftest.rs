//! The CUDA device's self-test on a real GPU: one line per check, then `N passed, M failed`.
//! Exits 0 when every check passed, 1 when one failed, 2 when no CUDA device could be opened.
//!
//! Build anywhere (`cargo build --release -p poot-ptx-device --example ptx_selftest`), run on a
//! GPU machine with NVRTC on the library path:
//! `LD_LIBRARY_PATH=/usr/local/cuda/lib64 ./ptx_selftest`.
//! Kernels are cached under a fresh temporary directory, removed at the end.
//!
//! A kernel trap leaves CUDA unusable for the rest of the process that saw it, so each check
//! that traps or times out runs in a child process of its own: the self-test runs itself again
//! as `ptx_selftest --check NAME --cache DIR`, which prints that check's one line and exits 0
//! (pass) or 1 (fail). After each child the parent opens a device and runs a kernel, to show the
//! GPU still serves a new process.

use std::io::Read;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use poot_executor::{Device, DeviceError, Launch};
use poot_kernel::build::{
    KernelBuilder, f32c, group_count_x, group_id, load, local_id, lt, u32c, un,
};
use poot_kernel::{Access, Kernel, Ty, UnOp, Word};
use poot_ptx_device::{PtxBuffer, PtxConfig, PtxDevice, PtxRecording, SourceKernel};

type Check = Result<String, String>;

/// A check that opens its own device (with the kernel cache under the path).
type OwnDeviceCheck = fn(&Path) -> Check;

fn config(cache: &Path) -> PtxConfig {
    PtxConfig {
        cache_root: Some(cache.to_path_buf()),
        ..PtxConfig::default()
    }
}

fn open(cache: &Path) -> Result<PtxDevice, String> {
    PtxDevice::open_with(0, config(cache)).map_err(|e| format!("open: {e}"))
}

fn f32s_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_to_f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn upload(dev: &mut PtxDevice, v: &[f32]) -> Result<PtxBuffer, String> {
    let buf = dev
        .alloc(4 * v.len() as u64)
        .map_err(|e| format!("alloc: {e}"))?;
    dev.write(&buf, 0, &f32s_to_bytes(v))
        .map_err(|e| format!("write: {e}"))?;
    Ok(buf)
}

fn download(dev: &mut PtxDevice, buf: &PtxBuffer) -> Result<Vec<f32>, String> {
    let mut bytes = vec![0u8; buf.bytes() as usize];
    dev.read(buf, 0, &mut bytes)
        .map_err(|e| format!("read: {e}"))?;
    Ok(bytes_to_f32s(&bytes))
}

/// Inputs with a spread of magnitudes and signs, deterministic.
fn inputs(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(12345);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let m = (s >> 8) as f32 / (1u32 << 24) as f32; // [0, 1)
            let e = ((s & 0xff) % 16) as i32 - 8;
            (m * 2.0 - 1.0) * 2f32.powi(e)
        })
        .collect()
}

/// `out[i] = a[i] * 2 + b[i]`, grid-stride over `n` elements.
fn axpy_kernel(n: u32) -> Kernel {
    let wg = 128;
    let mut b = KernelBuilder::new("axpy.l0", wg);
    let a = b.param("a", Word::F32, Access::Read);
    let x = b.param("b", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let start = group_id(0) * u32c(wg) + local_id();
    b.for_(start, u32c(n), group_count_x() * u32c(wg), |b, i| {
        b.store(out, i.clone(), load(a, i.clone()) * f32c(2.0) + load(x, i));
    });
    b.finish()
}

/// `a[i] = tanh(src[i]) * 0.5 + a[i] * 0.75`, one thread per element.
fn mix_kernel(n: u32) -> Kernel {
    let wg = 64;
    let mut b = KernelBuilder::new("mix.l0", wg);
    let src = b.param("src", Word::F32, Access::Read);
    let a = b.param("a", Word::F32, Access::ReadWrite);
    let i = b.let_(Ty::U32, group_id(0) * u32c(wg) + local_id());
    b.if_(lt(i.clone(), u32c(n)), |b| {
        let v = un(UnOp::Tanh, load(src, i.clone())) * f32c(0.5) + load(a, i.clone()) * f32c(0.75);
        b.store(a, i.clone(), v);
    });
    b.finish()
}

/// Copies `x` to `out`, and fails a check with `code` where an element is negative.
fn checked_copy_kernel(n: u32, code: u32) -> Kernel {
    let wg = 64;
    let mut b = KernelBuilder::new("check_nonneg.l0", wg);
    let x = b.param("x", Word::F32, Access::Read);
    let out = b.param("out", Word::F32, Access::ReadWrite);
    let i = b.let_(Ty::U32, group_id(0) * u32c(wg) + local_id());
    b.if_(lt(i.clone(), u32c(n)), |b| {
        let v = b.let_(Ty::F32, load(x, i.clone()));
        b.if_(lt(v.clone(), f32c(0.0)), |b| b.fault(code));
        b.store(out, i.clone(), v);
    });
    b.finish()
}

const HAND_AXPY: &str = r#"
extern "C" __global__ void hand_axpy(const float* a, const float* b, float* out) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 4096u) out[i] = a[i] * 2.0f + b[i];
}
"#;

/// Spins for 4 s of the GPU's global timer.
const SPIN: &str = r#"
extern "C" __global__ void spin(unsigned int* flag) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < 4000000000ull);
    if (threadIdx.x == 0 && blockIdx.x == 0) flag[0] = 1u;
}
"#;

const BROKEN: &str = "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }";

fn grid_for(n: u32, wg: u32) -> [u32; 3] {
    [n.div_ceil(wg), 1, 1]
}

fn check_limits(dev: &mut PtxDevice) -> Check {
    let l = dev.limits().clone();
    let ok = l.max_buffer_bytes > (1 << 30)
        && l.max_groups_x >= 65535
        && l.max_groups_yz >= 65535
        && l.max_workgroup_threads >= 1024
        && l.max_shared_bytes >= 48 * 1024
        && l.subgroup_sizes == (32, 32);
    let text = format!("{l:?}");
    if ok { Ok(text) } else { Err(text) }
}

fn check_round_trip(dev: &mut PtxDevice) -> Check {
    let n = 1 << 20;
    let buf = dev.alloc(n).map_err(|e| format!("alloc: {e}"))?;
    let mut zeros = vec![0xAAu8; n as usize];
    dev.read(&buf, 0, &mut zeros)
        .map_err(|e| format!("read: {e}"))?;
    if zeros.iter().any(|&b| b != 0) {
        return Err("a fresh buffer is not zeroed".into());
    }
    let pattern: Vec<u8> = (0..4099u32)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 3)) as u8)
        .collect();
    dev.write(&buf, 12345, &pattern)
        .map_err(|e| format!("write: {e}"))?;
    let mut back = vec![0u8; pattern.len() + 2];
    dev.read(&buf, 12344, &mut back)
        .map_err(|e| format!("read: {e}"))?;
    if back[0] != 0 || back[back.len() - 1] != 0 || back[1..back.len() - 1] != pattern[..] {
        return Err("bytes read back differ from bytes written".into());
    }
    dev.write(&buf, n, &[])
        .map_err(|e| format!("empty write at the end: {e}"))?;
    Ok(format!(
        "{} B written at offset 12345 read back exactly; fresh memory zeroed",
        pattern.len()
    ))
}

fn check_hand_eager(dev: &mut PtxDevice) -> Check {
    let src = SourceKernel {
        name: "hand_axpy",
        entry: "hand_axpy",
        source: HAND_AXPY,
        workgroup: 256,
        n_params: 3,
        takes_fault_buffer: false,
        waits_for_predecessors: false,
    };
    let k = dev.compile_source(&src).map_err(|e| e.to_string())?;
    let (a, b) = (inputs(4096, 1), inputs(4096, 2));
    let (ba, bb) = (upload(dev, &a)?, upload(dev, &b)?);
    let out = dev.alloc(4 * 4096).map_err(|e| e.to_string())?;
    dev.launch(&Launch {
        kernel: &k,
        grid: [16, 1, 1],
        args: &[&ba, &bb, &out],
    })
    .map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    let got = download(dev, &out)?;
    let bad = (0..4096)
        .filter(|&i| got[i].to_bits() != (a[i] * 2.0 + b[i]).to_bits())
        .count();
    if bad == 0 {
        Ok("4096 values equal the CPU's bit for bit".into())
    } else {
        Err(format!("{bad} of 4096 values differ from the CPU"))
    }
}

fn check_builder_eager(dev: &mut PtxDevice) -> Check {
    let n = 10_000u32;
    let kernel = axpy_kernel(n);
    let t = Instant::now();
    let k = dev.compile(&kernel).map_err(|e| e.to_string())?;
    let compile_ms = t.elapsed().as_secs_f64() * 1e3;
    let (a, b) = (inputs(n as usize, 3), inputs(n as usize, 4));
    let (ba, bb) = (upload(dev, &a)?, upload(dev, &b)?);
    let out = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    // Fewer threads than elements: the grid-stride loop covers the rest.
    dev.launch(&Launch {
        kernel: &k,
        grid: [7, 1, 1],
        args: &[&ba, &bb, &out],
    })
    .map_err(|e| e.to_string())?;
    let got = download(dev, &out)?;
    let bad = (0..n as usize)
        .filter(|&i| got[i].to_bits() != (a[i] * 2.0 + b[i]).to_bits())
        .count();
    if bad != 0 {
        return Err(format!("{bad} of {n} values differ from the CPU"));
    }
    Ok(format!(
        "entry `{}`, compiled in {compile_ms:.1} ms, {n} values over 7x128 threads equal the CPU's bit for bit",
        k.entry()
    ))
}

fn check_compile_cache(dev: &mut PtxDevice, cache: &Path) -> Check {
    let kernel = mix_kernel(1000);
    let before = dev.compile_stats();
    dev.compile(&kernel).map_err(|e| e.to_string())?;
    let t = Instant::now();
    dev.compile(&kernel).map_err(|e| e.to_string())?;
    let again_us = t.elapsed().as_secs_f64() * 1e6;
    let after = dev.compile_stats();
    if after.memory_hits != before.memory_hits + 1
        || after.nvrtc_compiles > before.nvrtc_compiles + 1
    {
        return Err(format!("stats {before:?} -> {after:?}"));
    }
    // A second device (a second process would do the same) finds the PTX on disk.
    let mut other = open(cache)?;
    let t = Instant::now();
    other.compile(&kernel).map_err(|e| e.to_string())?;
    let disk_ms = t.elapsed().as_secs_f64() * 1e3;
    let s = other.compile_stats();
    if s.disk_hits != 1 || s.nvrtc_compiles != 0 {
        return Err(format!("a second device's stats: {s:?}"));
    }
    let files = std::fs::read_dir(cache.join("ptx"))
        .map(|d| d.count())
        .unwrap_or(0);
    Ok(format!(
        "second compile {again_us:.0} us (memory), other device {disk_ms:.1} ms (disk); {files} files in the cache"
    ))
}

fn check_compile_error(dev: &mut PtxDevice) -> Check {
    let src = SourceKernel {
        name: "broken",
        entry: "broken",
        source: BROKEN,
        workgroup: 32,
        n_params: 1,
        takes_fault_buffer: false,
        waits_for_predecessors: false,
    };
    match dev.compile_source(&src) {
        Err(DeviceError::Compile { kernel, log })
            if kernel == "broken" && log.contains("undefined_name") => {}
        other => {
            return Err(format!(
                "expected a compile error naming `undefined_name`, got {other:?}"
            ));
        }
    }
    if let Some(p) = dev.poisoned() {
        return Err(format!("a compile error poisoned the device: {p}"));
    }
    check_hand_eager(dev)
        .map(|_| "the error carries NVRTC's log; the device still runs kernels".to_string())
}

/// Runs `steps` rounds of axpy then mix, eagerly or as one recording replayed `replays` times.
fn chain(
    dev: &mut PtxDevice,
    record: bool,
    steps: usize,
    replays: usize,
) -> Result<(Vec<f32>, Vec<f32>), String> {
    let n = 5000u32;
    let axpy = dev.compile(&axpy_kernel(n)).map_err(|e| e.to_string())?;
    let mix = dev.compile(&mix_kernel(n)).map_err(|e| e.to_string())?;
    let a = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let b = upload(dev, &inputs(n as usize, 6))?;
    let out = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let (axpy_args, mix_args) = ([&a, &b, &out], [&out, &a]);
    let mut launches = Vec::new();
    for _ in 0..steps {
        launches.push(Launch {
            kernel: &axpy,
            grid: [9, 1, 1],
            args: &axpy_args[..],
        });
        launches.push(Launch {
            kernel: &mix,
            grid: grid_for(n, 64),
            args: &mix_args[..],
        });
    }
    if record {
        let rec = dev.record(&launches).map_err(|e| e.to_string())?;
        // Recording only captures: write the inputs after it, as the engine writes slots.
        dev.write(&a, 0, &f32s_to_bytes(&inputs(n as usize, 5)))
            .map_err(|e| e.to_string())?;
        for _ in 0..replays {
            dev.replay(&rec).map_err(|e| e.to_string())?;
        }
    } else {
        dev.write(&a, 0, &f32s_to_bytes(&inputs(n as usize, 5)))
            .map_err(|e| e.to_string())?;
        for _ in 0..replays {
            for l in &launches {
                dev.launch(l).map_err(|e| e.to_string())?;
            }
        }
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    Ok((download(dev, &a)?, download(dev, &out)?))
}

fn check_replay_equals_eager(dev: &mut PtxDevice) -> Check {
    let (steps, replays) = (25, 3);
    let eager = chain(dev, false, steps, replays)?;
    let replayed = chain(dev, true, steps, replays)?;
    let same = |x: &[f32], y: &[f32]| {
        x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
    };
    if !same(&eager.0, &replayed.0) || !same(&eager.1, &replayed.1) {
        let diff = eager
            .0
            .iter()
            .zip(&replayed.0)
            .filter(|(p, q)| p.to_bits() != q.to_bits())
            .count();
        return Err(format!(
            "{diff} of {} values differ between eager and replay",
            eager.0.len()
        ));
    }
    if eager.0.iter().any(|x| !x.is_finite()) {
        return Err("non-finite values in the chain".into());
    }
    Ok(format!(
        "{} launches replayed {replays}x equal eager bit for bit",
        2 * steps
    ))
}

fn check_replay_cost(dev: &mut PtxDevice) -> Check {
    let kernel = {
        let mut b = KernelBuilder::new("tiny.l0", 32);
        let x = b.param("x", Word::F32, Access::ReadWrite);
        b.if_(lt(local_id(), u32c(1)), |b| {
            b.store(x, u32c(0), load(x, u32c(0)) + f32c(1.0))
        });
        b.finish()
    };
    let k = dev.compile(&kernel).map_err(|e| e.to_string())?;
    let x = dev.alloc(4).map_err(|e| e.to_string())?;
    let args = [&x];
    let launches: Vec<Launch<'_, PtxDevice>> = (0..300)
        .map(|_| Launch {
            kernel: &k,
            grid: [1, 1, 1],
            args: &args[..],
        })
        .collect();
    let rec = dev.record(&launches).map_err(|e| e.to_string())?;
    let reps = 20;
    dev.replay(&rec).map_err(|e| e.to_string())?;
    dev.synchronize().map_err(|e| e.to_string())?;
    let t = Instant::now();
    for _ in 0..reps {
        dev.replay(&rec).map_err(|e| e.to_string())?;
        dev.synchronize().map_err(|e| e.to_string())?;
    }
    let per_replay_us = t.elapsed().as_secs_f64() * 1e6 / reps as f64;
    let got = download(dev, &x)?[0];
    let want = 300.0 * (reps + 1) as f32;
    if got != want {
        return Err(format!("counter {got}, expected {want}"));
    }
    let t = Instant::now();
    for l in &launches {
        dev.launch(l).map_err(|e| e.to_string())?;
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    let eager_us = t.elapsed().as_secs_f64() * 1e6;
    Ok(format!(
        "300 dependent launches: replay {per_replay_us:.0} us ({:.2} us/kernel), eager {eager_us:.0} us ({:.2} us/kernel)",
        per_replay_us / 300.0,
        eager_us / 300.0
    ))
}

/// Checks that `dev` reports itself poisoned by `fault` and refuses every later call as
/// `Poisoned` with that report. A write out of bounds and a launch with the wrong buffer count
/// are refused as `Poisoned` too, not as `OutOfBounds` or `BadLaunch`: the refusal comes before
/// any other check, and so before any CUDA call.
fn expect_poisoned(
    dev: &mut PtxDevice,
    fault: &DeviceError,
    buf: &PtxBuffer,
    launch: &Launch<'_, PtxDevice>,
    recording: Option<&PtxRecording>,
) -> Check {
    let first = match dev.poisoned() {
        Some(DeviceError::Poisoned { first }) => first,
        other => return Err(format!("after `{fault}`, poisoned() is {other:?}")),
    };
    if !first.starts_with(&fault.to_string()) {
        return Err(format!(
            "the device is poisoned by `{first}`, not by `{fault}`"
        ));
    }
    let wrong_count = Launch {
        kernel: launch.kernel,
        grid: launch.grid,
        args: &launch.args[..launch.args.len().saturating_sub(1)],
    };
    let mut back = [0u8; 4];
    let t = Instant::now();
    let mut calls: Vec<(&str, Result<(), DeviceError>)> = vec![
        ("alloc", dev.alloc(16).map(drop)),
        ("write", dev.write(buf, 0, &[1, 2, 3, 4])),
        (
            "write out of bounds",
            dev.write(buf, u64::MAX - 1, &[1, 2, 3, 4]),
        ),
        ("read", dev.read(buf, 0, &mut back)),
        ("launch", dev.launch(launch)),
        ("launch with a wrong buffer count", dev.launch(&wrong_count)),
        ("record", dev.record(std::slice::from_ref(launch)).map(drop)),
        ("compile", dev.compile(&mix_kernel(8)).map(drop)),
    ];
    if let Some(r) = recording {
        calls.push(("replay", dev.replay(r)));
    }
    calls.push(("synchronize", dev.synchronize()));
    let took_us = t.elapsed().as_secs_f64() * 1e6;
    for (call, r) in &calls {
        match r {
            Err(DeviceError::Poisoned { first: f }) if *f == first => {}
            other => {
                return Err(format!(
                    "after `{fault}`, {call} returned {other:?} instead of Poisoned"
                ));
            }
        }
    }
    let names: Vec<&str> = calls.iter().map(|(c, _)| *c).collect();
    Ok(format!(
        "poisoned() reports it; {} later calls ({}) refused as Poisoned in {took_us:.0} us in all ({first})",
        calls.len(),
        names.join(", ")
    ))
}

/// Child check: a failed kernel check in an eager launch traps; the wait that sees it reports
/// the kernel and the check's code.
fn check_fault_eager(cache: &Path) -> Check {
    let mut dev = open(cache)?;
    let n = 1000u32;
    let k = dev
        .compile(&checked_copy_kernel(n, 42))
        .map_err(|e| e.to_string())?;
    if !k.can_fault() {
        return Err("a kernel with Stmt::Fault does not take the fault buffer".into());
    }
    let mut x = inputs(n as usize, 7)
        .iter()
        .map(|v| v.abs())
        .collect::<Vec<f32>>();
    let bx = upload(&mut dev, &x)?;
    let out = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let args = [&bx, &out];
    let launch = Launch {
        kernel: &k,
        grid: grid_for(n, 64),
        args: &args,
    };
    // No element negative: the check passes and the copy is exact.
    dev.launch(&launch).map_err(|e| e.to_string())?;
    if download(&mut dev, &out)? != x {
        return Err("the passing check's copy is wrong".into());
    }
    x[777] = -1.0;
    dev.write(&bx, 0, &f32s_to_bytes(&x))
        .map_err(|e| e.to_string())?;
    dev.launch(&launch).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let fault = match dev.synchronize() {
        Err(e @ DeviceError::KernelFault { .. })
            if e == (DeviceError::KernelFault {
                kernel: "check_nonneg.l0".into(),
                code: 42,
            }) =>
        {
            e
        }
        other => {
            return Err(format!(
                "expected KernelFault {{ kernel: check_nonneg.l0, code: 42 }}, got {other:?}"
            ));
        }
    };
    let waited_ms = t.elapsed().as_secs_f64() * 1e3;
    let refused = expect_poisoned(&mut dev, &fault, &bx, &launch, None)?;
    Ok(format!("`{fault}` seen in {waited_ms:.1} ms; {refused}"))
}

/// Child check: a failed kernel check inside a replayed recording; the fault names the
/// recording.
fn check_fault_replay(cache: &Path) -> Check {
    let mut dev = open(cache)?;
    let n = 512u32;
    let mix = dev.compile(&mix_kernel(n)).map_err(|e| e.to_string())?;
    let check = dev
        .compile(&checked_copy_kernel(n, 7))
        .map_err(|e| e.to_string())?;
    let a = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let src = upload(&mut dev, &inputs(n as usize, 8))?;
    let out = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let (mix_args, check_args) = ([&src, &a], [&src, &out]);
    let launches = [
        Launch {
            kernel: &mix,
            grid: grid_for(n, 64),
            args: &mix_args[..],
        },
        Launch {
            kernel: &check,
            grid: grid_for(n, 64),
            args: &check_args[..],
        },
    ];
    let rec = dev.record(&launches).map_err(|e| e.to_string())?;
    dev.replay(&rec).map_err(|e| e.to_string())?;
    let expected = DeviceError::KernelFault {
        kernel: rec.label().to_string(),
        code: 7,
    };
    let fault = match dev.synchronize() {
        Err(e) if e == expected => e,
        other => return Err(format!("expected {expected:?}, got {other:?}")),
    };
    let refused = expect_poisoned(&mut dev, &fault, &src, &launches[1], Some(&rec))?;
    Ok(format!("`{fault}`; {refused}"))
}

/// Child check: a kernel that outlasts the wait timeout.
fn check_timeout(cache: &Path) -> Check {
    let mut dev = open(cache)?;
    dev.set_wait_timeout(Duration::from_secs(1));
    let src = SourceKernel {
        name: "spin",
        entry: "spin",
        source: SPIN,
        workgroup: 32,
        n_params: 1,
        takes_fault_buffer: false,
        waits_for_predecessors: false,
    };
    let k = dev.compile_source(&src).map_err(|e| e.to_string())?;
    let flag = dev.alloc(4).map_err(|e| e.to_string())?;
    let args = [&flag];
    let launch = Launch {
        kernel: &k,
        grid: [1, 1, 1],
        args: &args,
    };
    dev.launch(&launch).map_err(|e| e.to_string())?;
    let t = Instant::now();
    let fault = match dev.synchronize() {
        Err(e @ DeviceError::Timeout { seconds: 1 }) => e,
        other => return Err(format!("expected Timeout {{ seconds: 1 }}, got {other:?}")),
    };
    let waited = t.elapsed();
    if waited < Duration::from_millis(990) || waited > Duration::from_millis(1500) {
        return Err(format!("the wait took {waited:?}"));
    }
    let refused = expect_poisoned(&mut dev, &fault, &flag, &launch, None)?;
    let t = Instant::now();
    drop(dev);
    let drop_ms = t.elapsed().as_secs_f64() * 1e3;
    Ok(format!(
        "timed out after {:.0} ms; {refused}; dropped in {drop_ms:.1} ms",
        waited.as_secs_f64() * 1e3
    ))
}

/// In-process check: a copy out of a buffer's bounds is refused on the host and poisons.
fn check_out_of_bounds(cache: &Path) -> Check {
    let mut dev = open(cache)?;
    let k = dev.compile(&mix_kernel(25)).map_err(|e| e.to_string())?;
    let buf = dev.alloc(100).map_err(|e| e.to_string())?;
    let other = dev.alloc(100).map_err(|e| e.to_string())?;
    let args = [&other, &buf];
    let launch = Launch {
        kernel: &k,
        grid: [1, 1, 1],
        args: &args,
    };
    let expected = DeviceError::OutOfBounds {
        offset: 96,
        len: 8,
        size: 100,
    };
    let fault = match dev.write(&buf, 96, &[0u8; 8]) {
        Err(e) if e == expected => e,
        other => return Err(format!("expected {expected:?}, got {other:?}")),
    };
    expect_poisoned(&mut dev, &fault, &buf, &launch, None)
}

/// In-process check: launches refused on the host (wrong buffer count, a grid over the limits,
/// a kernel, buffer or recording of another device) are `BadLaunch`, do not poison, and the
/// device runs kernels afterwards.
fn check_bad_launch(cache: &Path) -> Check {
    let mut dev = open(cache)?;
    let mut other = open(cache)?;
    let n = 64u32;
    let k = dev.compile(&mix_kernel(n)).map_err(|e| e.to_string())?;
    let other_k = other.compile(&mix_kernel(n)).map_err(|e| e.to_string())?;
    let a = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let b = dev.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let foreign = other.alloc(4 * u64::from(n)).map_err(|e| e.to_string())?;
    let (one, with_foreign, good, other_args) =
        ([&a], [&a, &foreign], [&a, &b], [&foreign, &foreign]);
    let other_rec = other
        .record(&[Launch {
            kernel: &other_k,
            grid: [1, 1, 1],
            args: &other_args,
        }])
        .map_err(|e| e.to_string())?;
    let yz = dev.limits().max_groups_yz;
    let launch = |kernel, grid, args| Launch { kernel, grid, args };
    let cases: Vec<(&str, &str, Launch<'_, PtxDevice>)> = vec![
        (
            "too few buffers",
            "1 buffers given; the kernel takes 2",
            launch(&k, [1, 1, 1], &one[..]),
        ),
        (
            "an empty grid",
            "a grid of [0, 1, 1] workgroups",
            launch(&k, [0, 1, 1], &good[..]),
        ),
        (
            "a grid over the limit along y",
            "workgroups; the device allows",
            launch(&k, [1, yz.saturating_add(1), 1], &good[..]),
        ),
        (
            "a buffer of another device",
            "buffer 1 belongs to another device",
            launch(&k, [1, 1, 1], &with_foreign[..]),
        ),
        (
            "a kernel of another device",
            "compiled by another device",
            launch(&other_k, [1, 1, 1], &good[..]),
        ),
    ];
    let mut refused = 0;
    for (what, reason_part, l) in &cases {
        for (how, r) in [
            ("launch", dev.launch(l)),
            ("record", dev.record(std::slice::from_ref(l)).map(drop)),
        ] {
            match r {
                Err(e @ DeviceError::BadLaunch { .. }) if e.to_string().contains(reason_part) => {
                    if e.poisons() {
                        return Err(format!(
                            "{how} with {what}: `{e}` is refused, but DeviceError::poisons() says it poisons (poot-executor must list BadLaunch as not poisoning)"
                        ));
                    }
                    refused += 1;
                }
                other => {
                    return Err(format!(
                        "{how} with {what}: expected BadLaunch containing {reason_part:?}, got {other:?}"
                    ));
                }
            }
            if let Some(p) = dev.poisoned() {
                return Err(format!("{how} with {what} poisoned the device: {p}"));
            }
        }
    }
    match dev.replay(&other_rec) {
        Err(DeviceError::BadLaunch { kernel, reason })
            if kernel == other_rec.label() && reason.contains("another device") =>
        {
            refused += 1;
        }
        other => {
            return Err(format!(
                "replay of another device's recording: expected BadLaunch, got {other:?}"
            ));
        }
    }
    if let Some(p) = dev.poisoned() {
        return Err(format!("a refused replay poisoned the device: {p}"));
    }
    // The device is unchanged: the good launch runs, and so does a hand-written kernel.
    dev.launch(&launch(&k, grid_for(n, 64), &good[..]))
        .map_err(|e| format!("a good launch after the refusals: {e}"))?;
    dev.synchronize()
        .map_err(|e| format!("synchronize after the refusals: {e}"))?;
    check_hand_eager(&mut dev).map_err(|e| format!("after the refusals: {e}"))?;
    Ok(format!(
        "{refused} launches, recordings and replays refused as BadLaunch without poisoning; the device still runs kernels"
    ))
}

/// The checks that trap or time out. Each runs in a child process of its own: a trap leaves
/// CUDA unusable for the rest of the process that saw it (no context can be created there).
const CHILD_CHECKS: [(&str, OwnDeviceCheck); 3] = [
    ("fault_eager_poisons", check_fault_eager),
    ("fault_in_replay_poisons", check_fault_replay),
    ("timeout_poisons", check_timeout),
];

/// The bound on one child check, from spawn to exit.
const CHILD_TIMEOUT: Duration = Duration::from_secs(120);

/// The detail of `name`'s `PASS`/`FAIL` line in a child's output: `Ok` for a pass.
fn parse_line(stdout: &str, name: &str) -> Option<Check> {
    stdout.lines().find_map(|line| {
        let (passed, rest) = if let Some(r) = line.strip_prefix("PASS ") {
            (true, r)
        } else {
            (false, line.strip_prefix("FAIL ")?)
        };
        let rest = rest.strip_prefix(name)?.strip_prefix(" (")?;
        let detail = rest.split_once("): ").map_or("", |(_, d)| d).to_string();
        Some(if passed { Ok(detail) } else { Err(detail) })
    })
}

/// The last few lines of a child's stderr, for a failure report.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(4)..].join(" | ")
}

/// Reads a child's pipe to its end on a thread of its own (so neither pipe can fill and stall
/// the child).
fn read_all<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    })
}

/// Runs check `name` in a child process (this executable with `--check NAME --cache DIR`) and
/// returns its result: a pass needs both its `PASS` line and exit status 0.
fn run_in_child(name: &str, cache: &Path) -> Check {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .arg("--check")
        .arg(name)
        .arg("--cache")
        .arg(cache)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning the child: {e}"))?;
    let pid = child.id();
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if start.elapsed() > CHILD_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "child {pid} still running after {} s; killed",
                    CHILD_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => break Err(format!("waiting for child {pid}: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = status?;
    match (status.success(), parse_line(&stdout, name)) {
        (true, Some(Ok(detail))) => Ok(format!("[child {pid}] {detail}")),
        (false, Some(Err(detail))) => Err(format!("[child {pid}, {status}] {detail}")),
        (_, line) => Err(format!(
            "child {pid} ended with {status} and line {line:?}; stdout: {:?}; stderr: {:?}",
            tail(&stdout),
            tail(&stderr)
        )),
    }
}

/// Runs a trapping check in a child, then shows that a new process (this one, which did not
/// trap) can open the GPU and run a kernel after it.
fn check_in_child(name: &str, cache: &Path) -> Check {
    let child = run_in_child(name, cache);
    let t = Instant::now();
    let after = open(cache).and_then(|mut dev| check_hand_eager(&mut dev));
    let after_ms = t.elapsed().as_secs_f64() * 1e3;
    match (child, after) {
        (Ok(c), Ok(_)) => Ok(format!(
            "{c}; afterwards a device opened in the parent ran a kernel ({after_ms:.0} ms)"
        )),
        (Err(c), Ok(_)) => Err(c),
        (c, Err(a)) => Err(format!(
            "{}; afterwards the parent could not use the GPU: {a}",
            c.unwrap_or_else(|e| e)
        )),
    }
}

#[derive(Default)]
struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    /// Runs one check and prints its line.
    fn run(&mut self, name: &str, f: impl FnOnce() -> Check) {
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Err(format!("panicked: {msg}"))
        });
        let ms = t.elapsed().as_secs_f64() * 1e3;
        match r {
            Ok(detail) => {
                self.passed += 1;
                println!("PASS {name} ({ms:.0} ms): {detail}");
            }
            Err(detail) => {
                self.failed += 1;
                println!("FAIL {name} ({ms:.0} ms): {detail}");
            }
        }
    }

    fn exit_code(&self) -> ExitCode {
        if self.failed == 0 {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

/// Child mode: `--check NAME --cache DIR` runs the one check and prints its line.
fn child_main(args: &[String]) -> ExitCode {
    let (name, cache) = match args {
        [flag, name, cache_flag, cache] if flag == "--check" && cache_flag == "--cache" => {
            (name.as_str(), PathBuf::from(cache))
        }
        _ => {
            eprintln!("usage: ptx_selftest [--check NAME --cache DIR]");
            return ExitCode::FAILURE;
        }
    };
    let mut tally = Tally::default();
    match CHILD_CHECKS.iter().find(|(n, _)| *n == name) {
        Some((_, check)) => tally.run(name, || check(&cache)),
        None => tally.run(name, || Err(format!("no child check named {name:?}"))),
    }
    tally.exit_code()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        return child_main(&args);
    }
    let cache: PathBuf =
        std::env::temp_dir().join(format!("poot-ptx-selftest-{}", std::process::id()));
    let t = Instant::now();
    let mut dev = match PtxDevice::open_with(0, config(&cache)) {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "device: {} (compute {}.{}), compiling for compute_{}, NVRTC {}.{}, driver CUDA {}.{}, opened in {:.0} ms",
        dev.limits().name,
        dev.compute_capability().0,
        dev.compute_capability().1,
        dev.arch(),
        dev.nvrtc_version().0,
        dev.nvrtc_version().1,
        dev.driver_version() / 1000,
        dev.driver_version() % 1000 / 10,
        t.elapsed().as_secs_f64() * 1e3
    );
    println!("nvrtc options: {}", dev.nvrtc_options().join(" "));
    let mut tally = Tally::default();
    tally.run("limits", || check_limits(&mut dev));
    tally.run("write_read_round_trip", || check_round_trip(&mut dev));
    tally.run("hand_written_eager", || check_hand_eager(&mut dev));
    tally.run("builder_eager_grid_stride", || {
        check_builder_eager(&mut dev)
    });
    tally.run("compile_cache", || check_compile_cache(&mut dev, &cache));
    tally.run("compile_error", || check_compile_error(&mut dev));
    tally.run("record_replay_equals_eager", || {
        check_replay_equals_eager(&mut dev)
    });
    tally.run("replay_cost", || check_replay_cost(&mut dev));
    tally.run("device_copy", || {
        let o = poot_executor::suite::check_copy(&mut dev);
        if o.passed {
            Ok(o.detail)
        } else {
            Err(o.detail)
        }
    });
    tally.run("healthy_device_unpoisoned", || match dev.poisoned() {
        None => Ok("no check above poisoned the shared device".into()),
        Some(e) => Err(e.to_string()),
    });
    drop(dev);
    // Host-side refusals: nothing reaches CUDA, so they stay in this process.
    tally.run("out_of_bounds_poisons", || check_out_of_bounds(&cache));
    tally.run("bad_launch_refused", || check_bad_launch(&cache));
    // Traps and timeouts: one child process each.
    for (name, _) in CHILD_CHECKS {
        tally.run(name, || check_in_child(name, &cache));
    }
    let _ = std::fs::remove_dir_all(&cache);
    println!("{} passed, {} failed", tally.passed, tally.failed);
    tally.exit_code()
}
