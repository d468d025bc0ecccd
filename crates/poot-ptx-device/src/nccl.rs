//! NCCL, loaded at run time like the rest of CUDA: the communicators of a group (tensor-parallel
//! ranks, pipeline stages) and the all-reduces and broadcasts a rank records into its CUDA
//! graphs.
//!
//! The types are cudarc's NCCL bindings; the library is opened here rather than through cudarc's
//! loader because NCCL installs (the `nvidia-nccl` Python wheels, distribution packages) name it
//! `libnccl.so.2`, which cudarc's candidate names leave out. `POOT_NCCL_LIBRARY` names a file to
//! use instead. A missing library is [`DeviceError::Unavailable`], never a panic.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys::CUstream;
use cudarc::nccl::sys::{ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclUniqueId};
use libloading::Library;
use poot_executor::DeviceError;

/// The environment variable naming the NCCL library file to load.
pub const NCCL_LIBRARY_ENV: &str = "POOT_NCCL_LIBRARY";

/// NCCL's success code.
const NCCL_SUCCESS: c_int = 0;

type GetUniqueId = unsafe extern "C" fn(*mut ncclUniqueId) -> c_int;
type CommInitRank = unsafe extern "C" fn(*mut ncclComm_t, c_int, ncclUniqueId, c_int) -> c_int;
type GroupCall = unsafe extern "C" fn() -> c_int;
type AllReduce = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    CUstream,
) -> c_int;
type Broadcast = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    c_int,
    ncclComm_t,
    CUstream,
) -> c_int;
type CommCall = unsafe extern "C" fn(ncclComm_t) -> c_int;
type AsyncError = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type GetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;

/// The NCCL entry points poot calls.
pub(crate) struct Nccl {
    get_unique_id: GetUniqueId,
    comm_init_rank: CommInitRank,
    group_start: GroupCall,
    group_end: GroupCall,
    all_reduce: AllReduce,
    broadcast: Broadcast,
    comm_abort: CommCall,
    comm_destroy: CommCall,
    comm_get_async_error: AsyncError,
    get_error_string: ErrorString,
    /// NCCL's version code (`22703` for 2.27.3).
    pub(crate) version: c_int,
    /// Where the library was found.
    pub(crate) path: String,
    // Keeps the symbols above valid.
    _lib: Library,
}

/// The library names tried, in order (after `POOT_NCCL_LIBRARY`).
const CANDIDATES: &[&str] = &["libnccl.so.2", "libnccl.so"];

fn unavailable(reason: String) -> DeviceError {
    DeviceError::Unavailable {
        backend: "NCCL",
        reason,
    }
}

/// Loads NCCL once per process.
pub(crate) fn nccl() -> Result<&'static Nccl, DeviceError> {
    static NCCL: OnceLock<Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(load)
        .as_ref()
        .map_err(|reason| unavailable(reason.clone()))
}

fn load() -> Result<Nccl, String> {
    let named = std::env::var(NCCL_LIBRARY_ENV).ok();
    let mut tried = Vec::new();
    let mut found = None;
    for name in named
        .iter()
        .map(String::as_str)
        .chain(CANDIDATES.iter().copied())
    {
        // SAFETY: loading NCCL runs its (trusted) initializers; nothing else is assumed.
        match unsafe { Library::new(name) } {
            Ok(lib) => {
                found = Some((lib, name.to_string()));
                break;
            }
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    let Some((lib, path)) = found else {
        return Err(format!(
            "the NCCL library was not found ({}); set {NCCL_LIBRARY_ENV} to its path (pip's nvidia-nccl wheels put libnccl.so.2 under site-packages/nvidia/nccl/lib) or add its folder to LD_LIBRARY_PATH",
            tried.join("; ")
        ));
    };
    /// One symbol as a function pointer of type `T`.
    fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        // SAFETY: every `T` here is the C signature NCCL's header declares for `name`.
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("NCCL has no `{name}`: {e}"))
    }
    let get_version: GetVersion = sym(&lib, "ncclGetVersion")?;
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    unsafe { get_version(&mut version) };
    Ok(Nccl {
        get_unique_id: sym(&lib, "ncclGetUniqueId")?,
        comm_init_rank: sym(&lib, "ncclCommInitRank")?,
        group_start: sym(&lib, "ncclGroupStart")?,
        group_end: sym(&lib, "ncclGroupEnd")?,
        all_reduce: sym(&lib, "ncclAllReduce")?,
        broadcast: sym(&lib, "ncclBroadcast")?,
        comm_abort: sym(&lib, "ncclCommAbort")?,
        comm_destroy: sym(&lib, "ncclCommDestroy")?,
        comm_get_async_error: sym(&lib, "ncclCommGetAsyncError")?,
        get_error_string: sym(&lib, "ncclGetErrorString")?,
        version,
        path,
        _lib: lib,
    })
}

impl Nccl {
    /// NCCL's text for a result code.
    pub(crate) fn error_text(&self, code: c_int) -> String {
        // SAFETY: NCCL returns a static NUL-terminated string for any code.
        let p = unsafe { (self.get_error_string)(code) };
        if p.is_null() {
            return format!("NCCL error {code}");
        }
        // SAFETY: non-null, NUL-terminated, static.
        let text = unsafe { CStr::from_ptr(p) }.to_string_lossy();
        format!("{text} (NCCL error {code})")
    }

    fn check(&self, call: &str, code: c_int) -> Result<(), String> {
        if code == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(format!("{call}: {}", self.error_text(code)))
        }
    }

    /// A fresh group id (rank 0's bootstrap address).
    pub(crate) fn unique_id(&self) -> Result<ncclUniqueId, String> {
        let mut id = ncclUniqueId { internal: [0; 128] };
        // SAFETY: writes one id.
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// Creates one communicator per rank from one thread: `make_current(r)` makes rank `r`'s
    /// context current before its init is queued, and the group call initializes them together.
    pub(crate) fn init_ranks(
        &'static self,
        ranks: usize,
        mut make_current: impl FnMut(usize) -> Result<(), String>,
    ) -> Result<Vec<NcclComm>, String> {
        let n = c_int::try_from(ranks).map_err(|_| format!("{ranks} ranks"))?;
        let id = self.unique_id()?;
        let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); ranks];
        // SAFETY: starts a group; ended below on every path.
        self.check("ncclGroupStart", unsafe { (self.group_start)() })?;
        let mut queued = Ok(());
        for (r, comm) in comms.iter_mut().enumerate() {
            if let Err(e) = make_current(r) {
                queued = Err(e);
                break;
            }
            // SAFETY: `comm` is a valid out-pointer; `id` is the group's id; r < n.
            let code = unsafe { (self.comm_init_rank)(comm, n, id, r as c_int) };
            if let Err(e) = self.check("ncclCommInitRank", code) {
                queued = Err(e);
                break;
            }
        }
        // SAFETY: ends the group begun above.
        let ended = self.check("ncclGroupEnd", unsafe { (self.group_end)() });
        let made: Vec<NcclComm> = comms
            .into_iter()
            .enumerate()
            .filter(|(_, c)| !c.is_null())
            .map(|(rank, c)| NcclComm {
                nccl: self,
                handle: Mutex::new(Some(c)),
                rank,
            })
            .collect();
        queued?;
        ended?;
        for c in &made {
            c.async_error()?;
        }
        if made.len() != ranks {
            return Err(format!(
                "NCCL made {} communicators for {ranks} ranks",
                made.len()
            ));
        }
        Ok(made)
    }
}

/// One rank's communicator: aborted at most once (then every use is refused), destroyed when
/// dropped otherwise.
pub(crate) struct NcclComm {
    nccl: &'static Nccl,
    handle: Mutex<Option<ncclComm_t>>,
    pub(crate) rank: usize,
}

// SAFETY: a communicator handle is a plain pointer NCCL lets any thread use, one call at a time;
// the mutex serializes our calls, and abort is documented as safe beside blocked operations.
unsafe impl Send for NcclComm {}
// SAFETY: as above.
unsafe impl Sync for NcclComm {}

impl NcclComm {
    fn handle(&self) -> Result<ncclComm_t, String> {
        match self.handle.lock() {
            Ok(h) => h.ok_or_else(|| "the group's communicators were aborted".to_string()),
            Err(_) => Err("the communicator's lock is poisoned".to_string()),
        }
    }

    /// Queues (or, inside a stream capture, records) the f32 sum of `n_elems` from `src` into
    /// `dst` over the group, on `stream`.
    pub(crate) fn all_reduce(
        &self,
        src: u64,
        dst: u64,
        n_elems: usize,
        stream: CUstream,
    ) -> Result<(), String> {
        let comm = self.handle()?;
        // SAFETY: `src` and `dst` are device allocations of at least `n_elems` f32 in the
        // communicator's context (checked by the caller); the stream is that context's.
        let code = unsafe {
            (self.nccl.all_reduce)(
                src as *const c_void,
                dst as *mut c_void,
                n_elems,
                ncclDataType_t::ncclFloat32,
                ncclRedOp_t::ncclSum,
                comm,
                stream,
            )
        };
        self.nccl.check("ncclAllReduce", code)?;
        self.async_error()
    }

    /// Queues (or, inside a stream capture, records) the copy of rank `root`'s first `n_words`
    /// 32-bit words of `src` into `dst` on every rank of the group, on `stream`.
    pub(crate) fn broadcast(
        &self,
        src: u64,
        dst: u64,
        n_words: usize,
        root: usize,
        stream: CUstream,
    ) -> Result<(), String> {
        let comm = self.handle()?;
        let root = c_int::try_from(root).map_err(|_| format!("root rank {root}"))?;
        // SAFETY: `src` and `dst` are device allocations of at least `n_words` words in the
        // communicator's context (checked by the caller); the stream is that context's. Words
        // move as u32: a broadcast copies, it never converts.
        let code = unsafe {
            (self.nccl.broadcast)(
                src as *const c_void,
                dst as *mut c_void,
                n_words,
                ncclDataType_t::ncclUint32,
                root,
                comm,
                stream,
            )
        };
        self.nccl.check("ncclBroadcast", code)?;
        self.async_error()
    }

    /// An error NCCL found in the background (a peer that vanished, a network failure).
    pub(crate) fn async_error(&self) -> Result<(), String> {
        let comm = self.handle()?;
        let mut code: c_int = NCCL_SUCCESS;
        // SAFETY: writes one int.
        let r = unsafe { (self.nccl.comm_get_async_error)(comm, &mut code) };
        self.nccl.check("ncclCommGetAsyncError", r)?;
        self.nccl.check("NCCL (asynchronous)", code)
    }

    /// Aborts the communicator: operations in flight on it end, every later use is refused.
    pub(crate) fn abort(&self) {
        let taken = self.handle.lock().ok().and_then(|mut h| h.take());
        if let Some(comm) = taken {
            // SAFETY: the handle is live and never used again (taken out of the cell).
            unsafe { (self.nccl.comm_abort)(comm) };
        }
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        let taken = self.handle.get_mut().ok().and_then(Option::take);
        if let Some(comm) = taken {
            // SAFETY: the handle is live and this is its last use.
            unsafe { (self.nccl.comm_destroy)(comm) };
        }
    }
}
