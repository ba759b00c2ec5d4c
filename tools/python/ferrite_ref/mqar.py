"""MQAR — multi-query associative recall, exactly as ``docs/mqar.md`` specifies.

The same seeded generator exists in Rust (``tools/src/mqar.rs``); both must
produce identical sequences for the same parameters and seed.

Layout of one sequence (P pairs, L tokens), ``queries="end"`` (the default)::

    k1 v1 k2 v2 ... kP vP | n1 ... n_{L-4P} | q1 a1 q2 a2 ... qP aP

``queries="spread"`` (queries at uniformly random two-token slots after the
pairs; L even)::

    k1 v1 ... kP vP | slot 0 | slot 1 | ... | slot S-1      S = (L - 2P) / 2

where P of the S slots hold ``q a`` and the others two noise tokens. In both,
keys are in 0..64 (distinct), values in 64..128, noise in 128..192 (a
256-token vocabulary).

``queries="zoology"`` is Zoology's MQAR (HazyResearch/zoology,
``zoology/data/multiquery_ar.py``) drawn from this module's stream: the same
slots, but query i (the key of pair i) takes the i-th of P slots drawn one
after the other with weights proportional to (g + 1)^(a - 1), a = 0.01
(``power_a``: most queries sit close to the pairs), the token after a query
key is noise, not its value, and the ``vocab`` V sets the ranges: keys in
1..V/2 (distinct), values in V/2..V (distinct), noise anywhere in 0..V.

The model is scored at each query position (the argmax after reading ``q_i``
must be ``a_i``).

Two implementations of the one stream:

* :func:`generate` — a direct transcription of the spec, one draw at a time;
* :func:`generate_batch` — numpy-vectorised for training. splitmix64's state
  after ``i`` draws is ``seed + i * GAMMA``, and every sequence of a layout
  takes a fixed number of draws (:func:`draws_per_sequence`), so every draw of
  every sequence can be computed at once.

Both are checked against each other (and against ``ferrite mqar-sample``) in
``tools/python/tests/test_mqar.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEYS = 0
VALUES = 64
NOISE = 128
RANGE = 64
MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB

EVAL_SEED = 0
TRAIN_SEED_BASE = 1_000_000


class SplitMix64:
    """The splitmix64 stream of docs/mqar.md (Python integers, mod 2^64)."""

    def __init__(self, seed: int):
        self.state = seed & MASK64

    def next(self) -> int:
        self.state = (self.state + GAMMA) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * MUL1) & MASK64
        z = ((z ^ (z >> 27)) * MUL2) & MASK64
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        return self.next() % n


@dataclass(frozen=True)
class MqarSequence:
    tokens: list  # L token ids
    targets: list  # [(position of the query key, expected value)]


QUERIES = ("end", "spread", "zoology")
#: The vocabulary of the ``end`` and ``spread`` layouts (their token ranges are fixed).
VOCAB = 256
#: Zoology's ``power_a``: slot g of the ``zoology`` layout is drawn with weight (g + 1)^(POWER_A - 1).
POWER_A = 0.01
#: The slot weights are integers, ``floor(2^WEIGHT_BITS * (g + 1)^(POWER_A - 1))``.
WEIGHT_BITS = 24


def _check(pairs: int, seq_len: int, queries: str = "end", vocab: int = VOCAB) -> None:
    if queries not in QUERIES:
        raise ValueError(f"queries must be one of {QUERIES}, got {queries!r}")
    if queries == "zoology":
        if vocab % 2 or pairs < 1 or vocab // 2 - 1 < pairs:
            raise ValueError(f"the zoology layout needs an even vocab with vocab / 2 - 1 >= pairs >= 1, "
                             f"got vocab {vocab}, pairs {pairs}")
    else:
        if vocab != VOCAB:
            raise ValueError(f"the {queries} layout has the fixed token ranges of a {VOCAB}-token vocabulary, "
                             f"got vocab {vocab}")
        if not 1 <= pairs <= RANGE:
            raise ValueError(f"pairs must be in 1..={RANGE}, got {pairs}")
    if seq_len < 4 * pairs:
        raise ValueError(f"seq_len {seq_len} is shorter than 4 * pairs = {4 * pairs}")
    if queries != "end" and seq_len % 2:
        raise ValueError(f"seq_len {seq_len} must be even with {queries} queries")


def slot_weights(slots: int) -> list:
    """The ``zoology`` layout's integer weight of each slot g < ``slots``:
    floor(2^24 (g + 1)^(a - 1)), a = 0.01 (Zoology's p_g = a (g + 1)^(a - 1), normalised)."""
    return [int((g + 1) ** (POWER_A - 1) * (1 << WEIGHT_BITS)) for g in range(slots)]


def _distinct(rng: "SplitMix64", n: int, k: int) -> list:
    """``k`` distinct items of ``0..n`` in a uniformly random order: Floyd's sampling
    (k draws; for j in n-k..n: t = below(j + 1), t if new else j), then a Fisher-Yates
    shuffle of those k (k draws: r = j + below(k - j), swap j and r)."""
    chosen = []
    for j in range(n - k, n):
        t = rng.below(j + 1)
        chosen.append(j if t in chosen else t)
    for j in range(k):
        r = j + rng.below(k - j)
        chosen[j], chosen[r] = chosen[r], chosen[j]
    return chosen


def _zoology(rng: "SplitMix64", pairs: int, seq_len: int, vocab: int) -> "MqarSequence":
    """One ``zoology`` sequence: keys (2P draws), values (2P), slots (P), noise (L - 2P)."""
    half = vocab // 2
    keys = [1 + k for k in _distinct(rng, half - 1, pairs)]
    values = [half + v for v in _distinct(rng, half, pairs)]
    slots = (seq_len - 2 * pairs) // 2
    weights = slot_weights(slots)
    taken = [False] * slots
    picked = []
    for _ in range(pairs):
        # Successive sampling without replacement: r below the weight left, then the
        # first free slot (in position order) whose running weight passes r.
        r = rng.next() % sum(w for w, t in zip(weights, taken) if not t)
        acc = 0
        for g in range(slots):
            if not taken[g]:
                acc += weights[g]
                if r < acc:
                    break
        taken[g] = True
        picked.append(g)
    tokens = []
    for k, v in zip(keys, values):
        tokens += [k, v]
    tokens += [rng.below(vocab) for _ in range(seq_len - 2 * pairs)]
    targets = []
    for i, g in enumerate(picked):
        pos = 2 * pairs + 2 * g
        tokens[pos] = keys[i]
        targets.append((pos, values[i]))
    return MqarSequence(tokens, sorted(targets))


def _shuffle_prefix(rng: SplitMix64, n: int, k: int) -> list:
    a = list(range(n))
    for j in range(k):
        r = j + rng.below(n - j)
        a[j], a[r] = a[r], a[j]
    return a[:k]


def generate(seed: int, n: int, pairs: int = 8, seq_len: int = 64, queries: str = "end", vocab: int = VOCAB) -> list:
    """``n`` sequences from ``seed``, drawn one after the other from one stream
    (``vocab``: the ``zoology`` layout's; the others need the default)."""
    _check(pairs, seq_len, queries, vocab)
    rng = SplitMix64(seed)
    out = []
    for _ in range(n):
        if queries == "zoology":
            out.append(_zoology(rng, pairs, seq_len, vocab))
            continue
        keys = [KEYS + k for k in _shuffle_prefix(rng, RANGE, pairs)]
        values = [VALUES + rng.below(RANGE) for _ in range(pairs)]
        tokens = []
        for k, v in zip(keys, values):
            tokens += [k, v]
        if queries == "spread":
            out.append(_spread_rest(rng, keys, values, tokens, seq_len))
            continue
        tokens += [NOISE + rng.below(RANGE) for _ in range(seq_len - 4 * pairs)]
        order = _shuffle_prefix(rng, pairs, pairs)
        targets = []
        for i in order:
            targets.append((len(tokens), values[i]))
            tokens += [keys[i], values[i]]
        out.append(MqarSequence(tokens, targets))
    return out


def _spread_rest(rng: SplitMix64, keys: list, values: list, tokens: list, seq_len: int) -> MqarSequence:
    """Query order (P draws), then per slot: a selection draw and two noise draws
    (always all three). Slot i holds the next query iff ``below(S - i)`` is below
    the number of queries still to place (selection sampling: every set of P
    slots is equally likely)."""
    pairs = len(keys)
    order = _shuffle_prefix(rng, pairs, pairs)
    slots = (seq_len - 2 * pairs) // 2
    placed, targets = 0, []
    for i in range(slots):
        r = rng.below(slots - i)
        n1, n2 = NOISE + rng.below(RANGE), NOISE + rng.below(RANGE)
        if r < pairs - placed:
            j = order[placed]
            targets.append((len(tokens), values[j]))
            tokens += [keys[j], values[j]]
            placed += 1
        else:
            tokens += [n1, n2]
    return MqarSequence(tokens, targets)


def draws_per_sequence(pairs: int, seq_len: int, queries: str = "end") -> int:
    """end: keys (P) + values (P) + noise (L - 4P) + query order (P) = L - P draws.
    spread: keys, values, query order (3P) + 3 per slot (3 (L - 2P) / 2).
    zoology: keys (2P) + values (2P) + slots (P) + noise (L - 2P) = L + 3P."""
    if queries == "zoology":
        return seq_len + 3 * pairs
    if queries == "spread":
        return 3 * pairs + 3 * ((seq_len - 2 * pairs) // 2)
    return seq_len - pairs


def _splitmix_outputs(seed: int, count: int) -> np.ndarray:
    """The first ``count`` outputs of the stream from ``seed`` (uint64)."""
    with np.errstate(over="ignore"):
        i = np.arange(1, count + 1, dtype=np.uint64)
        z = np.uint64(seed & MASK64) + i * np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MUL1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MUL2)
        return z ^ (z >> np.uint64(31))


def _shuffle_prefix_batch(draws: np.ndarray, n: int, k: int) -> np.ndarray:
    """Vectorised partial Fisher-Yates over rows; draws [B, k] raw uint64."""
    b = draws.shape[0]
    a = np.tile(np.arange(n, dtype=np.int64), (b, 1))
    rows = np.arange(b)
    for j in range(k):
        r = j + (draws[:, j] % np.uint64(n - j)).astype(np.int64)
        aj = a[:, j].copy()
        a[:, j] = a[rows, r]
        a[rows, r] = aj
    return a[:, :k]


def generate_batch(seed: int, n: int, pairs: int = 8, seq_len: int = 64, queries: str = "end",
                   vocab: int = VOCAB) -> tuple:
    """(tokens [n, L] int64, query positions, answers [n, P] int64), identical to
    :func:`generate`. end: positions [P], the same for every sequence
    (L - 2P + 2i); spread and zoology: positions [n, P], in increasing order per sequence."""
    _check(pairs, seq_len, queries, vocab)
    per = draws_per_sequence(pairs, seq_len, queries)
    d = _splitmix_outputs(seed, n * per).reshape(n, per)
    if queries == "zoology":
        return _zoology_batch(d, n, pairs, seq_len, vocab)
    if queries == "spread":
        return _spread_batch(d, n, pairs, seq_len)
    noise = seq_len - 4 * pairs
    keys = KEYS + _shuffle_prefix_batch(d[:, :pairs], RANGE, pairs)
    values = VALUES + (d[:, pairs : 2 * pairs] % np.uint64(RANGE)).astype(np.int64)
    filler = NOISE + (d[:, 2 * pairs : 2 * pairs + noise] % np.uint64(RANGE)).astype(np.int64)
    order = _shuffle_prefix_batch(d[:, 2 * pairs + noise :], pairs, pairs)
    rows = np.arange(n)[:, None]
    qk, qv = keys[rows, order], values[rows, order]
    tokens = np.empty((n, seq_len), dtype=np.int64)
    tokens[:, 0 : 2 * pairs : 2] = keys
    tokens[:, 1 : 2 * pairs : 2] = values
    tokens[:, 2 * pairs : 2 * pairs + noise] = filler
    tokens[:, seq_len - 2 * pairs :: 2] = qk
    tokens[:, seq_len - 2 * pairs + 1 :: 2] = qv
    positions = np.arange(seq_len - 2 * pairs, seq_len, 2)
    return tokens, positions, qv


def _spread_batch(d: np.ndarray, n: int, pairs: int, seq_len: int) -> tuple:
    keys = KEYS + _shuffle_prefix_batch(d[:, :pairs], RANGE, pairs)
    values = VALUES + (d[:, pairs : 2 * pairs] % np.uint64(RANGE)).astype(np.int64)
    order = _shuffle_prefix_batch(d[:, 2 * pairs : 3 * pairs], pairs, pairs)
    slots = (seq_len - 2 * pairs) // 2
    per_slot = d[:, 3 * pairs :].reshape(n, slots, 3)
    rows = np.arange(n)
    tokens = np.empty((n, seq_len), dtype=np.int64)
    tokens[:, 0 : 2 * pairs : 2] = keys
    tokens[:, 1 : 2 * pairs : 2] = values
    noise = NOISE + (per_slot[:, :, 1:] % np.uint64(RANGE)).astype(np.int64)  # [n, S, 2]
    tokens[:, 2 * pairs :] = noise.reshape(n, 2 * slots)
    placed = np.zeros(n, dtype=np.int64)
    positions = np.zeros((n, pairs), dtype=np.int64)
    answers = np.zeros((n, pairs), dtype=np.int64)
    for i in range(slots):
        r = (per_slot[:, i, 0] % np.uint64(slots - i)).astype(np.int64)
        hit = r < pairs - placed
        if not hit.any():
            continue
        b = rows[hit]
        j = order[b, placed[hit]]
        pos = 2 * pairs + 2 * i
        tokens[b, pos] = keys[b, j]
        tokens[b, pos + 1] = values[b, j]
        positions[b, placed[hit]] = pos
        answers[b, placed[hit]] = values[b, j]
        placed[hit] += 1
    return tokens, positions, answers


def _distinct_batch(d: np.ndarray, n: int, k: int) -> np.ndarray:
    """:func:`_distinct` over rows; d [B, 2k] raw draws."""
    b = d.shape[0]
    chosen = np.zeros((b, k), dtype=np.int64)
    for i, j in enumerate(range(n - k, n)):
        t = (d[:, i] % np.uint64(j + 1)).astype(np.int64)
        seen = (chosen[:, :i] == t[:, None]).any(axis=1)
        chosen[:, i] = np.where(seen, j, t)
    rows = np.arange(b)
    for j in range(k):
        r = j + (d[:, k + j] % np.uint64(k - j)).astype(np.int64)
        cj = chosen[:, j].copy()
        chosen[:, j] = chosen[rows, r]
        chosen[rows, r] = cj
    return chosen


def _zoology_batch(d: np.ndarray, n: int, pairs: int, seq_len: int, vocab: int) -> tuple:
    half = vocab // 2
    keys = 1 + _distinct_batch(d[:, : 2 * pairs], half - 1, pairs)
    values = half + _distinct_batch(d[:, 2 * pairs : 4 * pairs], half, pairs)
    slots = (seq_len - 2 * pairs) // 2
    weights = np.array(slot_weights(slots), dtype=np.int64)
    free = np.ones((n, slots), dtype=bool)
    rows = np.arange(n)
    positions = np.zeros((n, pairs), dtype=np.int64)
    for i in range(pairs):
        cum = np.cumsum(np.where(free, weights, 0), axis=1)
        r = (d[:, 4 * pairs + i] % cum[:, -1].astype(np.uint64)).astype(np.int64)
        g = (cum <= r[:, None]).sum(axis=1)  # the first slot whose running weight passes r
        free[rows, g] = False
        positions[:, i] = 2 * pairs + 2 * g
    tokens = np.empty((n, seq_len), dtype=np.int64)
    tokens[:, 0 : 2 * pairs : 2] = keys
    tokens[:, 1 : 2 * pairs : 2] = values
    tokens[:, 2 * pairs :] = (d[:, 5 * pairs :] % np.uint64(vocab)).astype(np.int64)
    tokens[rows[:, None], positions] = keys
    order = np.argsort(positions, axis=1)
    return tokens, np.take_along_axis(positions, order, 1), np.take_along_axis(values, order, 1)


def key_query_gaps(positions: np.ndarray, tokens: np.ndarray, pairs: int) -> np.ndarray:
    """Distance from each query to its pair's key (query position - key position), [n, P]."""
    rows = np.arange(tokens.shape[0])[:, None]
    asked = tokens[rows, positions]  # the query keys
    keys = tokens[:, 0 : 2 * pairs : 2]
    pair = np.argmax(keys[:, None, :] == asked[:, :, None], axis=2)
    return positions - 2 * pair


def accuracy_from_logits(logits: np.ndarray, positions: np.ndarray, answers: np.ndarray) -> float:
    """Fraction of query positions whose argmax is the answer; logits [n, L, vocab]."""
    predicted = np.argmax(logits[:, positions, :], axis=-1)
    return float(np.mean(predicted == answers))


def format_sequence(seq: MqarSequence) -> str:
    """One line of comma-separated ids (the format of ``ferrite mqar-sample``)."""
    return ",".join(str(t) for t in seq.tokens)
