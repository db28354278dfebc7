"""core.sampling: the engine's joint (response, reward) draw has exactly the law f * pi * mu."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chisquare

import grpo_theory as gt
from grpo_theory.core.sampling import (joint_cell_cdf, sample_cells_from_uniforms,
                                       sample_from_uniforms, sample_groups, sample_groups_joint)


def _problem():
    return gt.SoftmaxBandit.random(jax.random.PRNGKey(3), 3, 4, logit_scale=1.5).problem()


def _expected(p):
    f, pi, mu = (np.asarray(a) for a in (p.prompt_probs, p.probs, p.reward_means))
    return np.stack([f[:, None] * pi * (1 - mu), f[:, None] * pi * mu], axis=-1)  # (P, K, 2)


@pytest.mark.parametrize("dtype", [jnp.float64, jnp.float32])
def test_joint_draw_counts_pass_chi_square(dtype):
    p = _problem()
    x, y, z = sample_groups_joint(jax.random.PRNGKey(11), p, 20_000, 8, dtype=dtype)
    x = np.broadcast_to(np.asarray(x)[:, None], y.shape)
    P, K = p.probs.shape
    cell = (x * K + np.asarray(y)) * 2 + np.asarray(z).astype(int)
    counts = np.bincount(cell.ravel(), minlength=P * K * 2)
    exp = _expected(p).reshape(-1) * cell.size
    assert chisquare(counts, exp).pvalue > 1e-3


def test_chi_square_detects_a_wrong_law():
    # the same test rejects draws from a slightly different reward table (it can fail)
    p = _problem()
    q = gt.DiscreteProblem(p.prompt_probs, p.probs, p.scores,
                           np.clip(np.asarray(p.reward_means) + 0.03, 0, 1))
    x, y, z = sample_groups_joint(jax.random.PRNGKey(11), q, 20_000, 8)
    x = np.broadcast_to(np.asarray(x)[:, None], y.shape)
    P, K = p.probs.shape
    counts = np.bincount(((x * K + np.asarray(y)) * 2 + np.asarray(z).astype(int)).ravel(),
                         minlength=P * K * 2)
    assert chisquare(counts, _expected(p).reshape(-1) * y.size).pvalue < 1e-6


def test_zero_mass_cells_never_drawn():
    b = gt.SoftmaxBandit.random(jax.random.PRNGKey(1), 5, 3, logit_scale=2.0, binary=True)
    p = b.problem()
    mu = np.asarray(p.reward_means)
    assert set(np.unique(mu)) <= {0.0, 1.0}
    # uniforms at the very top of [0, 1) (float64 and float32) land in positive-mass cells
    top64 = jnp.full((5, 4), np.nextafter(1.0, 0.0))
    top32 = jnp.full((5, 4), np.nextafter(np.float32(1.0), np.float32(0.0)), dtype=jnp.float32)
    for u in (top64, top32, jnp.zeros((5, 4))):
        x, y, z = sample_cells_from_uniforms(p, jnp.arange(5) / 5.0 + 0.01, u)
        xs = np.broadcast_to(np.asarray(x)[:, None], y.shape)
        assert np.all(np.asarray(z) == mu[xs, np.asarray(y)])
    cdf = np.asarray(joint_cell_cdf(p))
    assert np.all(np.diff(cdf, axis=1) >= 0) and np.all(cdf[:, -1] == 1.0)


def test_sample_groups_draws_unchanged():
    # sample_groups (used by the training loops and companions) = split-3 keys + inverse CDF
    p = _problem()
    key = jax.random.PRNGKey(5)
    x, y, z = sample_groups(key, p, 4, 3)
    kx, ky, kz = jax.random.split(key, 3)
    x2, y2, z2 = sample_from_uniforms(p, jax.random.uniform(kx, (4,)),
                                      jax.random.uniform(ky, (4, 3)),
                                      jax.random.uniform(kz, (4, 3)))
    for a, b in ((x, x2), (y, y2), (z, z2)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_joint_inverse_cdf_is_exact_on_cell_boundaries():
    p = _problem()
    cdf = np.asarray(joint_cell_cdf(p))
    x0 = jnp.zeros((1,))  # prompt 0 (u = 0)
    for j in range(cdf.shape[1] - 1):  # u exactly at a boundary starts the next cell
        _, y, z = sample_cells_from_uniforms(p, x0, jnp.asarray([[cdf[0, j]]]))
        assert 2 * int(y[0, 0]) + int(z[0, 0]) == j + 1
