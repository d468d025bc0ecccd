//! Every GGUF block format's decode against gguf-py's numpy dequantization
//! (`gguf.quants.dequantize`) of the same random blocks, bit for bit.

mod common;

use common::{assert_bits_eq, hex, read_arrays, sha256_f32};
use poot_formats::{BlockFormat, GgmlType, MatrixShape, decode_block_row, decode_blocks};

fn check_format(format: BlockFormat) -> (usize, usize) {
    let arrays = read_arrays(&format!("gguf_blocks/{}.bin", format.name()));
    let meta = arrays["meta"].u32s();
    let (ggml_id, n_wild, n_full) = (meta[0], meta[1] as usize, meta[2] as usize);
    assert_eq!(GgmlType::from_id(ggml_id), Some(format.ggml_type()));
    let blocks = &arrays["blocks"];
    assert_eq!(blocks.dims, vec![blocks.dims[0], format.block_bytes()]);
    let n_blocks = blocks.dims[0];
    let elems = format.block_elems();

    let mut out = vec![0f32; n_blocks * elems];
    decode_blocks(format, &blocks.bytes, &mut out).expect("whole blocks");

    // Full reference values: all wild blocks (NaN positions must match) and the first tame ones.
    let want = arrays["decoded"].f32s();
    assert_eq!(want.len(), n_full * elems);
    let compared = assert_bits_eq(format.name(), &out[..n_full * elems], &want);
    assert!(
        out[n_wild * elems..].iter().all(|v| v.is_finite()),
        "{format:?}: tame blocks decode finite"
    );

    // The rest by SHA-256 of each block's f32 bytes.
    let hashes = &arrays["decoded_sha256"].bytes;
    for block in n_full..n_blocks {
        let got = sha256_f32(&out[block * elems..(block + 1) * elems]);
        let want = &hashes[block * 32..(block + 1) * 32];
        assert_eq!(
            hex(&got),
            hex(want),
            "{format:?}: block {block} differs from gguf-py"
        );
    }

    // Row decode over the same bytes viewed as a matrix of 4-block rows.
    let blocks_per_row = 4;
    let n_rows = n_blocks / blocks_per_row;
    let shape = MatrixShape::new(n_rows, blocks_per_row * elems);
    let used = n_rows * blocks_per_row * format.block_bytes();
    let mut row_out = vec![0f32; shape.k_cols];
    for row in [0, n_rows / 2, n_rows - 1] {
        decode_block_row(format, shape, &blocks.bytes[..used], row, &mut row_out)
            .expect("row in range");
        let whole = &out[row * shape.k_cols..(row + 1) * shape.k_cols];
        assert_bits_eq(&format!("{format:?} row {row}"), &row_out, whole);
    }
    (compared, n_blocks)
}

#[test]
fn every_block_format_matches_gguf_py() {
    let mut total_blocks = 0;
    for format in BlockFormat::ALL {
        let (values, blocks) = check_format(format);
        eprintln!(
            "{:8} {blocks} blocks ({values} values compared element-wise)",
            format.name()
        );
        total_blocks += blocks;
    }
    assert!(total_blocks > 16 * 150);
}
