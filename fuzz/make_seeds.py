#!/usr/bin/env python3
"""Writes the seeds of the bpe_tokenizer and tools_inputs fuzz targets
(docs/fuzzing.md) from files the repository already has:

- seeds-bpe/: the tokenizer section of seeds/bpe_int4.fer (the 800-token test
  tokenizer), framed as the target reads it, with a few texts;
- seeds-tools/: every committed config.json (selector 0), the test
  tokenizer.json (selector 1) and fuzz/seed-model's model.safetensors
  (selector 2).

Run from the repository root: python3 fuzz/make_seeds.py
"""
import glob
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


if __name__ == "__main__":
    bpe_seeds()
    tools_seeds()
