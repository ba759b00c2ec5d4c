"""ferrite_dev — the generators of the repository's committed files.

``fixtures``: the parity fixtures under tests/ (reference, fla, tokenizer);
``codegen``: tables generated into source files (the Unicode classes of the
tokenizer, the mixer kinds of :mod:`ferrite_ref.kinds`); ``reports``: the
measurements and tables of the shipped models in models/ and docs/.
Each command is a console script (pyproject.toml) and ``python -m`` module.
"""

from pathlib import Path

#: The repository root (this package lives at tools/python/ferrite_dev).
REPO_ROOT = Path(__file__).resolve().parents[3]
