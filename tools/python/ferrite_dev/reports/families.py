"""The families the reports show: the runtime's mixer kinds (``ferrite_ref.kinds``)
and the named variants of a kind that the runs' ``family`` labels use
(ferrite_train/runs.py, research/study_runs.py)."""

from __future__ import annotations

from ferrite_ref.kinds import MIXER_KINDS

#: A variant family -> the mixer kind its layers are.
VARIANTS = {"swa-sinks": "swa", "gsa-conv": "gsa"}
#: Every family a report can show: the mixer kinds, then the variants.
FAMILIES = MIXER_KINDS + tuple(VARIANTS)
#: The tables' order of families: alphabetical.
ORDER = tuple(sorted(FAMILIES))
#: One colour per family (the plots).
COLORS = {"swa": "#1f77b4", "swa-sinks": "#17becf", "bla": "#d62728", "gsa": "#2ca02c", "gdn": "#9467bd",
          "mla": "#ff7f0e", "gsa-conv": "#8c564b", "mamba2": "#e377c2", "rwkv7": "#7f7f7f",
          "gla": "#bcbd22", "cross": "#393b79"}


def kind_of(family: str) -> str:
    """The mixer kind of a report family; ValueError for a label that is neither a
    kind of the runtime's table nor a variant of one."""
    if family in MIXER_KINDS:
        return family
    if family in VARIANTS:
        return VARIANTS[family]
    raise ValueError(f"unknown family {family!r}: not a mixer kind of runtime/src/config.rs "
                     f"{MIXER_KINDS} nor a variant {sorted(VARIANTS)}")


def rank(family: str) -> int:
    """``family``'s place in ORDER (sort key of the tables); ValueError when unknown."""
    kind_of(family)
    return ORDER.index(family)


def present(families) -> list:
    """The distinct families among ``families``, in ORDER (unknown ones raise)."""
    return sorted(set(families), key=rank)
