"""The three properties docs/spec.md §3.4 asks of BLA, proven on the reference."""

import numpy as np
import pytest

from ferrite_ref import bla, swa
from ferrite_ref.ops import softmax
from helpers import bla_config, random_bla, run, swa_config

HIDDEN = 16


# --- 1. full resolution is SWA -------------------------------------------------

@pytest.mark.parametrize("period", [3, 5, 9, 11])
def test_full_resolution_phi_is_one_hot(period):
    cfg = bla_config(period, (period - 1) // 2, slots=period)
    np.testing.assert_allclose(bla.phi_table(cfg), np.eye(period), atol=1e-12)


@pytest.mark.parametrize("period", [5, 9])
def test_full_resolution_equals_swa_without_rope(period):
    """2M+1 = P = N, dirichlet, gated: exactly SWA with window P, no RoPE, no sinks."""
    rng = np.random.default_rng(period)
    cfg = bla_config(period, (period - 1) // 2, slots=period, kernel="dirichlet", decay="gated")
    mixer = random_bla(cfg, HIDDEN, rng)
    window = swa.SlidingWindowAttention(swa_config(period, rope_theta=None), mixer.w)
    xs = rng.standard_normal((5 * period, HIDDEN))
    np.testing.assert_allclose(run(mixer, xs), run(window, xs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("heads,kv_heads", [(2, 1), (4, 2), (4, 1)])
def test_full_resolution_with_shared_kv_heads_equals_swa_gqa(heads, kv_heads):
    """num_kv_heads < num_heads (issue 28): query head h reads kv head h // (H / Hkv), as SWA's GQA."""
    period = 7
    rng = np.random.default_rng(heads * 10 + kv_heads)
    cfg = bla_config(period, 3, slots=period, heads=heads, kv_heads=kv_heads)
    assert cfg.num_kv_heads == kv_heads
    mixer = random_bla(cfg, HIDDEN, rng)
    assert mixer.w["k_proj.weight"].shape == (kv_heads * cfg.head_dim, HIDDEN)
    assert mixer.ks.shape == (kv_heads, period, cfg.head_dim)
    window = swa.SlidingWindowAttention(swa_config(period, heads=heads, kv_heads=kv_heads, rope_theta=None),
                                        mixer.w)
    xs = rng.standard_normal((4 * period, HIDDEN))
    np.testing.assert_allclose(run(mixer, xs), run(window, xs), rtol=1e-10, atol=1e-12)


def test_default_kv_heads_is_one_per_query_head():
    assert bla_config(8, 2, heads=4).num_kv_heads == 4


# --- 2. mode form = slot form ------------------------------------------------

def cosine_coefficients(cfg) -> np.ndarray:
    """c_m with kernel(x) = sum_m c_m cos(m x), derived from the definitions of docs/spec.md §3.4."""
    m = np.arange(cfg.modes + 1)
    weight = np.where(m == 0, 1.0, np.where(2 * m == cfg.period, 1.0, 2.0))
    if cfg.kernel == "fejer":
        weight = weight * (cfg.modes + 1 - m) / (cfg.modes + 1)
    return weight


def bla_mode_form(mixer, xs: np.ndarray) -> np.ndarray:
    """BLA (decay none/scalar) storing 2M+1 Fourier coefficients per key and value.

    Z_m = C_m + i S_m = sum_s gamma^(t-s) e^{i w_m (t-s)} x_s, updated by a
    damped rotation; slot n is rebuilt as
    (1/P) sum_m c_m [cos(w_m (u_n - t)) C_m - sin(w_m (u_n - t)) S_m].
    """
    cfg, w = mixer.cfg, mixer.w
    gamma = cfg.gamma if cfg.decay == "scalar" else 1.0
    omega = 2 * np.pi * np.arange(cfg.modes + 1) / cfg.period  # [M+1]
    coeff = cosine_coefficients(cfg)
    phases = np.arange(cfg.slots) * cfg.period / cfg.slots  # u_n
    zk = np.zeros((cfg.modes + 1, cfg.num_heads, cfg.head_dim), dtype=complex)
    zv = np.zeros_like(zk)
    outputs = []
    for t, x in enumerate(xs):
        q, k, v = ((w[f"{n}_proj.weight"] @ x).reshape(cfg.num_heads, cfg.head_dim) for n in "qkv")
        rotation = (gamma * np.exp(1j * omega))[:, None, None]
        zk = rotation * zk + k
        zv = rotation * zv + v
        angle = omega[:, None] * (phases[None, :] - t)  # [M+1, N]
        basis_c = coeff[:, None] * np.cos(angle) / cfg.period
        basis_s = coeff[:, None] * np.sin(angle) / cfg.period
        ks = np.einsum("mn,mhk->hnk", basis_c, zk.real) - np.einsum("mn,mhk->hnk", basis_s, zk.imag)
        vs = np.einsum("mn,mhk->hnk", basis_c, zv.real) - np.einsum("mn,mhk->hnk", basis_s, zv.imag)
        live = bla.live_slots(min(t, cfg.period), cfg)
        p = softmax(np.einsum("hnk,hk->hn", ks[:, live], q) / np.sqrt(cfg.head_dim))
        outputs.append(w["o_proj.weight"] @ np.einsum("hn,hnv->hv", p, vs[:, live]).reshape(-1))
    return np.stack(outputs)


@pytest.mark.parametrize("kernel", ["dirichlet", "fejer"])
@pytest.mark.parametrize("decay, gamma", [("none", 1.0), ("scalar", 0.9)])
@pytest.mark.parametrize("period, modes, slots", [(8, 4, None), (12, 3, 8), (11, 3, 12), (16, 2, 5)])
def test_mode_form_equals_slot_form(kernel, decay, gamma, period, modes, slots):
    rng = np.random.default_rng(period * 100 + modes)
    cfg = bla_config(period, modes, slots, kernel=kernel, decay=decay, gamma=gamma)
    mixer = random_bla(cfg, HIDDEN, rng)
    xs = rng.standard_normal((3 * period + 3, HIDDEN))
    np.testing.assert_allclose(bla_mode_form(mixer, xs), run(mixer, xs), rtol=1e-9, atol=1e-10)


# --- 3. fewer modes = blurred window -------------------------------------------

BLURRED = [(16, 3, 7), (16, 4, None), (12, 3, 12), (8, 4, None), (10, 5, 6), (13, 2, 13)]


@pytest.mark.parametrize("kernel", ["dirichlet", "fejer"])
@pytest.mark.parametrize("period, modes, slots", BLURRED)
def test_write_weights_sum_to_one_over_a_period(kernel, period, modes, slots):
    phi = bla.phi_table(bla_config(period, modes, slots, kernel=kernel))
    np.testing.assert_allclose(phi.sum(axis=0), 1.0, atol=1e-12)


@pytest.mark.parametrize("kernel", ["dirichlet", "fejer"])
@pytest.mark.parametrize("period, modes, slots", BLURRED)
def test_write_weights_peak_at_the_slot_phase(kernel, period, modes, slots):
    cfg = bla_config(period, modes, slots, kernel=kernel)
    phi = bla.phi_table(cfg)
    phases = np.arange(cfg.slots) * period / cfg.slots
    peaks = np.argmax(phi, axis=0)
    distance = np.abs((peaks - phases + period / 2) % period - period / 2)
    assert np.all(distance <= 0.5 + 1e-12), (peaks, phases)
    r = np.arange(period)
    for n in np.flatnonzero(phases == np.round(phases)):  # symmetric about an integer phase
        u = int(phases[n])
        np.testing.assert_allclose(phi[(u + r) % period, n], phi[(u - r) % period, n], atol=1e-12)


@pytest.mark.parametrize("period, modes", [(16, 3), (11, 2), (9, 4)])
def test_fejer_is_non_negative_below_nyquist(period, modes):
    assert bla.phi_table(bla_config(period, modes, kernel="fejer")).min() >= -1e-15


@pytest.mark.parametrize("kernel", ["dirichlet", "fejer"])
def test_slot_is_kernel_weighted_average_of_tokens_near_its_phase(kernel):
    """After one period with decay none, slot n = sum_s phi_n(s) k_s with weights summing to 1."""
    rng = np.random.default_rng(7)
    cfg = bla_config(16, 3, kernel=kernel, decay="none")
    mixer = random_bla(cfg, HIDDEN, rng)
    xs = rng.standard_normal((cfg.period, HIDDEN))
    run(mixer, xs)
    keys = np.einsum("kd,td->tk", mixer.w["k_proj.weight"], xs).reshape(cfg.period, cfg.num_heads, cfg.head_dim)
    expected = np.einsum("sn,shk->hnk", bla.phi_table(cfg), keys)
    np.testing.assert_allclose(mixer.ks, expected, atol=1e-12)


def test_more_modes_sharpen_the_window():
    """The weight at the slot phase grows with M: (2M+1)/P for dirichlet."""
    peaks = [bla.phi_table(bla_config(16, m, slots=16))[0, 0] for m in range(1, 8)]
    np.testing.assert_allclose(peaks, [(2 * m + 1) / 16 for m in range(1, 8)], atol=1e-12)


def test_live_slots_warm_up():
    cfg = bla_config(8, 2, slots=5)  # phases 0, 1.6, 3.2, 4.8, 6.4
    assert [int(bla.live_slots(t, cfg).sum()) for t in range(9)] == [1, 1, 2, 2, 3, 4, 4, 5, 5]
