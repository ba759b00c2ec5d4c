//! Fuzz the resolution of sharded checkpoints (docs/fuzzing.md):
//! `model_dir::read_weights` on a model directory holding shards and a
//! hostile `model.safetensors.index.json` (paths with `..`, `/`, absolute
//! paths, missing shards, tensors in two shards, names the map promises but
//! no shard has, thousands of entries).
//!
//! Each process works in its own scratch directory (under `/dev/shm` when
//! there is one): `root/model/` is the model directory, and
//! `root/outside.safetensors` a valid shard outside it holding the tensor
//! `OUTSIDE`, which must never be read.
//!
//! Input layout: `[shards: u8]`, then `shards % 6` times `[name_len: u8]
//! [name][tensors: u8]` and `tensors % 8` times `[len: u8][tensor name]`
//! (lengths `% 64` and `% 32`), then the index file's bytes, in which
//! `@ROOT@` becomes the scratch directory's absolute path. A shard is
//! written (one `[1]` f32 tensor per name, valued by shard and position)
//! when its name is a plain file name (`[A-Za-z0-9._-]`, not `.`, `..` or
//! the index's name); the others are left out, so the index can name
//! missing shards.
//!
//! Asserted: nothing panics; `OUTSIDE` is never among the tensors read; and
//! the outcome is the documented one: with a `model.safetensors`, exactly
//! its tensors; else an error unless the index is a JSON object whose
//! `weight_map` maps names to plain file names (not empty, no `..`, `/`,
//! `\` or `:`) of shards
//! present, no tensor is in two of them and every mapped tensor is in one;
//! then exactly the tensors of those shards, each with its shard's values.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ferrite_tools::model_dir::read_weights;
use libfuzzer_sys::fuzz_target;
use safetensors::tensor::{Dtype, TensorView};

const INDEX: &str = "model.safetensors.index.json";
const SINGLE: &str = "model.safetensors";
const SENTINEL: &str = "OUTSIDE";
/// Scratch directories are `PREFIX<pid>`.
const PREFIX: &str = "ferrite-fuzz-sharded-";

/// The scratch root of this process, made once (with the outside shard).
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = Path::new("/dev/shm");
        let base = if base.is_dir() {
            base.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        // Fork mode starts many processes: remove the scratch of dead ones.
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name.to_str().and_then(|n| n.strip_prefix(PREFIX));
            if pid.is_some_and(|p| !Path::new("/proc").join(p).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let root = base.join(format!("{PREFIX}{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("model")).unwrap();
        std::fs::write(
            root.join("outside.safetensors"),
            shard(&[SENTINEL.to_string()], 99),
        )
        .unwrap();
        root
    })
}

/// A safetensors file with one `[1]` f32 tensor per name.
fn shard(names: &[String], index: usize) -> Vec<u8> {
    let values: Vec<[u8; 4]> = (0..names.len())
        .map(|i| value_of(index, i).to_le_bytes())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = names
        .iter()
        .zip(&values)
        .map(|(n, v)| (n.clone(), TensorView::new(Dtype::F32, vec![1], v).unwrap()))
        .collect();
    safetensors::serialize(views, &None).unwrap()
}

fn value_of(shard: usize, tensor: usize) -> f32 {
    (shard * 100 + tensor) as f32
}

fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name != INDEX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

struct Reader<'d>(&'d [u8]);

impl<'d> Reader<'d> {
    fn u8(&mut self) -> u8 {
        let Some((&b, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        b
    }
    fn bytes(&mut self, n: usize) -> &'d [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }
}

/// The tensors the documented rules say `read_weights` returns, by name
/// with their values, or `None` for an error.
fn expected(shards: &BTreeMap<String, Vec<String>>, index: &[u8]) -> Option<BTreeMap<String, f32>> {
    let ids: BTreeMap<&str, usize> = shards
        .keys()
        .enumerate()
        .map(|(i, n)| (&n[..], i))
        .collect();
    let of = |file: &str| -> Vec<(String, f32)> {
        shards[file]
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), value_of(ids[file], i)))
            .collect()
    };
    if shards.contains_key(SINGLE) {
        return Some(of(SINGLE).into_iter().collect());
    }
    let index: serde_json::Value = serde_json::from_str(std::str::from_utf8(index).ok()?).ok()?;
    let map = index.get("weight_map")?.as_object()?;
    let mut files = BTreeSet::new();
    for file in map.values() {
        let file = file.as_str()?;
        if file.is_empty() || file.contains("..") || file.contains(['/', '\\', ':']) {
            return None;
        }
        files.insert(file);
    }
    let mut tensors = BTreeMap::new();
    for file in files {
        if !shards.contains_key(file) {
            return None;
        }
        for (name, v) in of(file) {
            if tensors.insert(name, v).is_some() {
                return None;
            }
        }
    }
    map.keys()
        .all(|k| tensors.contains_key(k))
        .then_some(tensors)
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let dir = root.join("model");
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
    }
    let mut r = Reader(data);
    let mut shards: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..r.u8() % 6 {
        let n = usize::from(r.u8() % 64);
        let name = String::from_utf8_lossy(r.bytes(n)).into_owned();
        let mut tensors: Vec<String> = Vec::new();
        for _ in 0..r.u8() % 8 {
            let n = usize::from(r.u8() % 32);
            let t = String::from_utf8_lossy(r.bytes(n)).into_owned();
            // `__metadata__` is the format's own key, not a tensor name.
            if t != SENTINEL && t != "__metadata__" && !tensors.contains(&t) {
                tensors.push(t);
            }
        }
        if plain_file_name(&name) && !shards.contains_key(&name) {
            shards.insert(name, tensors);
        }
    }
    let index = {
        let root_path = root.to_str().unwrap().as_bytes();
        let mut out = Vec::with_capacity(r.0.len());
        let mut rest = r.0;
        while !rest.is_empty() {
            if let Some(tail) = rest.strip_prefix(b"@ROOT@") {
                out.extend_from_slice(root_path);
                rest = tail;
            } else {
                out.push(rest[0]);
                rest = &rest[1..];
            }
        }
        out
    };
    // Each shard's values follow its place in name order.
    for (i, (name, tensors)) in shards.iter().enumerate() {
        std::fs::write(dir.join(name), shard(tensors, i)).unwrap();
    }
    std::fs::write(dir.join(INDEX), &index).unwrap();

    let got = read_weights(&dir);
    if let Ok((tensors, _)) = &got {
        assert!(
            !tensors.contains_key(SENTINEL),
            "read a shard outside the model directory"
        );
    }
    let got: Option<BTreeMap<String, f32>> = got.ok().map(|(tensors, _)| {
        tensors
            .into_iter()
            .map(|(n, t)| {
                assert_eq!(t.shape, [1]);
                (n, t.values[0])
            })
            .collect()
    });
    assert_eq!(
        got,
        expected(&shards, &index),
        "read_weights disagrees with the documented rules"
    );
});
