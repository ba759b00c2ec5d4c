"""The shipped models' measurements and the docs' tables and plots:
``evaluate`` (runtime figures into metrics.json), ``models`` (README.md,
docs/models.md, docs/quantization.md), ``plots`` (docs/*.svg), ``study``
(the state study: models/mqar-256, docs/state-study.md)."""
