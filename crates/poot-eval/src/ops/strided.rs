//! Strided windows: the one loop under broadcast, transpose, slice, dynamic slice and dynamic
//! update. A window is a base offset plus a source stride per window axis (0 for a broadcast
//! axis), walked in row-major order of the window's dims.

use crate::error::Fault;

/// Row-major strides of `dims`, in elements.
pub(crate) fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

/// A window over a flat buffer.
pub(crate) struct Window<'w> {
    pub(crate) base: usize,
    /// Source stride of each window axis.
    pub(crate) strides: &'w [usize],
    pub(crate) dims: &'w [usize],
}

impl Window<'_> {
    fn is_empty(&self) -> bool {
        self.dims.contains(&0)
    }

    /// Checks that every offset the window visits lies inside a buffer of `len` elements, so
    /// the loops below index without a panic path.
    fn check(&self, len: usize) -> Result<(), Fault> {
        if self.strides.len() != self.dims.len() {
            return Err(Fault::WindowLayout {
                base: self.base,
                len,
            });
        }
        if self.is_empty() {
            return Ok(());
        }
        let last = self
            .dims
            .iter()
            .zip(self.strides)
            .try_fold(self.base, |acc, (&d, &s)| {
                (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
            });
        match last {
            Some(last) if last < len => Ok(()),
            _ => Err(Fault::WindowLayout {
                base: self.base,
                len,
            }),
        }
    }

    /// Calls `f(window_row_offset, source_offset)` for each row (the last axis) of the window.
    fn for_each_row(&self, mut f: impl FnMut(usize, usize)) {
        let r = self.dims.len();
        if r <= 1 {
            f(0, self.base);
            return;
        }
        let outer = &self.dims[..r - 1];
        let row_len = self.dims[r - 1];
        let mut idx = vec![0usize; r - 1];
        let mut off = self.base;
        let mut row = 0usize;
        loop {
            f(row * row_len, off);
            row += 1;
            let mut a = r - 1;
            loop {
                if a == 0 {
                    return;
                }
                a -= 1;
                idx[a] += 1;
                off += self.strides[a];
                if idx[a] < outer[a] {
                    break;
                }
                off -= self.strides[a] * outer[a];
                idx[a] = 0;
            }
        }
    }

    fn row(&self) -> (usize, usize) {
        (
            self.dims.last().copied().unwrap_or(1),
            self.strides.last().copied().unwrap_or(1),
        )
    }

    /// The window's elements of `src`, in row-major order.
    pub(crate) fn read<T: Copy>(&self, src: &[T]) -> Result<Vec<T>, Fault> {
        self.check(src.len())?;
        let n: usize = self.dims.iter().product();
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        let (len, step) = self.row();
        self.for_each_row(|_, off| {
            if step == 1 {
                out.extend_from_slice(&src[off..off + len]);
            } else {
                out.extend((0..len).map(|j| src[off + j * step]));
            }
        });
        Ok(out)
    }

    /// Writes `src` (row-major over the window's dims) into the window of `dst`.
    pub(crate) fn write<T: Copy>(&self, dst: &mut [T], src: &[T]) -> Result<(), Fault> {
        self.check(dst.len())?;
        let n: usize = self.dims.iter().product();
        if n == 0 {
            return Ok(());
        }
        if src.len() != n {
            return Err(Fault::WindowLayout {
                base: self.base,
                len: src.len(),
            });
        }
        let (len, step) = self.row();
        self.for_each_row(|at, off| {
            if step == 1 {
                dst[off..off + len].copy_from_slice(&src[at..at + len]);
            } else {
                for j in 0..len {
                    dst[off + j * step] = src[at + j];
                }
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_and_write() {
        // A 3x4 matrix, window rows 1..3, cols 1..3.
        let src: Vec<i32> = (0..12).collect();
        let w = Window {
            base: 5,
            strides: &[4, 1],
            dims: &[2, 2],
        };
        assert_eq!(w.read(&src).unwrap(), vec![5, 6, 9, 10]);
        let mut dst = vec![0; 12];
        w.write(&mut dst, &[1, 2, 3, 4]).unwrap();
        assert_eq!(dst, vec![0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0]);
        // Transpose of the whole matrix.
        let t = Window {
            base: 0,
            strides: &[1, 4],
            dims: &[4, 3],
        };
        assert_eq!(
            t.read(&src).unwrap(),
            vec![0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
        );
        // Past the end is a fault, not a panic.
        let bad = Window {
            base: 10,
            strides: &[4, 1],
            dims: &[2, 2],
        };
        assert!(bad.read(&src).is_err());
        // Rank 0 and empty windows.
        assert_eq!(
            Window {
                base: 3,
                strides: &[],
                dims: &[]
            }
            .read(&src)
            .unwrap(),
            vec![3]
        );
        assert!(
            Window {
                base: 0,
                strides: &[4, 1],
                dims: &[0, 2]
            }
            .read(&src)
            .unwrap()
            .is_empty()
        );
    }
}
