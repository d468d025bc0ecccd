//! A group of CUDA devices (the ranks of a tensor-parallel group, the stages of a layer
//! pipeline): one rank per device ordinal, each in its device's primary context with a stream of
//! its own, and one NCCL communicator per rank, created together. Each rank's all-reduces and
//! broadcasts are captured into its CUDA graphs with its kernels, so a
//! step is still one graph launch per rank. [`open_group`] wraps the ranks' engines in a
//! [`Coordinator`] whose abort hook aborts every communicator when a rank fails.
//!
//! NVLink multicast (NVLS) stays off unless the environment already says otherwise: a program
//! using it can take a shared host's GPUs out of service. Connections are made when the
//! communicators are created, not at the first collective, so a rank capturing its first
//! all-reduce never waits on a peer that failed before capturing.

use std::sync::{Arc, Weak};

use poot_executor::Backend;
use poot_executor::{Coordinator, Device, DeviceError, Engine, GroupAbort, RankExecutor};

use crate::device::{PtxConfig, PtxDevice};
use crate::nccl::{NcclComm, nccl};

/// NCCL settings a group applies to the process environment before NCCL starts, each only
/// where the environment does not set it already: NVLink multicast off, and connections made
/// at communicator creation.
pub const GROUP_ENV_DEFAULTS: &[(&str, &str)] =
    &[("NCCL_NVLS_ENABLE", "0"), ("NCCL_RUNTIME_CONNECT", "0")];

fn unavailable(reason: String) -> DeviceError {
    DeviceError::Unavailable {
        backend: "NCCL",
        reason,
    }
}

/// Sets each of [`GROUP_ENV_DEFAULTS`] the environment does not set.
fn apply_env_defaults() {
    for (key, value) in GROUP_ENV_DEFAULTS {
        if std::env::var_os(key).is_none() {
            // SAFETY: environment writes race with reads on other threads. This runs before
            // NCCL is first used in the process (it reads its settings then); callers that run
            // other threads reading the environment should set these themselves first (the
            // `poot` binary does, at start).
            unsafe { std::env::set_var(key, value) };
        }
    }
}

/// Aborts every rank's communicator (those still alive).
struct AbortAll {
    comms: Vec<Weak<NcclComm>>,
}

impl GroupAbort for AbortAll {
    fn abort(&self, _reason: &str) {
        for c in self.comms.iter().filter_map(Weak::upgrade) {
            c.abort();
        }
    }
}

/// Opens one rank per CUDA device in `ordinals` (rank `r` on `ordinals[r]`, each ordinal
/// once) with NCCL communicators between them, and the hook that aborts them all. Refused
/// typed where CUDA or NCCL is missing, an ordinal is absent or repeated, or NCCL fails to
/// create the communicators.
pub fn open_group_devices(
    ordinals: &[usize],
    config: PtxConfig,
) -> Result<(Vec<PtxDevice>, Arc<dyn GroupAbort>), DeviceError> {
    if ordinals.is_empty() {
        return Err(unavailable("a group needs at least one device".into()));
    }
    for (i, o) in ordinals.iter().enumerate() {
        if ordinals[..i].contains(o) {
            return Err(unavailable(format!(
                "device {o} is named twice (NCCL runs one rank per device)"
            )));
        }
    }
    let mut devices = Vec::with_capacity(ordinals.len());
    for &o in ordinals {
        devices.push(PtxDevice::open_in(o, config.clone(), true)?);
    }
    apply_env_defaults();
    let nccl = nccl()?;
    let comms = nccl
        .init_ranks(devices.len(), |r| {
            devices[r].make_current().map_err(|e| e.to_string())
        })
        .map_err(|e| unavailable(format!("{e} (NCCL {} from {})", nccl.version, nccl.path)))?;
    let ranks = devices.len();
    let comms: Vec<Arc<NcclComm>> = comms.into_iter().map(Arc::new).collect();
    let abort = AbortAll {
        comms: comms.iter().map(Arc::downgrade).collect(),
    };
    for (d, c) in devices.iter_mut().zip(comms) {
        d.join_group(c, ranks);
    }
    Ok((devices, Arc::new(abort)))
}

/// A [`Coordinator`] over one rank per CUDA device in `ordinals` (see
/// [`open_group_devices`]), each rank an engine planning against its own device's limits.
pub fn open_group(ordinals: &[usize]) -> Result<Coordinator, DeviceError> {
    let (devices, abort) = open_group_devices(ordinals, PtxConfig::default())?;
    let ranks: Vec<RankExecutor> = devices
        .into_iter()
        .map(|d| {
            let target = d.limits().target(Backend::Ptx);
            Box::new(Engine::new(d, target)) as RankExecutor
        })
        .collect();
    Coordinator::new(ranks, Some(abort)).map_err(|e| unavailable(e.to_string()))
}
