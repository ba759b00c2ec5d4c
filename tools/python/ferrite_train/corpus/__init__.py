"""The byte-level LMs' training text, built from Debian packages: ``fortunes``
(fortunes-train.txt, heldout.txt) and ``english`` (english-train.txt,
english-heldout.txt). Neither is committed except the held-out texts copied to
models/lm/."""

from pathlib import Path

#: Where the corpora are written and ``ferrite_train.train`` reads them (git-ignored).
DATA_DIR = Path(__file__).resolve().parents[2] / "data"
