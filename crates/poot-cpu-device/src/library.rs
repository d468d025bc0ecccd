//! The contraction library (`contract.c`): the plan's library contractions, exact
//! ([`LibraryOperands::Exact`]) or in 8-bit integers over a left side it first rounds to 8-bit
//! blocks as the graph does ([`LibraryOperands::Integer`]), compiled once per machine by the
//! system C compiler like the kernels, and run by the replay team in column chunks (the rounding
//! first, in parts of the rows).

use std::ffi::c_void;
use std::sync::Arc;

use poot_executor::{Command, Contraction, DeviceError};
use poot_executor::{LibraryOperands, StoredWeights};
use poot_formats::BlockFormat;

use crate::compiler::{CompileFailure, Compiler, LIBRARY_FLAGS};
use crate::device::{CpuBuffer, Memory};

const SOURCE: &str = include_str!("contract.c");

/// `struct contraction` of `contract.c`.
#[repr(C)]
struct Job {
    lhs: *const f32,
    weights: *const u8,
    out: *mut f32,
    format: u32,
    rows: u32,
    cols: u32,
    depth: u32,
    /// Null unless the products are in integers.
    rounded: *const RoundedRows,
}

/// `struct rounded_rows` of `contract.c`: where the library writes the left side rounded to
/// 8-bit blocks (into the recording's [`Rounding`]).
#[repr(C)]
struct RoundedRows {
    q: *mut i8,
    scale: *mut f32,
    sum16: *mut i32,
}

/// The storage of a left side rounded to 8-bit blocks: one per recording, shared by its
/// integer contractions, which run one after another.
pub(crate) struct Rounding {
    rows: Box<RoundedRows>,
    elems: usize,
    _q: Box<[i8]>,
    _scale: Box<[f32]>,
    _sum16: Box<[i32]>,
}

// SAFETY: the pointers point into the boxed slices it owns; the library writes through them only
// while the one contraction running uses it.
unsafe impl Send for Rounding {}
// SAFETY: as above.
unsafe impl Sync for Rounding {}

impl Rounding {
    /// Room for the left side of the largest integer contraction of `commands`, if there is one.
    pub(crate) fn for_commands(
        commands: &[Command<'_, crate::CpuDevice>],
    ) -> Result<Option<Arc<Rounding>>, DeviceError> {
        let most = commands
            .iter()
            .filter_map(|c| match c {
                Command::Contract(c) if matches!(c.operands, LibraryOperands::Integer(_)) => {
                    Some(u64::from(c.rows) * u64::from(c.depth))
                }
                _ => None,
            })
            .max();
        let Some(most) = most else {
            return Ok(None);
        };
        let elems = usize::try_from(most)
            .ok()
            .filter(|e| *e <= isize::MAX as usize / 4)
            .ok_or_else(|| DeviceError::BadLaunch {
                kernel: "library contraction".to_string(),
                reason: format!("{most} rounded left-side elements do not fit memory"),
            })?;
        Ok(Some(Arc::new(Rounding::new(elems))))
    }

    /// Room for `elems` elements (a multiple of 32).
    fn new(elems: usize) -> Rounding {
        let mut q = vec![0i8; elems].into_boxed_slice();
        let mut scale = vec![0f32; elems / 32].into_boxed_slice();
        let mut sum16 = vec![0i32; elems / 16].into_boxed_slice();
        Rounding {
            rows: Box::new(RoundedRows {
                q: q.as_mut_ptr(),
                scale: scale.as_mut_ptr(),
                sum16: sum16.as_mut_ptr(),
            }),
            elems,
            _q: q,
            _scale: scale,
            _sum16: sum16,
        }
    }
}

type ContractEntry = unsafe extern "C" fn(*const Job, u32, u32);
type RoundEntry = unsafe extern "C" fn(*const Job, u32, u32);
type ColumnsEntry = unsafe extern "C" fn() -> u32;

/// The loaded library.
pub(crate) struct ContractLibrary {
    contract: ContractEntry,
    round: RoundEntry,
    /// Weight rows one register tile covers: column chunks are whole tiles.
    tile_columns: u32,
    _library: libloading::Library,
}

/// `contract.c`'s code for a stored format, where it decodes it.
fn format_code(w: StoredWeights) -> Option<u32> {
    Some(match w {
        StoredWeights::F32 => 0,
        StoredWeights::F16 => 1,
        StoredWeights::BF16 => 2,
        StoredWeights::Blocks(b) => match b {
            BlockFormat::Q4_0 => 3,
            BlockFormat::Q4_1 => 4,
            BlockFormat::Q5_0 => 5,
            BlockFormat::Q5_1 => 6,
            BlockFormat::Q8_0 => 7,
            BlockFormat::Q4_K => 8,
            BlockFormat::Q5_K => 9,
            BlockFormat::Q6_K => 10,
            _ => return None,
        },
    })
}

/// Bytes of a weight row of `depth` elements in `w`.
fn row_bytes(w: StoredWeights, depth: u64) -> Option<u64> {
    match w {
        StoredWeights::F32 => depth.checked_mul(4),
        StoredWeights::F16 | StoredWeights::BF16 => depth.checked_mul(2),
        StoredWeights::Blocks(b) => b.row_bytes(usize::try_from(depth).ok()?).map(|n| n as u64),
    }
}

impl ContractLibrary {
    /// Compiles (or finds in the disk cache) and loads the library.
    pub(crate) fn load(compiler: &Compiler) -> Result<ContractLibrary, DeviceError> {
        let key = compiler.key(SOURCE, LIBRARY_FLAGS);
        let path = compiler
            .shared_object(&key, SOURCE, LIBRARY_FLAGS)
            .map_err(|f| match f {
                CompileFailure::Missing(reason) => DeviceError::Unavailable {
                    backend: crate::device::BACKEND,
                    reason,
                },
                CompileFailure::Refused(log) => DeviceError::Compile {
                    kernel: "contract.c".to_string(),
                    log,
                },
            })?;
        let failed = |e: libloading::Error| DeviceError::Compile {
            kernel: "contract.c".to_string(),
            log: format!("loading {}: {e}", path.display()),
        };
        // SAFETY: a shared object we compiled from our own C, with no initializers.
        let library = unsafe { libloading::Library::new(&path) }.map_err(failed)?;
        // SAFETY: both entries are defined in contract.c with exactly these signatures.
        let (contract, round, columns) = unsafe {
            (
                *library
                    .get::<ContractEntry>(b"poot_contract")
                    .map_err(failed)?,
                *library
                    .get::<RoundEntry>(b"poot_contract_round")
                    .map_err(failed)?,
                *library
                    .get::<ColumnsEntry>(b"poot_contract_columns_per_tile")
                    .map_err(failed)?,
            )
        };
        // SAFETY: takes no arguments and reads nothing.
        let tile_columns = unsafe { columns() }.max(1);
        Ok(ContractLibrary {
            contract,
            round,
            tile_columns,
            _library: library,
        })
    }
}

/// One recorded contraction: the library, its job and the buffers it keeps alive.
pub(crate) struct RecordedContraction {
    library: Arc<ContractLibrary>,
    job: Job,
    /// Where integer products keep their rounded left side.
    rounding: Option<Arc<Rounding>>,
    _buffers: [Arc<Memory>; 3],
}

// SAFETY: the job's addresses point into allocations the recording keeps alive; the entry into
// a library it keeps loaded.
unsafe impl Send for RecordedContraction {}
// SAFETY: as above; the job is only read.
unsafe impl Sync for RecordedContraction {}

impl RecordedContraction {
    /// Checks `c` against its buffers and the library's formats.
    pub(crate) fn new(
        library: Arc<ContractLibrary>,
        c: &Contraction<'_, crate::CpuDevice>,
        rounding: Option<&Arc<Rounding>>,
    ) -> Result<RecordedContraction, DeviceError> {
        let bad = |reason: String| DeviceError::BadLaunch {
            kernel: "library contraction".to_string(),
            reason,
        };
        let (stored, integer) = match c.operands {
            LibraryOperands::Exact(stored) => (stored, false),
            LibraryOperands::Integer(b) => (StoredWeights::Blocks(b), true),
            LibraryOperands::Half { .. } => {
                return Err(bad(
                    "a half-precision contraction (planned for another device)".to_string(),
                ));
            }
        };
        if integer && !c.depth.is_multiple_of(32) {
            return Err(bad(format!(
                "integer products of {} elements against {stored:?}",
                c.depth
            )));
        }
        let format = format_code(stored)
            .ok_or_else(|| bad(format!("weights in {stored:?}, which it does not decode")))?;
        if !c.transpose_weights {
            return Err(bad("weights not stored as [columns, depth]".to_string()));
        }
        let (rows, cols, depth) = (u64::from(c.rows), u64::from(c.cols), u64::from(c.depth));
        let weight_bytes = row_bytes(stored, depth)
            .and_then(|r| r.checked_mul(cols))
            .ok_or_else(|| bad(format!("{depth} elements are not whole {stored:?} blocks")))?;
        for (b, need, what) in [
            (c.lhs, rows * depth * 4, "left side"),
            (c.weights, weight_bytes, "weights"),
            (c.out, rows * cols * 4, "result"),
        ] {
            if b.bytes() < need {
                return Err(bad(format!(
                    "its {what} needs {need} B, the buffer has {} B",
                    b.bytes()
                )));
            }
        }
        if Arc::ptr_eq(&c.out.mem, &c.lhs.mem) || Arc::ptr_eq(&c.out.mem, &c.weights.mem) {
            return Err(bad("its result overlaps an operand".to_string()));
        }
        let ptr = |b: &CpuBuffer| b.mem.ptr.as_ptr().cast::<c_void>();
        let rounding = if integer {
            let r = rounding
                .filter(|r| r.elems as u64 >= rows * depth)
                .ok_or_else(|| bad(format!("no room for {rows} x {depth} rounded elements")))?;
            Some(Arc::clone(r))
        } else {
            None
        };
        Ok(RecordedContraction {
            job: Job {
                lhs: ptr(c.lhs).cast(),
                weights: ptr(c.weights).cast(),
                out: ptr(c.out).cast(),
                format,
                rows: c.rows,
                cols: c.cols,
                depth: c.depth,
                rounded: rounding
                    .as_ref()
                    .map_or(std::ptr::null(), |r| &*r.rows as *const RoundedRows),
            },
            rounding,
            library,
            _buffers: [
                Arc::clone(&c.lhs.mem),
                Arc::clone(&c.weights.mem),
                Arc::clone(&c.out.mem),
            ],
        })
    }

    /// Parts of the rows the rounding of the left side to 8-bit blocks is split into (one per
    /// thread), none where the products are not in integers.
    pub(crate) fn round_parts(&self, threads: usize) -> u32 {
        if self.rounding.is_none() {
            return 0;
        }
        (threads as u32).clamp(1, self.job.rows.max(1))
    }

    /// Rounds part `part` of `parts` of the rows.
    pub(crate) fn round_part(&self, part: u32, parts: u32) {
        let rows = self.job.rows;
        let per_part = rows.div_ceil(parts.max(1));
        let r0 = (part * per_part).min(rows);
        let r1 = (r0 + per_part).min(rows);
        // SAFETY: the job and its rounding storage were sized for these rows when recorded,
        // and each part writes its own rows of it.
        unsafe { (self.library.round)(&self.job, r0, r1) };
    }

    /// Columns per chunk of the product for `threads` threads, `chunks_per_thread` for each
    /// thread so uneven chunks balance (whole register tiles), and the number of chunks.
    pub(crate) fn column_chunks(&self, threads: usize, chunks_per_thread: u32) -> (u32, u32) {
        let cols = self.job.cols;
        let tile = self.library.tile_columns;
        let tiles = cols.div_ceil(tile);
        let want = (threads as u32).saturating_mul(chunks_per_thread).max(1);
        let per_chunk = tiles.div_ceil(want.min(tiles).max(1)) * tile;
        (per_chunk, cols.div_ceil(per_chunk))
    }

    /// Chunk `chunk` of the product's columns, `per_chunk` a chunk.
    pub(crate) fn run_columns(&self, chunk: u32, per_chunk: u32) {
        let c0 = (chunk * per_chunk).min(self.job.cols);
        let c1 = (c0 + per_chunk).min(self.job.cols);
        // SAFETY: the job was checked against its buffers when recorded (its left side
        // rounded first where the products are in integers), and each chunk writes its own
        // columns of the result.
        unsafe { (self.library.contract)(&self.job, c0, c1) };
    }
}
