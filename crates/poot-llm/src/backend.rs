//! Opening an executor: the one place the driver names a backend.

use poot_cpu_device::{CpuDevice, CpuOptions};
use poot_executor::{Coordinator, RankExecutor};
use poot_executor::{Device, DeviceError, Engine, Executor};
use poot_graph_plan::{Backend, Tuning, TuningError};
use poot_ptx_device::{PtxConfig, PtxDevice, open_group_devices};
use poot_rocm_device::RocmDevice;

pub use poot_ptx_device::{GROUP_ENV_DEFAULTS, NCCL_LIBRARY_ENV};
use poot_vulkan_device::{VulkanDevice, VulkanOptions};
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

use crate::placement::Placement;

/// The environment variable the Vulkan loader's window-system probes read.
pub const RUNTIME_DIR_ENV: &str = "XDG_RUNTIME_DIR";

/// A private runtime directory to set as `XDG_RUNTIME_DIR` when the process has none: without
/// it, each Vulkan probe (wgpu enumerating adapters loads the Wayland client, which checks the
/// variable) prints "error: XDG_RUNTIME_DIR is invalid or not set" although nothing is wrong
/// for a headless compute process. `None` when the variable is set or no directory could be
/// made (then the message stays, and is harmless). The caller sets the variable while the
/// process is still single-threaded.
pub fn private_runtime_dir() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    if std::env::var_os(RUNTIME_DIR_ENV).is_some() {
        return None;
    }
    let user = std::env::var("USER").unwrap_or_else(|_| "user".to_string());
    let dir = std::env::temp_dir().join(format!("poot-runtime-{user}"));
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => Some(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Some(dir),
        Err(_) => None,
    }
}

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// PTX if a CUDA device opens, else wgpu on a hardware GPU, else the host CPU, else wgpu on
    /// a software adapter (with a line saying why).
    Auto,
    Ptx,
    /// wgpu on the best adapter it finds, software ones (lavapipe) included.
    Wgpu,
    /// The host CPU, kernels compiled by the system's C compiler.
    Cpu,
    /// An AMD GPU over HSA, kernels compiled by hipRTC. Only when asked for: `Auto` does not
    /// try it until it has run the shared suite on an AMD GPU.
    Rocm,
    /// Raw Vulkan (ash) on the best device it finds, software ones included. `Auto` never
    /// picks it.
    Vulkan,
}

/// Why no executor could be opened.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The chosen backend has no usable device here.
    #[error("backend {backend}: {source}")]
    Unavailable {
        backend: Backend,
        source: DeviceError,
    },
    /// A backend that runs no device groups was asked for several devices.
    #[error(
        "backend {backend} does not run a group of devices (tensor parallelism and the layer pipeline run on ptx)"
    )]
    NoGroups { backend: Backend },
    /// `POOT_TUNING` (benchmark sweeps of the planner's tuning) does not parse.
    #[error(transparent)]
    Tuning(#[from] TuningError),
    /// Auto found no backend; each backend's reason is listed.
    #[error("no backend is usable: ptx: {ptx}; wgpu: {wgpu}; cpu: {cpu}")]
    NoneUsable {
        ptx: Box<DeviceError>,
        wgpu: Box<DeviceError>,
        cpu: Box<DeviceError>,
    },
}

/// An opened executor and the backend it runs.
pub struct OpenedExecutor {
    pub backend: Backend,
    pub device_name: String,
    pub executor: Box<dyn Executor>,
}

fn engine<D: Device + 'static>(device: D, backend: Backend, tuning: &Tuning) -> OpenedExecutor {
    let device_name = device.limits().name.clone();
    let mut target = device.limits().target(backend);
    target.tuning = tuning.clone();
    OpenedExecutor {
        backend,
        device_name,
        executor: Box::new(Engine::new(device, target)),
    }
}

/// The CUDA device's configuration under `tuning`: the defaults with its launch overlap.
fn ptx_config(tuning: &Tuning) -> PtxConfig {
    PtxConfig {
        launch_overlap: tuning.launch_overlap,
        ..PtxConfig::default()
    }
}

/// Opens the chosen backend's first `ranks` devices as one group (a
/// [`poot_executor::Coordinator`] with a communicator between them, for a tensor-parallel group
/// or a layer pipeline): PTX only, which `Auto` picks. Build the driver with
/// [`crate::Driver::placed`].
pub fn open_group_executor(
    choice: BackendChoice,
    ranks: usize,
) -> Result<OpenedExecutor, BackendError> {
    let no_groups = |backend| Err(BackendError::NoGroups { backend });
    match choice {
        BackendChoice::Wgpu => return no_groups(Backend::Wgpu),
        BackendChoice::Cpu => return no_groups(Backend::Cpu),
        BackendChoice::Vulkan => return no_groups(Backend::Vulkan),
        BackendChoice::Rocm => return no_groups(Backend::Rocm),
        BackendChoice::Auto | BackendChoice::Ptx => {}
    }
    let tuning = Tuning::from_env()?;
    let ordinals: Vec<usize> = (0..ranks).collect();
    let unavailable = |source| BackendError::Unavailable {
        backend: Backend::Ptx,
        source,
    };
    let (devices, abort) =
        open_group_devices(&ordinals, ptx_config(&tuning)).map_err(unavailable)?;
    let name = devices
        .first()
        .map(|d| d.limits().name.clone())
        .unwrap_or_default();
    let execs: Vec<RankExecutor> = devices
        .into_iter()
        .map(|d| {
            let mut target = d.limits().target(Backend::Ptx);
            target.tuning = tuning.clone();
            Box::new(Engine::new(d, target)) as RankExecutor
        })
        .collect();
    let coordinator = Coordinator::new(execs, Some(abort)).map_err(|e| {
        unavailable(DeviceError::Unavailable {
            backend: "CUDA",
            reason: e.to_string(),
        })
    })?;
    Ok(OpenedExecutor {
        backend: Backend::Ptx,
        device_name: format!("{ranks} x {name}"),
        executor: Box::new(coordinator),
    })
}

/// Opens the devices `placement` spans: the chosen backend's first device for a placement on
/// one, else its first devices as one group ([`open_group_executor`]), named with the
/// placement. Build the driver with [`crate::Driver::placed`] and the same placement.
pub fn open_placed_executor(
    choice: BackendChoice,
    placement: Placement,
) -> Result<OpenedExecutor, BackendError> {
    let devices = placement.devices();
    if devices <= 1 {
        return open_executor(choice);
    }
    let mut opened = open_group_executor(choice, devices)?;
    opened.device_name = format!("{} ({placement})", opened.device_name);
    Ok(opened)
}

/// Opens the chosen backend's first device.
pub fn open_executor(choice: BackendChoice) -> Result<OpenedExecutor, BackendError> {
    let tuning = Tuning::from_env()?;
    let ptx =
        || PtxDevice::open_with(0, ptx_config(&tuning)).map(|d| engine(d, Backend::Ptx, &tuning));
    let cpu = || CpuDevice::open(CpuOptions::default()).map(|d| engine(d, Backend::Cpu, &tuning));
    let unavailable = |backend| move |source| BackendError::Unavailable { backend, source };
    match choice {
        BackendChoice::Ptx => ptx().map_err(unavailable(Backend::Ptx)),
        BackendChoice::Wgpu => WgpuDevice::open(WgpuOptions::default())
            .map(|d| engine(d, Backend::Wgpu, &tuning))
            .map_err(unavailable(Backend::Wgpu)),
        BackendChoice::Cpu => cpu().map_err(unavailable(Backend::Cpu)),
        BackendChoice::Rocm => RocmDevice::open(0)
            .map(|d| engine(d, Backend::Rocm, &tuning))
            .map_err(unavailable(Backend::Rocm)),
        BackendChoice::Vulkan => VulkanDevice::open(VulkanOptions::default())
            .map(|d| engine(d, Backend::Vulkan, &tuning))
            .map_err(unavailable(Backend::Vulkan)),
        BackendChoice::Auto => {
            let ptx = match ptx() {
                Ok(e) => return Ok(e),
                Err(e) => e,
            };
            // A software Vulkan adapter (lavapipe) runs the same kernels far slower than the
            // CPU backend: only a hardware GPU is taken before the CPU.
            let (wgpu, software) = match WgpuDevice::open(WgpuOptions::default()) {
                Ok(d) if d.adapter_info().device_type != wgpu::DeviceType::Cpu => {
                    return Ok(engine(d, Backend::Wgpu, &tuning));
                }
                Ok(d) => (
                    DeviceError::Unavailable {
                        backend: "wgpu",
                        reason: format!("{} is a software adapter", d.limits().name),
                    },
                    Some(d),
                ),
                Err(e) => (e, None),
            };
            match (cpu(), software) {
                (Ok(e), _) => Ok(e),
                (Err(cpu), Some(d)) => {
                    eprintln!(
                        "poot: the CPU backend is unavailable ({cpu}); running on the software Vulkan adapter {} instead",
                        d.limits().name
                    );
                    Ok(engine(d, Backend::Wgpu, &tuning))
                }
                (Err(cpu), None) => Err(BackendError::NoneUsable {
                    ptx: Box::new(ptx),
                    wgpu: Box::new(wgpu),
                    cpu: Box::new(cpu),
                }),
            }
        }
    }
}
