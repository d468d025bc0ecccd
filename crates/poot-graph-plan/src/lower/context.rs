//! The kernel being built: its builder, and which plan buffer each of its parameters binds.

use crate::kernel::build::KernelBuilder;
use crate::kernel::{Access, Kernel, ParamId, Word};

/// A buffer of the plan before physical assignment: inputs keep theirs, intermediates are
/// packed into reused scratch buffers afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LBuf(pub u32);

/// A kernel under construction.
pub struct KernelCtx {
    pub kb: KernelBuilder,
    /// The graph value the kernel computes, for the dispatch's diagnostics.
    pub label: String,
    args: Vec<(LBuf, ParamId)>,
}

impl KernelCtx {
    /// A kernel of `kind` (`map`, `matmul`) computing the value labelled `label`.
    pub fn labelled(kind: &str, label: String, workgroup: u32) -> KernelCtx {
        KernelCtx {
            kb: KernelBuilder::new(kind, workgroup),
            label,
            args: Vec::new(),
        }
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

    pub fn finish(self) -> (Kernel, Vec<LBuf>, String) {
        let args = self.args.into_iter().map(|(b, _)| b).collect();
        (self.kb.finish(), args, self.label)
    }
}
