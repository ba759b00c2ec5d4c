"""The MQAR task of a training run and its length curriculum (torch-free, so CI tests it).

A run's MQAR shape is ``pairs``, ``seq_len`` and ``queries`` (docs/mqar.md), and the
vocabulary for the ``zoology`` layout. A ``curriculum`` (the state study's second
edition) trains the first phases on shorter MQAR: ``[[share, pairs, seq_len], ...]``,
each phase the given share of the schedule, in order, then the run's own task.
"""

from __future__ import annotations


def mqar_task(spec: dict) -> dict:
    """The MQAR shape of a run: pairs, seq_len, queries and (zoology layout) vocab."""
    task = {"pairs": spec.get("pairs", 8), "seq_len": spec.get("seq_len", 64), "queries": spec.get("queries", "end")}
    if task["queries"] == "zoology":
        task["vocab"] = spec["config"]["vocab_size"]
    return task


def curriculum_task(spec: dict, progress: float) -> dict:
    """The MQAR task at ``progress`` (0..1) of the schedule: the curriculum's phase that
    holds it, else (the rest of the schedule) the run's own task."""
    task, end = mqar_task(spec), 0.0
    for share, pairs, seq_len in spec.get("curriculum", []):
        end += share
        if progress < end:
            return dict(task, pairs=pairs, seq_len=seq_len)
    return task
