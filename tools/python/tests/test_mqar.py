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


# The zoology layout (Zoology's MQAR, HazyResearch/zoology zoology/data/multiquery_ar.py, on this
# module's stream): power-law query slots, noise over the whole vocabulary, the vocab's ranges.
@pytest.mark.parametrize("pairs,seq_len,vocab,seed", [(16, 256, 8192, 0), (4, 64, 8192, 1_000_003), (8, 40, 64, 5),
                                                      (1, 4, 4, 2), (16, 64, 256, 9), (3, 30, 256, 2**64 - 5)])
def test_zoology_sequences_follow_the_layout(pairs, seq_len, vocab, seed):
    half = vocab // 2
    for seq in mqar.generate(seed, 30, pairs, seq_len, "zoology", vocab):
        t = seq.tokens
        assert len(t) == seq_len and all(0 <= x < vocab for x in t)
        keys, values = t[0 : 2 * pairs : 2], t[1 : 2 * pairs : 2]
        assert len(set(keys)) == pairs and all(1 <= k < half for k in keys)
        assert len(set(values)) == pairs and all(half <= v < vocab for v in values)
        positions = [p for p, _ in seq.targets]
        assert len(positions) == pairs and positions == sorted(set(positions))
        assert all(p >= 2 * pairs and p % 2 == 0 for p in positions), "queries start a slot"
        assert sorted(t[p] for p in positions) == sorted(keys), "every key is asked once"
        for pos, answer in seq.targets:
            assert answer == values[keys.index(t[pos])]


@pytest.mark.parametrize("pairs,seq_len,vocab,seed", [(16, 256, 8192, 0), (4, 64, 8192, 1_000_000), (8, 40, 64, 2**64 - 3),
                                                      (1, 4, 4, 6), (64, 1024, 8192, 3)])
def test_vectorised_zoology_generator_equals_the_sequential_one(pairs, seq_len, vocab, seed):
    seqs = mqar.generate(seed, 20, pairs, seq_len, "zoology", vocab)
    tokens, positions, answers = mqar.generate_batch(seed, 20, pairs, seq_len, "zoology", vocab)
    assert tokens.tolist() == [s.tokens for s in seqs]
    for i, s in enumerate(seqs):
        assert list(zip(positions[i].tolist(), answers[i].tolist())) == s.targets


def test_zoology_draw_order_is_the_documented_one():
    """Re-derive one zoology sequence by hand from the raw stream, as docs/mqar.md lists the draws."""
    pairs, seq_len, vocab = 3, 20, 16
    rng = mqar.SplitMix64(42)

    def distinct(n, k):  # Floyd, then a Fisher-Yates shuffle of the k items
        out = []
        for j in range(n - k, n):
            t = rng.next() % (j + 1)
            out.append(j if t in out else t)
        for j in range(k):
            r = j + rng.next() % (k - j)
            out[j], out[r] = out[r], out[j]
        return out

    keys = [1 + k for k in distinct(7, pairs)]
    values = [8 + v for v in distinct(8, pairs)]
    s = (seq_len - 2 * pairs) // 2
    w = [int((g + 1) ** -0.99 * 2**24) for g in range(s)]
    slots = []
    for _ in range(pairs):
        r = rng.next() % sum(w[g] for g in range(s) if g not in slots)
        free = [g for g in range(s) if g not in slots]
        running = np.cumsum([w[g] for g in free])
        slots.append(free[int(np.argmax(running > r))])
    expected = [x for k, v in zip(keys, values) for x in (k, v)] + [rng.next() % vocab for _ in range(seq_len - 2 * pairs)]
    for i, g in enumerate(slots):
        expected[2 * pairs + 2 * g] = keys[i]
    seq = mqar.generate(42, 1, pairs, seq_len, "zoology", vocab)[0]
    assert seq.tokens == expected
    assert seq.targets == sorted((2 * pairs + 2 * g, values[i]) for i, g in enumerate(slots))
    assert mqar.draws_per_sequence(pairs, seq_len, "zoology") == 5 * pairs + seq_len - 2 * pairs
    # The next sequence starts right after those draws (its first draw is Floyd's below(vocab/2 - 1 - P + 1)).
    assert mqar.generate(42, 2, pairs, seq_len, "zoology", vocab)[1].tokens[0] in range(1, 8)


def test_zoology_slot_weights_are_zoologys_power_law():
    w = mqar.slot_weights(112)
    assert w[0] == 2**24 and w == sorted(w, reverse=True)
    p = np.array(w) / sum(w)
    exact = 0.01 * np.arange(1, 113) ** (0.01 - 1)  # zoology: p = power_a * arange(1, space + 1) ** (power_a - 1)
    assert np.allclose(p, exact / exact.sum(), rtol=1e-5)
    # Pinned (f64 pow, then floor), so a Rust port can check its table against the same sums.
    assert (sum(w), w[111]) == (90810859, 157034)
    assert sum(mqar.slot_weights(512)) == 117684274


def test_zoology_placement_statistics_at_256_tokens_and_16_pairs():
    """Key-to-query distances: Zoology's power law puts half the queries within ~50 tokens of their
    key (median 50, mean 73, 10th / 90th percentiles 20 / 170, as numpy's own sampler gives with
    Zoology's code), where the uniform spread layout's median is 128."""
    tokens, positions, _ = mqar.generate_batch(7, 4000, 16, 256, "zoology", 8192)
    gaps = mqar.key_query_gaps(positions, tokens, 16)
    assert gaps.min() >= 2 and gaps.max() <= 254
    assert np.median(gaps) == 50
    assert abs(gaps.mean() - 73.3) < 1.0
    assert tuple(np.percentile(gaps, [10, 90])) == (20, 170)
    # The slot of the first pair's query: P(slot 0) = w_0 / sum(w) = 0.185 (Zoology's p[0]).
    first = (positions - 32) // 2
    slot_of_pair0 = first[np.arange(4000), np.argmax(tokens[np.arange(4000)[:, None], positions] == tokens[:, :1], axis=1)]
    assert abs(np.mean(slot_of_pair0 == 0) - 0.185) < 0.02
    t, p, _ = mqar.generate_batch(7, 4000, 16, 256, "spread")
    assert np.median(mqar.key_query_gaps(p, t, 16)) == 128


def test_zoology_noise_covers_the_whole_vocabulary_and_query_slots_end_in_noise():
    tokens, positions, answers = mqar.generate_batch(11, 2000, 16, 256, "zoology", 256)
    rest = np.ones_like(tokens, dtype=bool)
    rest[:, :32] = False
    rest[np.arange(2000)[:, None], positions] = False
    counts = np.bincount(tokens[rest], minlength=256)
    assert counts.min() > 0.8 * counts.mean() and counts.max() < 1.2 * counts.mean()
    after = tokens[np.arange(2000)[:, None], positions + 1]
    assert np.mean(after == answers) < 0.02, "the token after a query key is noise, not its value"


def test_zoology_parameters_are_checked():
    with pytest.raises(ValueError, match="vocab"):
        mqar.generate(0, 1, 16, 256, "zoology", 33)
    with pytest.raises(ValueError, match="vocab"):
        mqar.generate(0, 1, 8, 64, "zoology", 16)  # 8 keys need vocab / 2 - 1 >= 8
    with pytest.raises(ValueError, match="even"):
        mqar.generate_batch(0, 1, 8, 65, "zoology", 8192)
    with pytest.raises(ValueError, match="fixed token ranges"):
        mqar.generate(0, 1, 8, 64, "spread", 8192)
    assert len(mqar.generate(0, 1, 100, 400, "zoology", 8192)[0].targets) == 100  # more than 64 pairs
