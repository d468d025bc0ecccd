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
    args: Vec<(LBuf, ParamId)>,
}

impl KernelCtx {
    pub fn new(name: impl Into<String>, workgroup: u32) -> KernelCtx {
        KernelCtx {
            kb: KernelBuilder::new(name, workgroup),
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
        let p = self.kb.param(format!("b{}", buf.0), word, access);
        self.args.push((buf, p));
        p
    }

    pub fn finish(self) -> (Kernel, Vec<LBuf>) {
        let args = self.args.into_iter().map(|(b, _)| b).collect();
        (self.kb.finish(), args)
    }
}
