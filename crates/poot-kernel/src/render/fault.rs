//! The fault word: how a kernel reports a failed check (`Stmt::Fault { code }`).
//!
//! A kernel that can fault gets one more buffer after its own parameters: `poot_fault`, an
//! array of [`FAULT_WORDS`] u32 words that the host zeroes before the work and reads after it.
//! A faulting thread does
//!
//! - `atomicMax(&poot_fault[FAULT_CODE_WORD], code)`: the word ends up holding the largest
//!   code among the threads that recorded a fault (on WGSL, where every thread runs to the end,
//!   that is one value whatever the threads' order, so a replay reports the same fault);
//! - `atomicOr(&poot_fault[FAULT_FLAG_WORD], 1)`: the word is 1 once any thread faulted, which
//!   tells a fault with code 0 from no fault.
//!
//! **WGSL** (wgpu and raw Vulkan: SPIR-V has no trap). The buffer is
//! `@group(0) @binding(params.len()) var<storage, read_write> poot_fault: array<atomic<u32>>`;
//! the thread records the fault and carries on (the device runs with robust buffer access),
//! and the host discards the dispatch's results when the flag word is set.
//!
//! **CUDA** (PTX). The kernel takes one more pointer, `unsigned int* poot_fault`, after its own
//! parameters. The thread records the fault as above, makes it visible system-wide
//! (`__threadfence_system`) and then executes `__trap()`, which ends the launch with a sticky
//! error. A trapped context cannot copy device memory any more, so for the code to be readable
//! the pointer should address host-mapped pinned memory (`cuMemHostAlloc` with
//! `CU_MEMHOSTALLOC_DEVICEMAP`), which the host reads directly after the failed synchronize.
//! With plain device memory the trap still surfaces, only without its code. The first trap ends
//! the whole launch, so threads that would have faulted later never record: the code is the
//! largest among those that got there first (seen on an H200 with NVRTC 13.0: threads faulting
//! with 500 and one with 999, synchronize returned `CUDA_ERROR_LAUNCH_FAILED` and the words
//! read `[500, 1]` from the host; later calls on the context fail with the same error).

use crate::ir::{Kernel, Stmt};

/// Words in the fault buffer.
pub const FAULT_WORDS: u32 = 2;
/// The word holding the largest fault code recorded.
pub const FAULT_CODE_WORD: u32 = 0;
/// The word that is 1 once any thread faulted, 0 otherwise.
pub const FAULT_FLAG_WORD: u32 = 1;

/// Whether `k` contains a `Fault` statement, so its renderings take the fault buffer: WGSL
/// binding `k.params.len()` (see [`WgslKernel::fault_binding`](super::WgslKernel)) and, in
/// CUDA, a pointer after the kernel's own parameters.
pub fn can_fault(k: &Kernel) -> bool {
    block_faults(&k.body)
}

fn block_faults(body: &[Stmt]) -> bool {
    body.iter().any(|s| match s {
        Stmt::Fault { code: _ } => true,
        Stmt::If {
            cond: _,
            then,
            otherwise,
        } => block_faults(then) || block_faults(otherwise),
        Stmt::For {
            var: _,
            start: _,
            end: _,
            step: _,
            body,
        } => block_faults(body),
        Stmt::Let { .. }
        | Stmt::Set { .. }
        | Stmt::Store { .. }
        | Stmt::StoreShared { .. }
        | Stmt::StoreSharedHalves { .. }
        | Stmt::LetWords { .. }
        | Stmt::LetShared { .. }
        | Stmt::TeamSum { .. }
        | Stmt::MmaTf32 { .. }
        | Stmt::MmaHalf { .. }
        | Stmt::Barrier => false,
    })
}
