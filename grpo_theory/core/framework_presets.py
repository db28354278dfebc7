"""The frameworks' advantage presets with their own arithmetic: verl's vectorised GRPO
(``grpo_vectorized``: float32 moments, its ``eps`` inside and outside the square root) and the
REINFORCE-with-baseline presets whose normalisation runs over the whole batch
(``reinforce_baseline``: verl's ``reinforce_plus_plus_baseline`` and OpenRLHF's
``reinforce_baseline``). Each is registered on import under its framework's name.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._precision import float64
from .estimators import Estimator, batch_axes, centred, constant_group, register

@float64
def grpo_vectorized(eps: float = 1e-6, float32: bool = True, name=None) -> Estimator:
    r"""verl v0.7's vectorised GRPO advantage (``adv_estimator=grpo_vectorized``; verl 0.9.1
    takes two-pass moments without the floor, which is ``grpo_std_verl`` in float32).

    One-pass group moments ``s1 = sum Z``, ``s2 = sum Z^2`` (in float32 when ``float32``, as
    verl's ``group_mean_std``), ``var = (s2 - s1^2/G) / (G - 1)`` floored at ``eps``, and

    .. math:: A_g = (Z_g - s_1/G) / (\sqrt{\max(var, \epsilon)} + \epsilon).

    The floor caps the advantages of nearly constant groups at ``|Z - Zbar| / 1e-3``, unlike the
    loop form ``grpo_std_verl`` (std + eps only). Exactly constant groups get 0 (module doc).

    Args:
        eps: the variance floor and the std offset (verl uses one ``epsilon`` for both).
        float32: compute the moments and the advantages in float32 (verl's dtype).
        name: registry name.

    Returns:
        An :class:`Estimator`; the advantages are returned in the caller's dtype.
    """
    if not (eps >= 0.0 and jnp.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")

    def adv(z, ctx):
        s = z.astype(jnp.float32) if float32 else z
        g = z.shape[-1]
        s1 = jnp.sum(s, axis=-1, keepdims=True)
        s2 = jnp.sum(s * s, axis=-1, keepdims=True)
        mean = s1 / g
        var = (s2 - s1 * s1 / g) / max(g - 1, 1)
        std = jnp.sqrt(jnp.maximum(var, jnp.asarray(eps, s.dtype)))
        a = ((s - mean) / (std + jnp.asarray(eps, s.dtype))).astype(z.dtype)
        return jnp.where(constant_group(z), 0.0, a)

    if name is None:
        name = f"grpo_vectorized(eps={eps:g}{',float32' if float32 else ''})"
    return Estimator(name, adv, min_group_size=2, params=dict(eps=eps, float32=float32))


register(grpo_vectorized(1e-6, float32=True, name="grpo_vectorized_verl"))


@float64
def reinforce_baseline(framework: str = "verl", tokens_per_response: int = 1,
                       std_norm: bool = True, name=None) -> Estimator:
    r"""REINFORCE++-baseline: group-mean centring, then whitening over the whole batch.

    ``c_bg = Z_bg - Zbar_b`` (zero for constant groups), then with ``T = B G L`` tokens (each
    response's advantage is repeated on its ``L = tokens_per_response`` tokens; the frameworks
    whiten token-weighted):

    * ``"verl"`` (``reinforce_plus_plus_baseline``, ``masked_whiten``): ``m = L sum c / (T +
      1e-8)``, ``v = L sum (c - m)^2 / (T + 1e-8) * T / (T - 1)``, ``A = (c - m) / sqrt(v +
      1e-8)``, in the caller's dtype;
    * ``"openrlhf"`` (``reinforce_baseline``): ``m = L sum c / T``, ``v = L sum (c - m)^2 / T``,
      ``A = (c - m) / sqrt(max(v, 1e-8))``, in float32 (``.float()``); ``std_norm=False`` is
      OpenRLHF's ``no_std_norm`` (``A = c - m``).

    Batch-coupled: ``z`` is ``(..., B, G)``.

    Args:
        framework: ``"verl"`` or ``"openrlhf"``.
        tokens_per_response: L >= 1 (equal lengths; 1: one token per response).
        std_norm: divide by the batch std (``False``: OpenRLHF ``no_std_norm``).
        name: registry name.

    Returns:
        A batch-coupled :class:`Estimator`.
    """
    if framework not in ("verl", "openrlhf"):
        raise ValueError(f"framework must be 'verl' or 'openrlhf', got {framework!r}")
    if isinstance(tokens_per_response, bool) or not isinstance(tokens_per_response, int) \
            or tokens_per_response < 1:
        raise ValueError(f"tokens_per_response must be an integer >= 1, got {tokens_per_response!r}")
    L = tokens_per_response

    def adv(z, ctx):
        c = centred(z, ctx)
        ax = batch_axes(z)
        if framework == "openrlhf":
            c = c.astype(jnp.float32)
        T = L * int(np.prod([z.shape[a] for a in ax]))
        if framework == "verl":
            m = L * jnp.sum(c, axis=ax, keepdims=True) / (T + 1e-8)
            v = L * jnp.sum((c - m) ** 2, axis=ax, keepdims=True) / (T + 1e-8) * (T / (T - 1))
            out = (c - m) * jax.lax.rsqrt(v + 1e-8) if std_norm else c - m
        else:
            m = L * jnp.sum(c, axis=ax, keepdims=True) / T
            v = L * jnp.sum((c - m) ** 2, axis=ax, keepdims=True) / T
            out = (c - m) * jax.lax.rsqrt(jnp.maximum(v, jnp.float32(1e-8))) if std_norm else c - m
        return out.astype(z.dtype)

    if name is None:
        name = f"reinforce_baseline({framework},L={L}{'' if std_norm else ',no_std_norm'})"
    return Estimator(name, adv, min_group_size=2, batch_coupled=True,
                     params=dict(framework=framework, tokens_per_response=L, std_norm=std_norm))


register(reinforce_baseline("verl", name="reinforce_plus_plus_baseline_verl"),
         "reinforce_plus_plus_baseline")
register(reinforce_baseline("openrlhf", name="reinforce_baseline_openrlhf"), "reinforce_baseline")
