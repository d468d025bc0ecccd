//! CPU reference decode of any packed weight to f32, from its component byte slices: the whole
//! row-major `[N, K]` matrix, or one row (a loader's row view).

use crate::awq::AwqView;
use crate::block_decode::decode_blocks;
use crate::components::{ComponentBytes, ComponentSpec, MatrixShape, Presence};
use crate::fp4::Fp4View;
use crate::fp8::Fp8View;
use crate::gptq::GptqView;
use crate::{BlockFormat, FormatError, PackedFormat};

impl PackedFormat {
    /// Decodes the whole `shape` matrix, row-major, into `out` (`N * K` values). `parts` holds
    /// the components by name ([`PackedFormat::components`]); each must have exactly the bytes
    /// the shape needs, and names the format does not use are ignored.
    pub fn decode_matrix(
        &self,
        shape: MatrixShape,
        parts: &[ComponentBytes<'_>],
        out: &mut [f32],
    ) -> Result<(), FormatError> {
        let view = View::bind(*self, shape, parts)?;
        let expected_elems = shape.n_elems().ok_or(FormatError::SizeOverflow {
            format: *self,
            n_rows: shape.n_rows,
            k_cols: shape.k_cols,
        })?;
        if out.len() != expected_elems {
            return Err(FormatError::OutputLength {
                expected_elems,
                got_elems: out.len(),
            });
        }
        if shape.k_cols == 0 {
            return Ok(());
        }
        for (row, y) in out.chunks_exact_mut(shape.k_cols).enumerate() {
            view.decode_row(row, y)?;
        }
        Ok(())
    }

    /// Decodes row `row` (output feature `row`, `K` values) of the `shape` matrix into `out`.
    pub fn decode_row(
        &self,
        shape: MatrixShape,
        parts: &[ComponentBytes<'_>],
        row: usize,
        out: &mut [f32],
    ) -> Result<(), FormatError> {
        let view = View::bind(*self, shape, parts)?;
        if row >= shape.n_rows {
            return Err(FormatError::RowOutOfRange {
                row,
                n_rows: shape.n_rows,
            });
        }
        if out.len() != shape.k_cols {
            return Err(FormatError::OutputLength {
                expected_elems: shape.k_cols,
                got_elems: out.len(),
            });
        }
        view.decode_row(row, out)
    }
}

/// A format's components, found by name and checked against the shape's byte sizes.
pub(crate) struct Bound<'a> {
    format: PackedFormat,
    slices: Vec<(ComponentSpec, Option<&'a [u8]>)>,
}

impl<'a> Bound<'a> {
    fn new(
        format: PackedFormat,
        shape: MatrixShape,
        parts: &[ComponentBytes<'a>],
    ) -> Result<Bound<'a>, FormatError> {
        let mut slices = Vec::new();
        for spec in format.components(shape)? {
            let found = parts.iter().find(|p| p.name == spec.name).map(|p| p.bytes);
            match found {
                None if spec.presence == Presence::Required => {
                    return Err(FormatError::MissingComponent {
                        format,
                        component: spec.name,
                    });
                }
                None => {}
                Some(bytes) => {
                    let expected_bytes = spec.n_bytes().ok_or(FormatError::SizeOverflow {
                        format,
                        n_rows: shape.n_rows,
                        k_cols: shape.k_cols,
                    })?;
                    if bytes.len() != expected_bytes {
                        return Err(FormatError::ComponentBytes {
                            format,
                            component: spec.name,
                            expected_bytes,
                            got_bytes: bytes.len(),
                        });
                    }
                }
            }
            slices.push((spec, found));
        }
        Ok(Bound { format, slices })
    }

    /// The bytes of a component, present or not.
    pub(crate) fn optional(&self, name: &'static str) -> Option<&'a [u8]> {
        self.slices
            .iter()
            .find(|(spec, _)| spec.name == name)
            .and_then(|(_, bytes)| *bytes)
    }

    /// The bytes of a component the format requires.
    pub(crate) fn required(&self, name: &'static str) -> Result<&'a [u8], FormatError> {
        self.optional(name).ok_or(FormatError::MissingComponent {
            format: self.format,
            component: name,
        })
    }
}

/// A format's components, ready to decode rows.
enum View<'a> {
    Block {
        format: BlockFormat,
        weight: &'a [u8],
        row_bytes: usize,
        n_rows: usize,
    },
    Gptq(GptqView<'a>),
    Awq(AwqView<'a>),
    Fp8(Fp8View<'a>),
    Fp4(Fp4View<'a>),
}

impl<'a> View<'a> {
    fn bind(
        format: PackedFormat,
        shape: MatrixShape,
        parts: &[ComponentBytes<'a>],
    ) -> Result<View<'a>, FormatError> {
        let bound = Bound::new(format, shape, parts)?;
        Ok(match format {
            PackedFormat::Block(b) => View::Block {
                format: b,
                weight: bound.required("weight")?,
                // components() has checked that K is whole blocks and the size fits.
                row_bytes: b.row_bytes(shape.k_cols).unwrap_or(0),
                n_rows: shape.n_rows,
            },
            PackedFormat::Gptq(p) => View::Gptq(GptqView::new(format, p, shape, &bound)?),
            PackedFormat::Awq(p) => View::Awq(AwqView::new(p, shape, &bound)?),
            PackedFormat::Fp8(p) => View::Fp8(Fp8View::new(p, shape, &bound)?),
            PackedFormat::Fp4E2M1 => View::Fp4(Fp4View::new(shape, &bound)?),
        })
    }

    /// Decodes row `row` (in range) into `out` (`K` values).
    fn decode_row(&self, row: usize, out: &mut [f32]) -> Result<(), FormatError> {
        match self {
            View::Block {
                format,
                weight,
                row_bytes,
                n_rows,
            } => {
                let start = row * row_bytes;
                let bytes =
                    weight
                        .get(start..start + row_bytes)
                        .ok_or(FormatError::RowOutOfRange {
                            row,
                            n_rows: *n_rows,
                        })?;
                decode_blocks(*format, bytes, out)
            }
            View::Gptq(v) => v.decode_row(row, out),
            View::Awq(v) => {
                v.decode_row(row, out);
                Ok(())
            }
            View::Fp8(v) => {
                v.decode_row(row, out);
                Ok(())
            }
            View::Fp4(v) => {
                v.decode_row(row, out);
                Ok(())
            }
        }
    }
}
