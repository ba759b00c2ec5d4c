//! `Model::macs_per_token` on every fixture and `models/lm/small`, f32 and
//! int8, against a count made from the model directory's safetensors
//! alone: `rows × cols` of every 2-D `*.weight` (the matrices a token
//! multiplies) but the embedding table (looked up, not multiplied) and
//! MLA's `kv_b_proj` (absorbed into the mixer's own loops) and a `cross`
//! layer's `k_proj` and `v_proj` (stored for a memory encoder, not run per
//! token), plus the head (`lm_head.weight`, or the embedding table when
//! tied).

use std::path::Path;

use ferrite::image::DType;
use ferrite_tests::{fixture_dirs, image_of};
use ferrite_tools::writer::WriteOptions;
use safetensors::SafeTensors;

/// The count from `dir/model.safetensors` (see the module's doc).
fn counted(dir: &Path) -> u64 {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let unused: Vec<String> = config["layers"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, l)| l["mixer"] == "cross")
        .flat_map(|(i, _)| {
            ["k_proj", "v_proj"].map(|p| format!("model.layers.{i}.attn.{p}.weight"))
        })
        .collect();
    let mut macs = 0;
    let mut head = None;
    let mut embeddings = None;
    for (name, view) in st.tensors() {
        let shape = view.shape();
        if shape.len() != 2 || !name.ends_with(".weight") {
            continue;
        }
        let n = (shape[0] * shape[1]) as u64;
        match name.as_str() {
            "model.embeddings.weight" => embeddings = Some(n),
            "lm_head.weight" => head = Some(n),
            _ if name.ends_with(".kv_b_proj.weight") || unused.contains(&name) => {}
            _ => macs += n,
        }
    }
    macs + head.or(embeddings).unwrap()
}

#[test]
fn macs_per_token_is_the_count_of_the_safetensors_matrices() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs = fixture_dirs();
    dirs.push(root.join("models/lm/small"));
    for dir in dirs {
        let want = counted(&dir);
        for dtype in [DType::F32, DType::I8] {
            let opts = WriteOptions {
                dtype,
                ..Default::default()
            };
            let image = image_of(&dir, &opts);
            let got = image.model().unwrap().macs_per_token().unwrap();
            println!("{:<40} {dtype:?}: {got}", dir.display());
            assert_eq!(got, want, "{} {dtype:?}", dir.display());
        }
    }
}
