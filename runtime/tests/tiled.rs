//! The integer path on the host: the tile kernels of this build (the
//! portable module here; the boards run theirs through the `kernels`
//! firmware, `cargo xtask test-boards`) against the element-by-element
//! reference, bit for bit: random values over the whole int8/int4 range
//! (-128 and -8 included), extreme values, shapes from one row to several
//! row blocks with padding rows, one group per row or many, activation
//! slices at odd offsets, and the activation quantizer's contract.

use ferrite::kernels::generic::{matvec_tiled_i4, matvec_tiled_i8};
use ferrite::kernels::tiled::{
    self, i4_offset, i8_offset, padded_rows, QVec, TiledI4, TiledI8, ACT_BYTES_PER_COL,
};
use ferrite::kernels::{arch, portable};
use ferrite::tensor::{ActBuf, Tensor, TensorData};
use proptest::prelude::*;

/// A tiled matrix case: logical values row-major, encoded on demand.
#[derive(Clone, Debug)]
struct Case {
    rows: usize,
    cols: usize,
    group: usize,
    /// Integer values, row-major `[rows, cols]`.
    q: Vec<i8>,
    /// Per padded row.
    d: Vec<f32>,
    /// Per padded row and group.
    m: Vec<u8>,
    /// Quantized activations and their scale.
    x: Vec<i8>,
    scale: f32,
}

impl Case {
    /// The case's weights as the int8 tiled kernel takes them (`payload`:
    /// [`Case::i8_payload`]).
    fn tiled_i8<'a>(&'a self, payload: &'a [i8]) -> TiledI8<'a> {
        TiledI8 {
            rows: self.rows,
            cols: self.cols,
            group: self.group,
            q: payload,
            row_scales: &self.d,
            mults: &self.m,
        }
    }

    /// The same for int4 (`payload`: [`Case::i4_payload`]).
    fn tiled_i4<'a>(&'a self, payload: &'a [u8]) -> TiledI4<'a> {
        TiledI4 {
            rows: self.rows,
            cols: self.cols,
            group: self.group,
            q: payload,
            row_scales: &self.d,
            mults: &self.m,
        }
    }

    /// The case's activations (`wide`: [`prepared`] from them).
    fn qvec<'a>(&'a self, wide: &'a [i16]) -> QVec<'a> {
        QVec {
            q: &self.x,
            wide,
            scale: self.scale,
        }
    }

    fn i8_payload(&self) -> Vec<i8> {
        let mut p = vec![0i8; padded_rows(self.rows) * self.cols];
        for r in 0..self.rows {
            for c in 0..self.cols {
                p[i8_offset(r, c, self.cols)] = self.q[r * self.cols + c];
            }
        }
        p
    }

    fn i4_payload(&self) -> Vec<u8> {
        let mut p = vec![0u8; padded_rows(self.rows) * self.cols / 2];
        for r in 0..self.rows {
            for c in 0..self.cols {
                let (byte, high) = i4_offset(r, c, self.cols);
                let nib = self.q[r * self.cols + c] as u8 & 0x0F;
                p[byte] |= if high { nib << 4 } else { nib };
            }
        }
        p
    }
}

/// Activations prepared as the session prepares them (`QVec::wide` in the
/// order this build's kernels read).
fn prepared(x: &[i8]) -> Vec<i16> {
    let mut wide = vec![0i16; if arch::WIDE { x.len() } else { 0 }];
    arch::prepare(x, &mut wide);
    wide
}

fn case(qlo: i8, qhi: i8) -> impl Strategy<Value = Case> {
    (1usize..=13, 1usize..=6, 0usize..4).prop_flat_map(move |(rows, tiles, gsel)| {
        let cols = 16 * tiles;
        // Groups: one per row, or any multiple of 16 dividing the columns.
        let divisors: Vec<usize> = (1..=tiles).filter(|t| tiles % t == 0).collect();
        let group = 16 * divisors[gsel % divisors.len()];
        let prows = padded_rows(rows);
        let groups = cols / group;
        (
            proptest::collection::vec(qlo..=qhi, rows * cols),
            proptest::collection::vec(-2.0f32..2.0, prows),
            proptest::collection::vec(any::<u8>(), prows * groups),
            proptest::collection::vec(-127i8..=127, cols),
            0.0f32..0.1,
        )
            .prop_map(move |(q, d, m, x, scale)| Case {
                rows,
                cols,
                group,
                q,
                d,
                m,
                x,
                scale,
            })
    })
}

fn same_bits(got: &[f32], want: &[f32]) -> Result<(), TestCaseError> {
    for (r, (g, w)) in got.iter().zip(want).enumerate() {
        prop_assert_eq!(g.to_bits(), w.to_bits(), "row {}: {} vs {}", r, g, w);
    }
    Ok(())
}

fn check_i8(c: &Case) -> Result<(), TestCaseError> {
    let payload = c.i8_payload();
    let wide = prepared(&c.x);
    let w = c.tiled_i8(&payload);
    let x = c.qvec(&wide);
    let (mut got, mut want) = (vec![f32::NAN; c.rows], vec![f32::NAN; c.rows]);
    tiled::matvec_i8(&w, &x, &mut got);
    matvec_tiled_i8(&w, &x, &mut want);
    same_bits(&got, &want)?;
    // The same through a validated tensor view.
    let t = Tensor::new(c.rows, c.cols, TensorData::TiledI8(w)).unwrap();
    prop_assert!(t.is_tiled());
    for r in 0..c.rows {
        for col in 0..c.cols {
            let v = c.q[r * c.cols + col] as f32
                * (c.d[r] * c.m[r * (c.cols / c.group) + col / c.group] as f32);
            prop_assert_eq!(t.at(r * c.cols + col).to_bits(), v.to_bits());
        }
    }
    Ok(())
}

fn check_i4(c: &Case) -> Result<(), TestCaseError> {
    let payload = c.i4_payload();
    let wide = prepared(&c.x);
    let w = c.tiled_i4(&payload);
    let x = c.qvec(&wide);
    let (mut got, mut want) = (vec![f32::NAN; c.rows], vec![f32::NAN; c.rows]);
    tiled::matvec_i4(&w, &x, &mut got);
    matvec_tiled_i4(&w, &x, &mut want);
    same_bits(&got, &want)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn int8_tiles_match_the_reference(c in case(-128, 127)) {
        check_i8(&c)?;
    }

    #[test]
    fn int4_tiles_match_the_reference(c in case(-8, 7)) {
        check_i4(&c)?;
    }

    /// The portable kernel at any byte offset of a buffer (the fast
    /// modules refuse misaligned slices and fall back to it).
    #[test]
    fn portable_kernel_reads_misaligned_slices(c in case(-128, 127), offset in 0usize..4) {
        let payload = c.i8_payload();
        let mut buf = vec![0i8; payload.len() + 4];
        buf[offset..offset + payload.len()].copy_from_slice(&payload);
        let tiles = &buf[offset..offset + 64 * c.cols / 16];
        let mut xbuf = vec![0i8; c.cols + 4];
        xbuf[offset..offset + c.cols].copy_from_slice(&c.x);
        let x = QVec { q: &xbuf[offset..offset + c.cols], wide: &[], scale: 1.0 };
        let got = portable::dot4_i8(tiles, &x);
        for (r, &g) in got.iter().enumerate() {
            let want: i32 = (0..c.cols)
                .map(|col| {
                    let v = if r < c.rows { c.q[r * c.cols + col] } else { 0 };
                    i32::from(v) * i32::from(c.x[col])
                })
                .sum();
            prop_assert_eq!(g, want);
        }
    }

    /// `quantize`: |q| <= 127, the scale is max|x| / 127, and each q is the
    /// exact quotient 127 x / max|x| rounded half away from zero (f64
    /// computes that quotient with one rounding that cannot move a value
    /// across a half: 127 x is exact and the quotient's distance to a half
    /// is far above f64's precision). Values span magnitudes down to
    /// subnormals.
    #[test]
    fn activations_quantize_to_the_nearest_step(
        x in proptest::collection::vec(
            prop_oneof![-1e3f32..1e3, -1e-3f32..1e-3, -1e-40f32..1e-40, Just(0.0f32)],
            1..300,
        )
    ) {
        let mut q = vec![0i8; x.len()];
        let scale = tiled::quantize(&x, &mut q);
        let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        prop_assert_eq!(scale.to_bits(), (amax / 127.0).to_bits());
        for (&xi, &qi) in x.iter().zip(&q) {
            let want = if amax == 0.0 {
                0.0
            } else {
                (127.0 * xi as f64 / amax as f64).round()
            };
            prop_assert_eq!(qi as f64, want, "x {} max {}", xi, amax);
        }
    }
}

#[test]
fn quantize_rounds_ties_away_from_zero() {
    // 127 * 1 / 254 = 0.5 and 127 * 3 / 254 = 1.5: ties go away from zero.
    let mut q = [0i8; 5];
    tiled::quantize(&[1.0, -1.0, 3.0, -3.0, 254.0], &mut q);
    assert_eq!(q, [1, -1, 2, -2, 127]);
}

#[test]
fn extremes_match_the_reference() {
    // Every weight -128 (int4: -8) against activations of -127, 127 and -128
    // (the kernels must take all of i8), one group per row and the largest
    // group the layout allows; and every multiplier 255.
    for (rows, cols, group) in [(4, 16, 16), (5, 64, 16), (7, 4096, 4096), (1, 256, 64)] {
        for xv in [-127i8, 127, -128] {
            let prows = padded_rows(rows);
            let c = Case {
                rows,
                cols,
                group,
                q: vec![-128; rows * cols],
                d: vec![1.0; prows],
                m: vec![255; prows * (cols / group)],
                x: vec![xv; cols],
                scale: 1.0,
            };
            check_i8(&c).unwrap();
            let c4 = Case {
                q: vec![-8; rows * cols],
                ..c
            };
            check_i4(&c4).unwrap();
        }
    }
    // -128 x -128 summed over 4096 columns is exact: 4096 * 16384 * 255.
    let c = Case {
        rows: 4,
        cols: 4096,
        group: 4096,
        q: vec![-128; 4 * 4096],
        d: vec![1.0; 4],
        m: vec![255; 4],
        x: vec![-128; 4096],
        scale: 1.0,
    };
    let payload = c.i8_payload();
    let wide = prepared(&c.x);
    let w = TiledI8 {
        rows: 4,
        cols: 4096,
        group: 4096,
        q: &payload,
        row_scales: &c.d,
        mults: &c.m,
    };
    let mut y = [0.0f32; 4];
    tiled::matvec_i8(
        &w,
        &QVec {
            q: &c.x,
            wide: &wide,
            scale: 1.0,
        },
        &mut y,
    );
    assert_eq!(y, [(4096i64 * 16384 * 255) as f32; 4]);
}

#[test]
fn nan_and_zero_activations_reach_the_output_as_on_the_f32_path() {
    let mut q = [0i8; 4];
    assert_eq!(tiled::quantize(&[0.0; 4], &mut q), 0.0);
    assert_eq!(q, [0; 4]);
    assert!(tiled::quantize(&[1.0, f32::NAN, 2.0, 0.0], &mut q).is_nan());
    assert!(tiled::quantize(&[1.0, f32::INFINITY, 2.0, 0.0], &mut q).is_infinite());
}

#[test]
fn the_activation_buffer_prepares_inputs_and_refuses_wider_ones() {
    let mut words = vec![0.0f32; ActBuf::words_for(32)];
    assert!(words.len() * 4 >= 32 * ACT_BYTES_PER_COL);
    let mut act = ActBuf::new(&mut words, true);
    let x: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
    let input = act.input(&x).unwrap();
    let qv = input.quantized().unwrap();
    assert_eq!(qv.q.len(), 32);
    assert_eq!(qv.scale, 21.0 / 127.0);
    assert_eq!(qv.q[31], 127);

    let wide = vec![0.0f32; 33];
    assert!(act.input(&wide).is_err());
    // Disabled: the f32 values only.
    let mut none: [f32; 0] = [];
    let mut off = ActBuf::new(&mut none, false);
    assert!(off.input(&x).unwrap().quantized().is_none());
}

#[test]
fn quantize_is_exact_near_halves() {
    // Values whose exact quotient 127 x / max lies at or within a hair of a
    // half: the f32 product may land on either side, the result may not.
    let amax = 1.2345678f32;
    let mut xs = vec![amax];
    for k in 0..127u32 {
        let tie = (k as f64 + 0.5) * amax as f64 / 127.0;
        let t = tie as f32;
        for n in [-3i32, -2, -1, 0, 1, 2, 3] {
            let v = f32::from_bits((t.to_bits() as i32 + n) as u32);
            xs.push(v);
            xs.push(-v);
        }
    }
    let mut q = vec![0i8; xs.len()];
    tiled::quantize(&xs, &mut q);
    for (&x, &qi) in xs.iter().zip(&q) {
        let want = (127.0 * x as f64 / amax as f64).round();
        assert_eq!(qi as f64, want, "x {x}");
    }
}

/// Deterministic values for the fixed cases below (xorshift64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn int(&mut self, lo: i32, hi: i32) -> i32 {
        lo + (self.next() % (hi - lo + 1) as u64) as i32
    }
}

/// A case of random values (`q` in `qlo..=qhi`, `x` in -127..=127, every
/// multiplier and scale drawn) of the given shape.
fn random_case(
    rng: &mut Rng,
    (rows, cols, group): (usize, usize, usize),
    qlo: i32,
    qhi: i32,
) -> Case {
    let prows = padded_rows(rows);
    Case {
        rows,
        cols,
        group,
        q: (0..rows * cols).map(|_| rng.int(qlo, qhi) as i8).collect(),
        d: (0..prows)
            .map(|_| rng.int(-1000, 1000) as f32 / 512.0)
            .collect(),
        m: (0..prows * (cols / group))
            .map(|_| rng.int(0, 255) as u8)
            .collect(),
        x: (0..cols).map(|_| rng.int(-127, 127) as i8).collect(),
        scale: 0.0123,
    }
}

/// The least right shift that brings `qmax * 127 * 255 * cols` (the
/// largest magnitude of a row total of `totals_i8` / `totals_i4`) below
/// 2^31, found one bit at a time.
fn least_fitting_shift(cols: usize, qmax: u128) -> u32 {
    let bound = qmax * 127 * 255 * cols as u128;
    let mut shift = 0;
    while bound >> shift >= 1 << 31 {
        shift += 1;
    }
    shift
}

#[test]
fn total_shift_is_the_least_that_keeps_row_totals_in_an_i32() {
    for cols in (16..=65536).step_by(16) {
        assert_eq!(
            tiled::total_shift(cols, 128),
            least_fitting_shift(cols, 128),
            "int8, {cols}"
        );
        assert_eq!(
            tiled::total_shift(cols, 8),
            least_fitting_shift(cols, 8),
            "int4, {cols}"
        );
    }
    // Int8 needs none up to 512 columns, int4 up to 8288.
    assert_eq!(tiled::total_shift(512, 128), 0);
    assert_eq!(tiled::total_shift(528, 128), 1);
    assert_eq!(tiled::total_shift(4096, 128), 3);
    assert_eq!(tiled::total_shift(8288, 8), 0);
    assert_eq!(tiled::total_shift(8304, 8), 1);
}

/// What `totals_i8` / `totals_i4` must give, written out: per row,
/// `Σ_g m[r][g] Σ_{c in g} W[r][c] x[c]` in i64, shifted right by
/// [`least_fitting_shift`]; and that shift.
fn expected_totals(c: &Case, qmax: u128) -> (Vec<i32>, u32) {
    let groups = c.cols / c.group;
    let shift = least_fitting_shift(c.cols, qmax);
    let totals = (0..c.rows)
        .map(|r| {
            let total: i64 = (0..groups)
                .map(|g| {
                    let sum: i64 = (g * c.group..(g + 1) * c.group)
                        .map(|col| i64::from(c.q[r * c.cols + col]) * i64::from(c.x[col]))
                        .sum();
                    i64::from(c.m[r * groups + g]) * sum
                })
                .sum();
            i32::try_from(total >> shift).unwrap()
        })
        .collect();
    (totals, shift)
}

/// The integer token path's products: one group per row with no shift
/// (the whole-block call: whole blocks and a partial one), several groups
/// (groups of 16, and wider than a tile), and widths that need a shift,
/// with random values and with every weight, activation and multiplier at
/// its extreme; `out` starts as garbage, so each row must be written.
#[test]
fn integer_totals_are_the_exact_group_sums_shifted() {
    let shapes = [
        (1, 16, 16),
        (3, 32, 32),
        (4, 16, 16),
        (8, 64, 64),
        (13, 512, 512),
        (5, 64, 16),
        (9, 128, 32),
        (6, 96, 48),
        (7, 1024, 1024),
        (6, 1024, 256),
        (4, 4096, 4096),
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for shape in shapes {
        for c in &random_and_extreme(&mut rng, shape, -128, 127) {
            let payload = c.i8_payload();
            let wide = prepared(&c.x);
            let w = c.tiled_i8(&payload);
            let x = c.qvec(&wide);
            let mut out = vec![0x5a5a_5a5a; c.rows];
            let shift = tiled::totals_i8(&w, &x, &mut out);
            let (want, want_shift) = expected_totals(c, 128);
            assert_eq!((out, shift), (want, want_shift), "int8 {shape:?}");
        }
    }
    // Int4: as int8, and 8320 columns (groups of 2080), the first width
    // past 8288 where its totals need a shift.
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for shape in shapes.into_iter().chain([(2, 8320, 2080)]) {
        for c in &random_and_extreme(&mut rng, shape, -8, 7) {
            let payload = c.i4_payload();
            let wide = prepared(&c.x);
            let w = c.tiled_i4(&payload);
            let x = c.qvec(&wide);
            let mut out = vec![0x5a5a_5a5a; c.rows];
            let shift = tiled::totals_i4(&w, &x, &mut out);
            let (want, want_shift) = expected_totals(c, 8);
            assert_eq!((out, shift), (want, want_shift), "int4 {shape:?}");
        }
    }
}

/// A random case of `shape` with weights in `qlo..=qhi`, and the same shape
/// at the extremes: every weight `qlo`, every multiplier 255, every
/// activation -127.
fn random_and_extreme(
    rng: &mut Rng,
    shape: (usize, usize, usize),
    qlo: i32,
    qhi: i32,
) -> [Case; 2] {
    let random = random_case(rng, shape, qlo, qhi);
    let extreme = Case {
        q: vec![qlo as i8; shape.0 * shape.1],
        m: vec![255; random.m.len()],
        x: vec![-127; shape.1],
        ..random.clone()
    };
    [random, extreme]
}

/// `y` shorter than the matrix's rows: the rows it has, as the reference
/// computes them, and no panic (`matvec_i8`'s whole-block call is bounded by
/// `y` too).
#[test]
fn a_short_output_gets_the_rows_it_has() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for shape in [(8, 32, 32), (12, 64, 64), (9, 64, 16)] {
        let c = random_case(&mut rng, shape, -128, 127);
        let payload = c.i8_payload();
        let wide = prepared(&c.x);
        let w = c.tiled_i8(&payload);
        let x = c.qvec(&wide);
        let mut want = vec![f32::NAN; c.rows];
        matvec_tiled_i8(&w, &x, &mut want);
        for len in 0..c.rows {
            let mut y = vec![f32::NAN; len];
            tiled::matvec_i8(&w, &x, &mut y);
            same_bits(&y, &want[..len]).unwrap();
        }
    }
}

#[test]
fn a_nan_or_an_infinity_gives_zero_steps() {
    for bad in [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let x = [1.0, bad, -3e38, 2.0, 0.0, 1e-40];
        let mut q = [5i8; 6];
        let scale = tiled::quantize(&x, &mut q);
        assert_eq!(q, [0; 6], "{bad}");
        assert_eq!(scale.is_nan(), bad.is_nan());
        assert!(scale.is_nan() || scale == f32::INFINITY);
    }
}

/// Maxima below `127 / f32::MAX` (about 3.7e-37), where `127 / max`
/// overflows and every value takes the exact integer route even with an
/// FPU: subnormal and normal maxima, values of both signs, and at the
/// subnormal maximum 254 * 2^-149 every quotient `k / 2` (ties away from
/// zero), against the quotient in f64.
#[test]
fn tiny_maxima_quantize_exactly() {
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    for abits in [
        0x0000_00fe_u32,
        0x0000_0001,
        0x0012_3457,
        0x007f_ffff,
        0x0080_0000,
        0x0234_5678,
        0x02fc_0000,
    ] {
        let amax = f32::from_bits(abits);
        assert!(!(127.0 / amax).is_finite(), "{amax:e}");
        let mut x = vec![amax, -amax];
        for k in 0..=abits.min(254) {
            x.push(f32::from_bits(k));
            x.push(-f32::from_bits(k));
        }
        for _ in 0..200 {
            let v = f32::from_bits((rng.next() % (u64::from(abits) + 1)) as u32);
            x.push(if rng.next() & 1 == 0 { v } else { -v });
        }
        let mut q = vec![0i8; x.len()];
        let scale = tiled::quantize(&x, &mut q);
        assert_eq!(scale.to_bits(), (amax / 127.0).to_bits());
        for (&xi, &qi) in x.iter().zip(&q) {
            let want = (127.0 * f64::from(xi) / f64::from(amax)).round();
            assert_eq!(f64::from(qi), want, "x {xi:e} max {amax:e}");
        }
    }
}

/// Values whose f32 product `x * (127 / max)` lands below a half that the
/// exact quotient reaches, in a vector with no value near an integer step
/// (`max * (127 / max)` is 126.99999 here): the exact route must still
/// decide them.
#[test]
fn a_product_just_below_a_half_is_decided_exactly() {
    let amax = f32::from_bits(0x404b_15e4); // 3.1732111
    let inv = 127.0 / amax;
    assert!(amax * inv < 127.0);
    for (xbits, step) in [(0x3fc7_e327_u32, 63i8), (0x3fcb_15e4, 64)] {
        let x = f32::from_bits(xbits);
        let exact = 127.0 * f64::from(x) / f64::from(amax);
        assert!(exact >= f64::from(step) - 0.5 && exact < f64::from(step) - 0.5 + 1e-6);
        assert!(
            x * inv < f32::from(step) - 0.5,
            "the f32 product rounds down"
        );
        let mut q = [0i8; 3];
        tiled::quantize(&[amax, x, -x], &mut q);
        assert_eq!(q, [127, step, -step], "x {x}");
    }
}
