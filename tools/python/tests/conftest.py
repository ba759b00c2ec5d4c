"""Make ``ferrite_ref`` and ``make_fixtures`` importable from tools/python."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
