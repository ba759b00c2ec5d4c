//! Host throughput of `Session::feed` (one token through the whole model) for
//! one fixture of each mixer family and a hybrid, f32 and int8 weights.
//! Run: `cargo bench -p ferrite-tests --bench feed`; results in docs/benchmarks.md.

use criterion::{criterion_group, criterion_main, Criterion};
use ferrite::image::DType;
use ferrite::Session;
use ferrite_tests::{fixtures_dir, image_of};
use ferrite_tools::run::session_buffer;
use ferrite_tools::writer::WriteOptions;

const FIXTURES: &[&str] = &[
    "gdn_gate",
    "gsa_swish_gqa",
    "swa_sinks_cache",
    "bla_fejer_gated_conv",
    "hybrid_all4_untied",
];

fn feed(c: &mut Criterion) {
    let mut group = c.benchmark_group("feed");
    for name in FIXTURES {
        for (label, dtype) in [("f32", DType::F32), ("int8", DType::I8)] {
            let opts = WriteOptions {
                dtype,
                group_size: Some(16),
                ..WriteOptions::default()
            };
            let image = image_of(&fixtures_dir().join(name), &opts);
            let model = image.model().expect("fixture image loads");
            let mut buf = session_buffer(&model, 0).expect("buffer size");
            let mut session = Session::new(model, &mut buf).expect("buffer fits");
            let mut token = 0u32;
            group.bench_function(format!("{name}/{label}"), |b| {
                b.iter(|| {
                    token = (token * 31 + 7) % 256;
                    std::hint::black_box(session.feed(token).expect("valid token")[0])
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, feed);
criterion_main!(benches);
