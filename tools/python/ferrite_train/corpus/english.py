"""More English text for the byte-level LMs (issue 15, item 4): public-domain texts
that Debian packages, added to the fortunes corpus of ``ferrite_train.corpus.fortunes``.

    apt-get install -y fortunes fortunes-min dict-devil dict-jargon
    ferrite-lm-data         # the fortunes (data/fortunes-train.txt, data/heldout.txt)
    ferrite-english-data    # -> data/english-train.txt, data/english-heldout.txt
                            # (python -m ferrite_train.corpus.english)

Sources (all public domain, per each package's copyright file):

- `dict-devil`: Ambrose Bierce, *The Devil's Dictionary* (1911), ~380 KB;
- `dict-jargon`: the Jargon File 4.4.7, ~1.4 MB.

Each is a dictd database (`/usr/share/dictd/<name>.dict.dz` + `.index`); its
entries (headword, tab, base-64 offset, tab, base-64 length) are cut out in
index order, the `00database*` metadata entries left out. Entry number i of a
source goes to the held-out pool when i % 20 == 7, else to training (the
fortunes' rule). english-train.txt is the fortunes training text followed by
every training entry; english-heldout.txt is the start of the two held-out
pools, interleaved by source, cut below --heldout-bytes. Neither is
committed; rebuild them with this script.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
from pathlib import Path

from . import DATA_DIR

SOURCES = ("devil", "jargon")
B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64_number(text: str) -> int:
    """dictd's base-64 numbers (most significant digit first)."""
    n = 0
    for ch in text:
        n = n * 64 + B64.index(ch)
    return n


def dictd_entries(root: Path, name: str) -> list:
    data = gzip.decompress((root / f"{name}.dict.dz").read_bytes())
    out = []
    for line in (root / f"{name}.index").read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) < 3 or fields[0].startswith("00database"):
            continue
        start, length = b64_number(fields[1]), b64_number(fields[2])
        entry = data[start:start + length].strip(b"\n")
        if entry and not any((b < 0x20 and b not in (9, 10)) or b == 0x7F for b in entry):
            out.append(entry)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dictd", default="/usr/share/dictd")
    ap.add_argument("--data", default=str(DATA_DIR))
    ap.add_argument("--heldout-bytes", type=int, default=64 * 1024)
    args = ap.parse_args(argv)
    data = Path(args.data)
    fortunes = (data / "fortunes-train.txt").read_bytes()
    train, pools = [], []
    for name in SOURCES:
        entries = dictd_entries(Path(args.dictd), name)
        train += [e for i, e in enumerate(entries) if i % 20 != 7]
        pools.append([e for i, e in enumerate(entries) if i % 20 == 7])
        print(f"{name}: {len(entries)} entries, {sum(map(len, entries))} bytes")
    heldout, size = [], 0
    for pair in zip(*pools):
        for e in pair:
            if size + len(e) + 2 > args.heldout_bytes:
                break
            heldout.append(e)
            size += len(e) + 2
        else:
            continue
        break
    (data / "english-train.txt").write_bytes(fortunes + b"\n" + b"\n\n".join(train) + b"\n")
    (data / "english-heldout.txt").write_bytes(b"\n\n".join(heldout) + b"\n")
    for name in ("english-train.txt", "english-heldout.txt"):
        blob = (data / name).read_bytes()
        print(f"{name}: {len(blob)} bytes, sha256 {hashlib.sha256(blob).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
