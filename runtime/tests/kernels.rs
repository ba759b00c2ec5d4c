//! Every quantized kernel against the dense f32 kernel over the dequantized
//! weights (`W_hat[r][c] = q[r][c] * scale[r][c / group]`), and every
//! embedding-row decode against the same dequantization: random shapes,
//! values, scales and inputs, plus the edge lengths (one row, one group, the
//! smallest and largest group sizes the tools write).

use ferrite::kernels::generic::{matvec_f16, matvec_f32, matvec_i4, matvec_i8};
use ferrite::tensor::{Tensor, TensorData};
use half::f16;
use proptest::prelude::*;

/// A quantized matrix case: `rows x cols`, `cols = group * groups`.
#[derive(Clone, Debug)]
struct Case {
    rows: usize,
    cols: usize,
    group: usize,
    /// Integer values (in the dtype's range), row-major.
    q: Vec<i8>,
    /// One scale per group, `[rows, cols / group]`.
    scales: Vec<f32>,
    /// Input vector `[cols]`.
    x: Vec<f32>,
}

impl Case {
    fn dequantized(&self) -> Vec<f32> {
        self.q
            .iter()
            .enumerate()
            .map(|(i, &v)| v as f32 * self.scales[i / self.group])
            .collect()
    }

    /// int4 packing of the format: two per byte, low nibble first.
    fn packed_i4(&self) -> Vec<u8> {
        self.q
            .chunks_exact(2)
            .map(|p| (p[0] as u8 & 0x0F) | ((p[1] as u8) << 4))
            .collect()
    }
}

/// Group sizes: the tools' (8..=128) plus small even edge cases.
const GROUPS: [usize; 8] = [2, 4, 8, 16, 32, 64, 128, 6];

fn case(lo: i8, hi: i8) -> impl Strategy<Value = Case> {
    (1usize..=5, 1usize..=4, 0usize..GROUPS.len()).prop_flat_map(move |(rows, groups, gi)| {
        let group = GROUPS[gi];
        let cols = group * groups;
        (
            proptest::collection::vec(lo..=hi, rows * cols),
            proptest::collection::vec(-2.0f32..2.0, rows * groups),
            proptest::collection::vec(-8.0f32..8.0, cols),
        )
            .prop_map(move |(q, scales, x)| Case {
                rows,
                cols,
                group,
                q,
                scales,
                x,
            })
    })
}

/// `|got - want| <= 1e-5 * sum |w x| + 1e-6`, per output row: the kernels may
/// sum in another order than the dense reference.
fn assert_close(got: &[f32], want: &[f32], w: &[f32], x: &[f32]) -> Result<(), TestCaseError> {
    let cols = x.len();
    for (r, (g, e)) in got.iter().zip(want).enumerate() {
        let mag: f32 = w[r * cols..(r + 1) * cols]
            .iter()
            .zip(x)
            .map(|(a, b)| (a * b).abs())
            .sum();
        prop_assert!(
            (g - e).abs() <= 1e-5 * mag + 1e-6,
            "row {r}: kernel {g} vs dense {e} (sum|wx| {mag})"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn int8_matvec_matches_dense(c in case(-127, 127)) {
        let w = c.dequantized();
        let (mut got, mut want) = (vec![0.0; c.rows], vec![0.0; c.rows]);
        matvec_i8(&c.q, &c.scales, c.cols, c.group, &c.x, &mut got);
        matvec_f32(&w, c.cols, &c.x, &mut want);
        assert_close(&got, &want, &w, &c.x)?;
    }

    #[test]
    fn int4_matvec_matches_dense(c in case(-8, 7)) {
        let w = c.dequantized();
        let (mut got, mut want) = (vec![0.0; c.rows], vec![0.0; c.rows]);
        matvec_i4(&c.packed_i4(), &c.scales, c.cols, c.group, &c.x, &mut got);
        matvec_f32(&w, c.cols, &c.x, &mut want);
        assert_close(&got, &want, &w, &c.x)?;
    }

    #[test]
    fn f16_matvec_matches_dense(
        (rows, cols, bits, x) in (1usize..=5, 1usize..=70).prop_flat_map(|(r, c)| (
            Just(r),
            Just(c),
            proptest::collection::vec(any::<u16>(), r * c),
            proptest::collection::vec(-8.0f32..8.0, c),
        ))
    ) {
        // Finite f16 values only (the tools never write inf/NaN).
        let h: Vec<f16> = bits
            .iter()
            .map(|&b| f16::from_bits(b))
            .map(|v| if v.is_finite() { v } else { f16::ONE })
            .collect();
        let w: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let (mut got, mut want) = (vec![0.0; rows], vec![0.0; rows]);
        matvec_f16(&h, cols, &x, &mut got);
        matvec_f32(&w, cols, &x, &mut want);
        assert_close(&got, &want, &w, &x)?;
    }

    #[test]
    fn embedding_rows_decode_for_every_dtype(c in case(-8, 7)) {
        let w = c.dequantized();
        let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let h_w: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let packed = c.packed_i4();
        let tensors = [
            (Tensor::new(c.rows, c.cols, TensorData::F32(&w)).unwrap(), &w),
            (Tensor::new(c.rows, c.cols, TensorData::F16(&h)).unwrap(), &h_w),
            (
                Tensor::new(c.rows, c.cols, TensorData::I8 { q: &c.q, scales: &c.scales, group: c.group }).unwrap(),
                &w,
            ),
            (
                Tensor::new(c.rows, c.cols, TensorData::I4 { q: &packed, scales: &c.scales, group: c.group }).unwrap(),
                &w,
            ),
        ];
        for (t, dense) in &tensors {
            for r in 0..c.rows {
                let mut row = vec![f32::NAN; c.cols];
                t.row_into(r, &mut row);
                // Decoding is exact: one multiply per element in every path.
                prop_assert_eq!(&row[..], &dense[r * c.cols..(r + 1) * c.cols]);
                for (col, v) in row.iter().enumerate() {
                    prop_assert_eq!(*v, t.at(r * c.cols + col));
                }
            }
            // Out of range rows leave the output untouched; `at` returns 0.
            let mut row = vec![1.5f32; c.cols];
            t.row_into(c.rows, &mut row);
            prop_assert!(row.iter().all(|&v| v == 1.5));
            prop_assert_eq!(t.at(c.rows * c.cols), 0.0);
        }
    }
}

#[test]
fn int4_nibble_order_and_extremes() {
    // One row, one group of 4: values -8, 7, -1, 0 with scale 1.
    let packed = [0x78u8, 0x0F];
    let mut y = [0.0f32];
    matvec_i4(&packed, &[1.0], 4, 4, &[1.0, 10.0, 100.0, 1000.0], &mut y);
    assert_eq!(y[0], -8.0 + 70.0 - 100.0);
    let q = [-127i8, 127, -128, 0];
    matvec_i8(&q, &[0.5], 4, 4, &[1.0, 1.0, 1.0, 1.0], &mut y);
    assert_eq!(y[0], 0.5 * (-127.0 + 127.0 - 128.0));
}
