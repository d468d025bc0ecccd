//! The engine refuses what would take the device past its memory before allocating anything:
//! weights at load, and an entry whose buffers come on top of what is already held, naming the
//! entry. Runs on the attached adapter with a lowered memory figure.

#![allow(clippy::unwrap_used)]

use poot_executor::{
    Backend, ConstBytes, ConstSource, Device, Engine, ExecError, Executor, PlanError,
};
use poot_graph_ir::ops;
use poot_graph_ir::{Builder, DType, Outputs, Slot, TensorType, TraceLimits};
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

/// One f32 weight `w [16, 128]` (8 KiB).
struct Weights;

impl ConstSource for Weights {
    fn names(&self) -> Vec<String> {
        vec!["w".into()]
    }

    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>> {
        (name == "w").then(|| ConstBytes::F32(vec![0.5f32; 16 * 128].into()))
    }
}

fn engine(memory_bytes: u64) -> Option<Engine<WgpuDevice>> {
    let device = match WgpuDevice::open(WgpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            return None;
        }
    };
    let mut target = device.limits().target(Backend::Wgpu);
    target.limits.memory_bytes = Some(memory_bytes);
    Some(Engine::new(device, target))
}

#[test]
fn weights_over_the_memory_are_refused_before_allocating() {
    let Some(mut engine) = engine(4096) else {
        return;
    };
    let err = engine.load_weights(Box::new(Weights)).unwrap_err();
    assert_eq!(
        err,
        ExecError::OutOfMemory {
            what: "weights".into(),
            needed_bytes: 8192,
            held_bytes: 0,
            memory_bytes: 4096,
        }
    );
    assert_eq!(engine.stats().weight_bytes, 0);
}

#[test]
fn an_entry_over_the_memory_left_is_refused_with_its_label() {
    // Two executables' weights (16 KiB) fit; an entry's own buffers on top do not.
    let Some(mut engine) = engine(18 << 10) else {
        return;
    };
    let _first = engine.load_weights(Box::new(Weights)).unwrap();
    let second = engine.load_weights(Box::new(Weights)).unwrap();
    let b = Builder::new(TraceLimits::standard(64));
    let w = b
        .constant("w", TensorType::new(DType::F32, vec![16, 128]))
        .unwrap();
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![8, 128]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let graph = b.finish(Outputs::new(y)).unwrap();
    let scratch_before = engine.stats().scratch_bytes;
    let err = engine
        .add_entry(second, &graph, "step (rows 1, tokens 8, capacity 8)")
        .unwrap_err();
    println!("{err}");
    let ExecError::OutOfMemory {
        what,
        needed_bytes,
        held_bytes,
        memory_bytes,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(what, "step (rows 1, tokens 8, capacity 8)");
    // The slot x (4 KiB) and the output (512 B).
    assert_eq!(
        (*needed_bytes, *held_bytes, *memory_bytes),
        (4096 + 512, 16384, 18 << 10)
    );
    assert_eq!(engine.stats().scratch_bytes, scratch_before);

    // Alone, the same step fits (8 KiB + 4.5 KiB of 13 KiB); a step whose own plan exceeds the
    // memory is refused by the planner, inside the entry's name.
    let Some(mut engine) = self::engine(13 << 10) else {
        return;
    };
    let exe = engine.load_weights(Box::new(Weights)).unwrap();
    engine.add_entry(exe, &graph, "fits").unwrap();
    let b = Builder::new(TraceLimits::standard(64));
    let w = b
        .constant("w", TensorType::new(DType::F32, vec![16, 128]))
        .unwrap();
    let x = b
        .slot(
            Slot::Named("x".into()),
            TensorType::new(DType::F32, vec![64, 128]),
        )
        .unwrap();
    let y = ops::linear(&b, x, w, None).unwrap();
    let big = b.finish(Outputs::new(y)).unwrap();
    let err = engine.add_entry(exe, &big, "too big").unwrap_err();
    let ExecError::Plan(PlanError::InEntry { entry, source }) = &err else {
        panic!("{err}");
    };
    assert_eq!(entry, "too big");
    assert!(matches!(**source, PlanError::OutOfMemory { .. }), "{err}");
}
