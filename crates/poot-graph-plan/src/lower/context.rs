//! The kernel being built: its builder, and which plan buffer each of its parameters binds.

use poot_graph_ir::ValueId;

use poot_kernel::build::{KernelBuilder, Mark};
use poot_kernel::{Access, Builtin, Expr, Kernel, ParamId, SharedId, Ty, Word};

/// A buffer of the plan before physical assignment: inputs keep theirs, intermediates are
/// packed into reused scratch buffers afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LBuf(pub u32);

/// Where row reductions a kernel turns out to need are computed: a point in uniform control
/// flow (every thread of the workgroup reaches it together) before the loop that reads them.
struct Prologue {
    mark: Mark,
    /// Variables numbered from here were declared after the mark: an index that reads one is
    /// not known at the mark.
    first_var: u32,
    /// Reductions computed so far: the value, its index, the variable holding it.
    done: Vec<(ValueId, Vec<Expr>, Expr)>,
}

/// A kernel under construction.
pub struct KernelCtx {
    pub kb: KernelBuilder,
    /// The graph value the kernel computes, for the dispatch's diagnostics.
    pub label: String,
    args: Vec<(LBuf, ParamId)>,
    prologue: Option<Prologue>,
    /// Values this kernel computed itself (a contraction's sum in an epilogue), by index.
    known: Vec<(ValueId, Vec<Expr>, Expr)>,
    /// Shared arrays for prologue reductions, one per element type.
    reduce_shared: Vec<(Ty, SharedId)>,
    /// Row reductions a tiled kernel holds for every row of its tile (a norm's sum of squares
    /// under a tiled projection), each in a shared array indexed by the row's offset in the tile.
    tile_rows: Vec<(ValueId, SharedId)>,
    /// The tile row being read now.
    tile_row_at: Option<TileRow>,
    /// An element-wise kernel: a short reduction it reads at an index its prologue cannot serve
    /// is summed in place, element by element ([`KernelCtx::sums_short_reductions`]).
    elementwise: bool,
}

/// A row of a tiled kernel's tile: its index over the leading axes (`dims`) and its offset in
/// the tile.
#[derive(Clone, Debug)]
pub struct TileRow {
    pub row: Vec<Expr>,
    pub dims: Vec<usize>,
    pub offset: Expr,
}

impl KernelCtx {
    /// A kernel of `kind` (`map`, `matmul`) computing the value labelled `label`.
    pub fn labelled(kind: &str, label: String, workgroup: u32) -> KernelCtx {
        KernelCtx {
            kb: KernelBuilder::new(kind, workgroup),
            label,
            args: Vec::new(),
            prologue: None,
            known: Vec::new(),
            reduce_shared: Vec::new(),
            tile_rows: Vec::new(),
            tile_row_at: None,
            elementwise: false,
        }
    }

    /// Marks the kernel element-wise: each output element is read once, so a short reduction
    /// read there costs its few terms once per element and needs no kernel of its own.
    pub fn sums_short_reductions(mut self) -> KernelCtx {
        self.elementwise = true;
        self
    }

    /// Whether the kernel sums short reductions in place.
    pub fn is_elementwise(&self) -> bool {
        self.elementwise
    }

    /// The parameter bound to `buf`, added on first use; a buffer is bound once per kernel and
    /// becomes writable when any use writes it.
    pub fn param(&mut self, buf: LBuf, word: Word, write: bool) -> ParamId {
        if let Some((_, p)) = self.args.iter().find(|(b, _)| *b == buf) {
            let p = *p;
            if write {
                self.kb.make_writable(p);
            }
            return p;
        }
        let access = if write {
            Access::ReadWrite
        } else {
            Access::Read
        };
        let p = self.kb.param(format!("a{}", self.args.len()), word, access);
        self.args.push((buf, p));
        p
    }

    /// Opens a prologue here: row reductions read after this point, at indices known here, are
    /// computed once at this point. Must be called where every thread of the workgroup runs
    /// (barriers are placed there).
    pub fn open_prologue(&mut self) {
        self.prologue = Some(Prologue {
            mark: self.kb.mark(),
            first_var: self.kb.var_count(),
            done: Vec::new(),
        });
    }

    /// Closes the prologue (at the end of the row it served).
    pub fn close_prologue(&mut self) {
        self.prologue = None;
    }

    /// Whether `idx` is known at the open prologue's point: it reads no variable declared after
    /// it and no thread index.
    pub fn known_at_prologue(&self, idx: &[Expr]) -> bool {
        let Some(p) = &self.prologue else {
            return false;
        };
        idx.iter().all(|e| invariant(e, p.first_var))
    }

    /// The variable already holding row reduction `v` at `idx`, if the prologue computed it.
    pub fn prologue_value(&self, v: ValueId, idx: &[Expr]) -> Option<Expr> {
        let p = self.prologue.as_ref()?;
        p.done
            .iter()
            .find(|(w, i, _)| *w == v && i.as_slice() == idx)
            .map(|(_, _, e)| e.clone())
    }

    /// Starts building a prologue computation (apart from the current block).
    pub fn begin_prologue_item(&mut self) {
        self.kb.begin_detached();
    }

    /// Inserts the computation built since [`KernelCtx::begin_prologue_item`] at the prologue's
    /// point and records that `result` holds `v` at `idx`.
    pub fn end_prologue_item(&mut self, v: ValueId, idx: &[Expr], result: Expr) {
        if let Some(p) = &mut self.prologue {
            self.kb.insert_detached(&mut p.mark);
            p.done.push((v, idx.to_vec(), result));
        }
    }

    /// Records that `e` holds `v` at `idx` in this kernel.
    pub fn set_known(&mut self, v: ValueId, idx: &[Expr], e: Expr) {
        self.known.push((v, idx.to_vec(), e));
    }

    /// What this kernel computed for `v` at `idx`, if it did.
    pub fn known(&self, v: ValueId, idx: &[Expr]) -> Option<Expr> {
        self.known
            .iter()
            .find(|(w, i, _)| *w == v && i.as_slice() == idx)
            .map(|(_, _, e)| e.clone())
    }

    /// The buffers bound so far.
    pub fn binding_count(&self) -> usize {
        self.args.len()
    }

    /// The workgroup-wide shared array prologue reductions of type `ty` use.
    pub fn reduce_array(&mut self, ty: Ty) -> SharedId {
        if let Some((_, s)) = self.reduce_shared.iter().find(|(t, _)| *t == ty) {
            return *s;
        }
        let wg = self.kb.workgroup();
        let s = self.kb.shared(format!("sr_{ty}"), ty, wg);
        self.reduce_shared.push((ty, s));
        s
    }

    /// Records that shared array `arr` holds row reduction `v` for every row of the kernel's
    /// tile, by the row's offset in the tile.
    pub fn add_tile_rows(&mut self, v: ValueId, arr: SharedId) {
        self.tile_rows.push((v, arr));
    }

    /// Whether the kernel holds row reduction `v` for every row of its tile.
    pub fn has_tile_rows(&self, v: ValueId) -> bool {
        self.tile_rows.iter().any(|&(w, _)| w == v)
    }

    /// Says which tile row the reads that follow are at, or that they are at none.
    pub fn set_tile_row(&mut self, at: Option<TileRow>) {
        self.tile_row_at = at;
    }

    /// Row reduction `v` at `idx` (its leading axes, then the kept axis) from the tile's
    /// table, when the kernel holds one and `idx` is the tile row being read now (an axis of
    /// size 1 matches any index: in bounds it is 0).
    pub fn tile_row_value(&self, v: ValueId, idx: &[Expr]) -> Option<Expr> {
        let at = self.tile_row_at.as_ref()?;
        let &(_, arr) = self.tile_rows.iter().find(|&&(w, _)| w == v)?;
        let same_row = idx.len() == at.row.len() + 1
            && at
                .row
                .iter()
                .zip(idx)
                .zip(&at.dims)
                .all(|((a, b), &d)| d == 1 || a == b);
        same_row.then(|| poot_kernel::build::load_shared(arr, at.offset.clone()))
    }

    /// Bytes of workgroup-shared memory the kernel declares so far.
    pub fn shared_bytes(&self) -> u64 {
        self.kb.shared_bytes()
    }

    pub fn finish(self) -> (Kernel, Vec<LBuf>, String) {
        let args = self.args.into_iter().map(|(b, _)| b).collect();
        (self.kb.finish(), args, self.label)
    }
}

/// Whether `e` reads no variable numbered `first_var` or above and no thread index.
fn invariant(e: &Expr, first_var: u32) -> bool {
    match e {
        Expr::F32(_) | Expr::I32(_) | Expr::U32(_) | Expr::Bool(_) => true,
        Expr::Var(v) => v.0 < first_var,
        Expr::Builtin(b) => !matches!(b, Builtin::LocalId),
        Expr::Load { index, .. } | Expr::LoadHalf { index, .. } => invariant(index, first_var),
        Expr::LoadByte { byte, .. } => invariant(byte, first_var),
        // Shared memory changes between barriers: never assume it holds still; a shuffle reads
        // another thread's value.
        Expr::LoadShared { .. } | Expr::ShuffleXor { .. } => false,
        Expr::Unary(_, x) | Expr::Cast(_, x) => invariant(x, first_var),
        Expr::Binary(_, a, b) | Expr::Cmp(_, a, b) => {
            invariant(a, first_var) && invariant(b, first_var)
        }
        Expr::Select {
            cond,
            on_true,
            on_false,
        }
        | Expr::MulAdd(cond, on_true, on_false) => {
            invariant(cond, first_var)
                && invariant(on_true, first_var)
                && invariant(on_false, first_var)
        }
    }
}
