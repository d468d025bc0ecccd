//! Opening an executor: the one place the driver names a backend.

use poot_executor::{Device, DeviceError, Engine, Executor};
use poot_graph_plan::Backend;
use poot_ptx_device::PtxDevice;
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

/// Which backend to run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendChoice {
    /// PTX if a CUDA device opens, else wgpu.
    Auto,
    Ptx,
    Wgpu,
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
    /// Auto found no backend; each backend's reason is listed.
    #[error("no GPU backend is usable: ptx: {ptx}; wgpu: {wgpu}")]
    NoneUsable { ptx: DeviceError, wgpu: DeviceError },
}

/// An opened executor and the backend it runs.
pub struct OpenedExecutor {
    pub backend: Backend,
    pub device_name: String,
    pub executor: Box<dyn Executor>,
}

fn engine<D: Device + 'static>(device: D, backend: Backend) -> OpenedExecutor {
    let device_name = device.limits().name.clone();
    let target = device.limits().target(backend);
    OpenedExecutor {
        backend,
        device_name,
        executor: Box::new(Engine::new(device, target)),
    }
}

/// Opens the chosen backend's first device.
pub fn open_executor(choice: BackendChoice) -> Result<OpenedExecutor, BackendError> {
    let ptx = || PtxDevice::open(0).map(|d| engine(d, Backend::Ptx));
    let wgpu = || WgpuDevice::open(WgpuOptions::default()).map(|d| engine(d, Backend::Wgpu));
    match choice {
        BackendChoice::Ptx => ptx().map_err(|source| BackendError::Unavailable {
            backend: Backend::Ptx,
            source,
        }),
        BackendChoice::Wgpu => wgpu().map_err(|source| BackendError::Unavailable {
            backend: Backend::Wgpu,
            source,
        }),
        BackendChoice::Auto => match ptx() {
            Ok(e) => Ok(e),
            Err(ptx) => wgpu().map_err(|wgpu| BackendError::NoneUsable { ptx, wgpu }),
        },
    }
}
