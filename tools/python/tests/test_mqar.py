"""The Python MQAR generator (ferrite_ref/mqar.py) against docs/mqar.md, and,
when FERRITE_BIN is set, against the Rust generator (`ferrite mqar-sample`)."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from ferrite_ref import mqar

FERRITE_BIN = os.environ.get("FERRITE_BIN")

# The first sequence of seed 0 with the defaults (P=8, L=64), as both
# generators print it; pins the stream, the draw order and the layout.
SEED0_FIRST = (
    "47,67,37,102,35,73,31,118,11,123,8,111,53,89,30,107,149,134,164,172,151,141,170,140,"
    "169,187,128,144,150,178,143,165,176,169,183,131,131,161,159,169,170,142,168,183,184,183,"
    "173,137,37,102,53,89,30,107,11,123,35,73,8,111,47,67,31,118"
)

# The same with queries="spread" (the Rust unit test pins it too): the pairs
# are the same draws, the rest differs.
SEED0_FIRST_SPREAD = (
    "47,67,37,102,35,73,31,118,11,123,8,111,53,89,30,107,187,128,150,178,8,111,30,107,"
    "35,73,170,142,183,184,173,137,37,102,31,118,133,129,47,67,176,157,142,131,53,89,"
    "128,175,11,123,136,183,146,168,180,161,167,138,173,168,175,181,167,166"
)


def test_splitmix64_matches_the_published_reference_values():
    rng = mqar.SplitMix64(0)
    assert rng.next() == 0xE220A8397B1DCDAF
    assert rng.next() == 0x6E789E6AA1B965F4


def test_first_sequence_of_the_evaluation_seed_is_pinned():
    assert mqar.format_sequence(mqar.generate(0, 1)[0]) == SEED0_FIRST
    spread = mqar.generate(0, 1, queries="spread")[0]
    assert mqar.format_sequence(spread) == SEED0_FIRST_SPREAD
    assert spread.targets == [(20, 111), (22, 107), (24, 73), (32, 102), (34, 118), (38, 67), (44, 89), (48, 123)]


@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_123), (3, 20, 7), (16, 64, 5), (1, 4, 9)])
def test_sequences_follow_the_layout(pairs, seq_len, seed):
    for seq in mqar.generate(seed, 30, pairs, seq_len):
        t = seq.tokens
        assert len(t) == seq_len
        keys, values = t[0 : 2 * pairs : 2], t[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and all(0 <= k < 64 for k in keys)
        assert all(64 <= v < 128 for v in values)
        assert all(128 <= x < 192 for x in t[2 * pairs : seq_len - 2 * pairs])
        queries = t[seq_len - 2 * pairs :: 2]
        assert sorted(queries) == sorted(keys), "the queries are a permutation of the keys"
        assert [p for p, _ in seq.targets] == list(range(seq_len - 2 * pairs, seq_len, 2))
        for pos, answer in seq.targets:
            assert t[pos + 1] == answer == values[keys.index(t[pos])]


@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_123), (3, 20, 7), (16, 64, 5), (1, 4, 9), (4, 16, 3), (2, 100, 4)])
def test_spread_sequences_follow_the_layout(pairs, seq_len, seed):
    slots = (seq_len - 2 * pairs) // 2
    for seq in mqar.generate(seed, 30, pairs, seq_len, "spread"):
        t = seq.tokens
        assert len(t) == seq_len
        keys, values = t[0 : 2 * pairs : 2], t[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and all(0 <= k < 64 for k in keys)
        assert all(64 <= v < 128 for v in values)
        positions = [p for p, _ in seq.targets]
        assert len(positions) == pairs and positions == sorted(set(positions))
        assert all(p >= 2 * pairs and (p - 2 * pairs) % 2 == 0 for p in positions), "queries start a slot"
        assert sorted(t[p] for p in positions) == sorted(keys), "the queries are a permutation of the keys"
        for pos, answer in seq.targets:
            assert t[pos + 1] == answer == values[keys.index(t[pos])]
        for i in range(slots):
            at = 2 * pairs + 2 * i
            if at not in positions:
                assert all(128 <= x < 192 for x in t[at : at + 2]), "the other slots are noise"
    # With P = S every slot is a query; otherwise the first query moves about.
    assert [p for p, _ in mqar.generate(5, 1, 4, 16, "spread")[0].targets] == [8, 10, 12, 14]
    assert len({s.targets[0][0] for s in mqar.generate(0, 50, 8, 64, "spread")}) > 5


def test_spread_draw_order_is_the_documented_one():
    """Re-derive one spread sequence by hand from the raw stream, as docs/mqar.md lists the draws."""
    pairs, seq_len = 4, 30
    rng = mqar.SplitMix64(42)
    a = list(range(64))
    for j in range(pairs):
        r = j + rng.next() % (64 - j)
        a[j], a[r] = a[r], a[j]
    values = [64 + rng.next() % 64 for _ in range(pairs)]
    o = list(range(pairs))
    for j in range(pairs):
        r = j + rng.next() % (pairs - j)
        o[j], o[r] = o[r], o[j]
    s = (seq_len - 2 * pairs) // 2
    expected = [x for i in range(pairs) for x in (a[i], values[i])]
    targets, c = [], 0
    for i in range(s):
        r = rng.next() % (s - i)
        n1, n2 = 128 + rng.next() % 64, 128 + rng.next() % 64
        if r < pairs - c:
            targets.append((len(expected), values[o[c]]))
            expected += [a[o[c]], values[o[c]]]
            c += 1
        else:
            expected += [n1, n2]
    assert c == pairs
    seq = mqar.generate(42, 1, pairs, seq_len, "spread")[0]
    assert seq.tokens == expected
    assert seq.targets == targets
    assert mqar.draws_per_sequence(pairs, seq_len, "spread") == 3 * pairs + 3 * s
    # The next sequence starts right after those draws: its first key is
    # a[0] after swapping a[0] with a[below(64)], i.e. below(64).
    assert mqar.generate(42, 2, pairs, seq_len, "spread")[1].tokens[0] == rng.next() % 64


def test_draw_order_is_the_documented_one():
    """Re-derive one sequence by hand from the raw stream, step by step as docs/mqar.md lists them."""
    pairs, seq_len = 4, 24
    rng = mqar.SplitMix64(42)
    a = list(range(64))
    for j in range(pairs):
        r = j + rng.next() % (64 - j)
        a[j], a[r] = a[r], a[j]
    values = [64 + rng.next() % 64 for _ in range(pairs)]
    noise = [128 + rng.next() % 64 for _ in range(seq_len - 4 * pairs)]
    o = list(range(pairs))
    for j in range(pairs):
        r = j + rng.next() % (pairs - j)
        o[j], o[r] = o[r], o[j]
    expected = [x for i in range(pairs) for x in (a[i], values[i])] + noise
    expected += [x for i in o for x in (a[i], values[i])]
    assert mqar.generate(42, 1, pairs, seq_len)[0].tokens == expected
    assert mqar.draws_per_sequence(pairs, seq_len) == pairs + pairs + len(noise) + pairs


@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_000), (4, 40, 2**64 - 3), (1, 4, 6)])
def test_vectorised_spread_generator_equals_the_sequential_one(pairs, seq_len, seed):
    seqs = mqar.generate(seed, 40, pairs, seq_len, "spread")
    tokens, positions, answers = mqar.generate_batch(seed, 40, pairs, seq_len, "spread")
    assert tokens.tolist() == [s.tokens for s in seqs]
    for i, s in enumerate(seqs):
        assert list(zip(positions[i].tolist(), answers[i].tolist())) == s.targets


@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_000), (5, 33, 2**64 - 3)])
def test_vectorised_generator_equals_the_sequential_one(pairs, seq_len, seed):
    seqs = mqar.generate(seed, 40, pairs, seq_len)
    tokens, positions, answers = mqar.generate_batch(seed, 40, pairs, seq_len)
    assert tokens.tolist() == [s.tokens for s in seqs]
    for i, s in enumerate(seqs):
        assert list(zip(positions.tolist(), answers[i].tolist())) == s.targets


def test_sequences_are_drawn_one_after_the_other_from_one_stream():
    assert [s.tokens for s in mqar.generate(3, 5)][:2] == [s.tokens for s in mqar.generate(3, 2)]
    assert mqar.generate(3, 1) != mqar.generate(4, 1)


def test_bad_parameters_are_rejected():
    with pytest.raises(ValueError):
        mqar.generate(0, 1, pairs=0)
    with pytest.raises(ValueError):
        mqar.generate(0, 1, pairs=65, seq_len=400)
    with pytest.raises(ValueError):
        mqar.generate_batch(0, 1, pairs=8, seq_len=31)
    with pytest.raises(ValueError, match="even"):
        mqar.generate(0, 1, pairs=8, seq_len=65, queries="spread")
    with pytest.raises(ValueError):
        mqar.generate_batch(0, 1, pairs=8, seq_len=30, queries="spread")
    with pytest.raises(ValueError):
        mqar.generate(0, 1, queries="middle")


def test_accuracy_scores_the_argmax_at_query_positions():
    tokens, positions, answers = mqar.generate_batch(0, 4)
    logits = np.zeros((4, 64, 256))
    for i in range(4):
        logits[i, positions, answers[i]] = 1.0
    assert mqar.accuracy_from_logits(logits, positions, answers) == 1.0
    logits[0, positions[0]] = 0.0
    logits[0, positions[0], 200] = 1.0
    assert mqar.accuracy_from_logits(logits, positions, answers) == 1.0 - 1.0 / 32


@pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")
@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_007), (4, 40, 11)])
def test_python_and_rust_generators_agree(pairs, seq_len, seed):
    done = subprocess.run(
        [FERRITE_BIN, "mqar-sample", "--seed", str(seed), "-n", "25", "--pairs", str(pairs), "--seq-len", str(seq_len)],
        capture_output=True, text=True, timeout=60, check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines == [mqar.format_sequence(s) for s in mqar.generate(seed, 25, pairs, seq_len)]


@pytest.mark.skipif(not FERRITE_BIN, reason="FERRITE_BIN is not set")
@pytest.mark.parametrize("pairs,seq_len,seed", [(8, 64, 0), (8, 64, 1_000_007), (4, 40, 11), (1, 4, 3), (16, 256, 2**64 - 1)])
def test_python_and_rust_spread_generators_agree(pairs, seq_len, seed):
    done = subprocess.run(
        [FERRITE_BIN, "mqar-sample", "--seed", str(seed), "-n", "25", "--pairs", str(pairs), "--seq-len", str(seq_len),
         "--queries", "spread"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines == [mqar.format_sequence(s) for s in mqar.generate(seed, 25, pairs, seq_len, "spread")]
