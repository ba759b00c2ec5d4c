"""Score a memory-lookup model (research/rounds/r21-cross.sh's export) on the runtime: bake its
held-out memories with `ferrite quantize --memory` (f32 and int8) and count the queries whose
argmax logit (`ferrite logits --memory N`) is the stored value. From the repo root, after
`cargo build --release -p ferrite-tools`:

    python3 tools/python/research/rounds/r21-score.py models/cross-lookup/m64

Prints one line per dtype: `DIR DTYPE hits/total = accuracy`.
"""

import json
import subprocess
import sys
from pathlib import Path

FERRITE = "target/release/ferrite"


def score(model: Path, dtype: str, image: str = "/tmp/r21-score.fer") -> tuple[int, int]:
    memories = sorted((model / "heldout").glob("memory_*.bin"))
    args = [FERRITE, "quantize", str(model), "-o", image, "--dtype", dtype]
    for m in memories:
        args += ["--memory", str(m)]
    subprocess.run(args, check=True, capture_output=True)
    hits = total = 0
    for q in json.loads((model / "heldout/queries.json").read_text()):
        index = [m.name for m in memories].index(q["memory"])
        tokens = ",".join(map(str, q["stream"]))
        out = subprocess.run([FERRITE, "logits", image, "--tokens", tokens, "--memory", str(index)],
                             check=True, capture_output=True, text=True).stdout
        for target, row in zip(q["targets"], json.loads(out)):
            if target >= 0:
                total += 1
                hits += max(range(len(row)), key=row.__getitem__) == target
    return hits, total


if __name__ == "__main__":
    for d in sys.argv[1:]:
        for dtype in ("f32", "int8"):
            h, t = score(Path(d), dtype)
            print(d, dtype, f"{h}/{t} = {h / t:.4f}")
