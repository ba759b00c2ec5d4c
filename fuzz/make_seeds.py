#!/usr/bin/env python3
"""Writes the seeds of the bpe_tokenizer and tools_inputs fuzz targets
(docs/fuzzing.md) from files the repository already has:

- seeds-bpe/: the tokenizer section of seeds/bpe_int4.fer (the 800-token test
  tokenizer), framed as the target reads it, with a few texts;
- seeds-tools/: every committed config.json (selector 0), the test
  tokenizer.json (selector 1) and fuzz/seed-model's model.safetensors
  (selector 2);
- seeds-sampler/, seeds-session/, seeds-update/, seeds-quantize/,
  seeds-sharded/ and seeds-snapshot/: small inputs in each target's layout (the layouts are in
  the targets' doc comments and docs/fuzzing.md), one per edge the target
  is meant to reach.

Run from the repository root: python3 fuzz/make_seeds.py
"""
import glob
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(ROOT, "fuzz")


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def bpe_seeds():
    image = open(os.path.join(FUZZ, "seeds", "bpe_int4.fer"), "rb").read()
    tok_off, tok_len = struct.unpack_from("<II", image, 40)
    section = image[tok_off:tok_off + tok_len]
    vocab = struct.unpack_from("<I", section, 0)[0]
    texts = [b"", b"Once upon a time", b"hello,  world!\n\t123 \xff\xfe caf\xc3\xa9",
             b"don't stop 's 're 've 'll 'd  end"]
    for i, text in enumerate(texts):
        frame = struct.pack("<HB", vocab, len(text)) + text + section
        write(os.path.join(FUZZ, "seeds-bpe", f"test_tokenizer_{i}"), frame)


def tools_seeds():
    configs = sorted(glob.glob(os.path.join(ROOT, "models", "*", "*", "config.json")))
    configs += sorted(glob.glob(os.path.join(ROOT, "tests", "fla", "*", "config.json")))
    configs += sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "*", "config.json")))
    for path in configs:
        name = os.path.relpath(os.path.dirname(path), ROOT).replace(os.sep, "_")
        write(os.path.join(FUZZ, "seeds-tools", f"config_{name}"), b"\x00" + open(path, "rb").read())
    tok = os.path.join(ROOT, "tests", "tokenizer", "model", "tokenizer.json")
    write(os.path.join(FUZZ, "seeds-tools", "tokenizer_test"), b"\x01" + open(tok, "rb").read())
    st = os.path.join(FUZZ, "seed-model", "model.safetensors")
    write(os.path.join(FUZZ, "seeds-tools", "safetensors_seed_model"), b"\x02" + open(st, "rb").read())


def f32(*vs):
    return struct.pack(f"<{len(vs)}f", *vs)


NAN, INF = float("nan"), float("inf")


def sampler_seeds():
    def frame(t, k, p, seed, mode, rest):
        return f32(t) + bytes([k]) + f32(p) + struct.pack("<Q", seed) + bytes([mode]) + rest
    logits = f32(3.0, 2.0, 1.0, 0.0, -1.0, 0.5)
    seeds = {
        "greedy": frame(0.0, 0, 1.0, 0, 0, logits),
        "temperature": frame(1.0, 0, 1.0, 7, 0, logits),
        "top_k_top_p": frame(0.7, 3, 0.9, 42, 0, logits),
        "top_p_neg_inf": frame(1.0, 0, 0.9, 1, 0, f32(1.0, 0.0, -INF)),
        "top_k_neg_inf": frame(1.0, 4, 1.0, 1, 0, f32(-INF, -INF, 0.0, -INF)),
        "pos_inf": frame(1.0, 0, 1.0, 3, 0, f32(1.0, INF, 2.0)),
        "nan_first": frame(0.0, 0, 1.0, 0, 0, f32(NAN, -INF, -INF)),
        "all_nan": frame(1.0, 0, 0.5, 0, 0, f32(NAN, NAN)),
        "tiny_temperature": frame(1e-40, 0, 1.0, 5, 0, logits),
        "huge_temperature": frame(3e38, 0, 1.0, 5, 0, logits),
        "bad_options": frame(-1.0, 65, NAN, 0, 0, logits),
        "all_equal": frame(1.0, 0, 0.5, 9, 1 + 4 * 3, f32(0.25)),
        "huge_vocab": frame(0.8, 0, 0.95, 11, 2, bytes([16, 7]) + logits),
        "specials": frame(1.0, 0, 0.7, 13, 3, bytes(range(16)) * 2),
    }
    for name, data in seeds.items():
        write(os.path.join(FUZZ, "seeds-sampler", name), data)


def session_seeds():
    # ops: 0 feed u16, 1 run [n][s], 2 seek u64, 3 seek max-k [k], 4 reset,
    # 5 reset_pinned [p], 6 replay, 7 shift.
    for image in range(6):
        ops = bytes([1, 200, image, 6, 0]) + struct.pack("<H", 0xffff) + bytes([6])
        ops += bytes([2]) + struct.pack("<Q", (1 << 32) + 5) + bytes([1, 60, 3, 7, 6])
        ops += bytes([3, 2, 1, 5, 9, 6, 4, 5, 3, 1, 40, 8, 6])
        write(os.path.join(FUZZ, "seeds-session", f"image{image}"), bytes([image, 4]) + ops)
    many = bytes([1, 255, 7]) * 15 + bytes([6])
    write(os.path.join(FUZZ, "seeds-session", "many_tokens"), bytes([2, 0]) + many)
    near_max = bytes([2]) + struct.pack("<Q", (1 << 64) - 300) + bytes([1, 255, 1, 7])
    write(os.path.join(FUZZ, "seeds-session", "near_max"), bytes([0, 8]) + near_max)


def update_seeds():
    def frame(base, flags, chunk, pieces=(), fail=0xffff, patches=(), corrupt=(), rest=b""):
        out = bytes([base, flags]) + struct.pack("<HB", chunk, len(pieces))
        out += b"".join(struct.pack("<H", p) for p in pieces) + struct.pack("<H", fail)
        out += bytes([len(patches)]) + b"".join(struct.pack("<HB", a, b) for a, b in patches)
        out += bytes([len(corrupt)]) + b"".join(struct.pack("<HB", a, x) for a, x in corrupt)
        return out + rest
    seeds = {f"whole{b}": frame(b, 0, 1024) for b in range(6)}
    seeds.update({
        "pieces": frame(2, 0, 100, pieces=(7, 3, 500)),
        "cut": frame(3, 0, 512, pieces=(1000, 1000, 0)),
        "fail": frame(1, 0, 256, fail=5000),
        "slot_short": frame(0, 4, 4096),
        "slot_tiny": frame(2, 6, 64, rest=bytes([12])),
        "session_short": frame(4, 16, 1024),
        "patched_resealed": frame(2, 1, 1024, patches=((72, 9), (300, 0xff))),
        "corrupt_one": frame(3, 0, 1024, corrupt=((4000, 0x10),)),
        "corrupt_len": frame(2, 0, 1024, corrupt=((17, 0x01),)),
        "raw": frame(6, 2, 16, rest=b"FERRITE\0" + bytes(60)),
    })
    for name, data in seeds.items():
        write(os.path.join(FUZZ, "seeds-update", name), data)


def quantize_seeds():
    def edit(tensor, at, count, kind, value):
        return bytes([tensor]) + struct.pack("<HBB", at, count, kind) + f32(value)
    def special(tensor, at, count, which):
        return bytes([tensor]) + struct.pack("<HBB", at, count, 1) + bytes([which, 0, 0, 0])
    seeds = {}
    for dtype, name in enumerate(["f32", "f16", "int8", "int4"]):
        for layout in (0, 4):
            for tied in (0, 16):
                tag = f"{name}_{'rowmajor' if layout else 'tiled'}{'_tied' if tied else ''}"
                seeds[tag] = bytes([dtype | layout | tied, 0])
    seeds.update({
        "int4_calibrated": bytes([3 | 32, 0]),
        "int4_absmax_g16": bytes([3 | 8 | 64, 0]),
        "int8_group_odd": bytes([2 | 4 | 192, 3]),
        "nan": bytes([2, 0]) + special(5, 3, 1, 0),
        "inf": bytes([3, 0]) + special(7, 0, 2, 1),
        "huge_f16": bytes([1, 0]) + edit(6, 10, 4, 0, 1e6),
        "huge_int8": bytes([2, 0]) + edit(6, 0, 255, 2, 1e37),
        "denormal_tiled": bytes([3, 0]) + edit(8, 0, 255, 2, 1e-40),
        "all_equal": bytes([2, 0]) + edit(9, 0, 0, 3, 0.125),
        "zero_rows": bytes([3, 0]) + edit(4, 0, 0, 4, 0.0) + edit(4, 17, 0, 4, 0.0),
        "mixed_rules": bytes([3, 0]) + edit(6, 1, 0, 5, 0.0) + edit(7, 2, 0, 5, 0.0),
        "bounded_large": bytes([0, 0]) + edit(6, 0, 255, 0, 4.0) + edit(7, 0, 255, 0, -4.0),
    })
    for name, data in seeds.items():
        write(os.path.join(FUZZ, "seeds-quantize", name), data)


def sharded_seeds():
    def shard(name, tensors):
        out = bytes([len(name)]) + name.encode() + bytes([len(tensors)])
        return out + b"".join(bytes([len(t)]) + t.encode() for t in tensors)
    def frame(shards, index):
        return bytes([len(shards)]) + b"".join(shard(n, t) for n, t in shards) + index.encode()
    two = [("model-00001-of-00002.safetensors", ["a.weight", "b.weight"]),
           ("model-00002-of-00002.safetensors", ["c.weight"])]
    def index(entries):
        return json.dumps({"metadata": {"total_size": 12}, "weight_map": dict(entries)})
    valid = [("a.weight", two[0][0]), ("b.weight", two[0][0]), ("c.weight", two[1][0])]
    seeds = {
        "valid": frame(two, index(valid)),
        "dotdot": frame(two, index(valid + [("x", "../outside.safetensors")])),
        "absolute": frame(two, index(valid + [("x", "@ROOT@/outside.safetensors")])),
        "dotdot_name": frame(two, index([("OUTSIDE", "..")])),
        "missing_shard": frame(two[:1], index(valid)),
        "missing_tensor": frame(two, index(valid + [("d.weight", two[1][0])])),
        "duplicate": frame([two[0], (two[1][0], ["a.weight"])], index(valid)),
        "wrong_shard": frame(two, index([("a.weight", two[1][0]), ("c.weight", two[0][0])])),
        "single": frame([("model.safetensors", ["s.weight"])] + two, index(valid)),
        "index_as_shard": frame(two, index([("a.weight", "model.safetensors.index.json")])),
        "empty_name": frame(two, index([("a.weight", "")])),
        "no_weight_map": frame(two, json.dumps({"weight": {}})),
        "many": frame(two, index([(f"t{i}", f"s{i}") for i in range(400)])),
    }
    for name, data in seeds.items():
        write(os.path.join(FUZZ, "seeds-sharded", name), data)


def snapshot_seeds():
    """restore_snapshot: `[image][mode][pinned_max][rest]`. Mode 0: four
    broken snapshots of tests/corrupt-snapshot/ as they are; mode 1, per
    image: pinned 0, position 7, stream length 3 and four state bytes laid
    over a valid snapshot from byte 44. (The `regression-*` files beside them
    are inputs the fuzzer found, kept as they are.)"""
    corrupt = os.path.join(ROOT, "tests", "corrupt-snapshot")
    for name in ["truncated_body", "crc_flipped_state", "other_model", "position_exhausted"]:
        with open(os.path.join(corrupt, name + ".snap"), "rb") as f:
            write(os.path.join(FUZZ, "seeds-snapshot", "raw_" + name), bytes([0, 0, 0]) + f.read())
    for image in range(4):
        laid = struct.pack("<IQQ", 0, 7, 3) + bytes([1, 2, 3, 4])
        write(os.path.join(FUZZ, "seeds-snapshot", f"laid_image{image}"), bytes([image, 1, 0]) + laid)


if __name__ == "__main__":
    bpe_seeds()
    tools_seeds()
    sampler_seeds()
    session_seeds()
    update_seeds()
    quantize_seeds()
    sharded_seeds()
    snapshot_seeds()
