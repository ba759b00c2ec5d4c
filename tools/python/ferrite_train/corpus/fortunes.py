"""Build the byte-level LM corpus from the Debian `fortunes` / `fortunes-min` packages.

    apt-get install -y fortunes fortunes-min      # version 1:1.99.1-7.3 was used
    ferrite-lm-data                               # -> tools/python/data/{fortunes-train,heldout}.txt
                                                  # (python -m ferrite_train.corpus.fortunes)

Every fortune file in /usr/share/games/fortunes (sorted by name; `ascii-art`
left out: pictures, not English) is split at its `%` separator lines. Fortunes
with control bytes other than newline and tab (terminal overstriking) are
dropped. Fortune number i (counting over all files in order) goes to the
held-out pool when i % 20 == 7, else to training. Fortunes are joined with a
blank line. heldout.txt is the start of the held-out pool, cut at a fortune
boundary below --heldout-bytes; it is committed as models/lm/heldout.txt. The
training text is not committed (rebuild it with this script).
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

from . import DATA_DIR

SKIP = {"ascii-art"}


def fortunes(root: Path) -> list:
    out = []
    for path in sorted(root.iterdir()):
        if path.suffix in (".dat", ".u8") or path.is_dir() or path.name in SKIP:
            continue
        text = path.read_bytes()
        for piece in text.split(b"\n%\n"):
            piece = piece.strip(b"\n")
            if piece.startswith(b"%\n"):
                piece = piece[2:]
            if not piece or piece == b"%":
                continue
            if any((b < 0x20 and b not in (9, 10)) or b == 0x7F for b in piece):
                continue
            out.append(piece)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="/usr/share/games/fortunes")
    ap.add_argument("--out", default=str(DATA_DIR))
    ap.add_argument("--heldout-bytes", type=int, default=64 * 1024)
    args = ap.parse_args(argv)
    items = fortunes(Path(args.root))
    train = [f for i, f in enumerate(items) if i % 20 != 7]
    pool = [f for i, f in enumerate(items) if i % 20 == 7]
    heldout, size = [], 0
    for f in pool:
        if size + len(f) + 2 > args.heldout_bytes:
            break
        heldout.append(f)
        size += len(f) + 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fortunes-train.txt").write_bytes(b"\n\n".join(train) + b"\n")
    (out / "heldout.txt").write_bytes(b"\n\n".join(heldout) + b"\n")
    for name in ("fortunes-train.txt", "heldout.txt"):
        data = (out / name).read_bytes()
        print(f"{name}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:16]}")
    print(f"{len(items)} fortunes: {len(train)} train, {len(heldout)} of {len(pool)} held out")


if __name__ == "__main__":
    main()
