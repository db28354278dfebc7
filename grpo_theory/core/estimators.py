r"""Policy-gradient estimators as pure advantage functions, in a registry keyed by name.

Every estimator of the package has the form (the main paper, Algorithm 1)

.. math:: \hat g = \frac{1}{BG} \sum_{b,g} s_{bg} A_{bg},

so an estimator is fully described by how it maps a group's rewards ``z`` (shape ``(..., G)``) to
advantages ``A`` (same shape). Prompt-level constants an estimator may need (the true value
``V(x)`` for the oracle, the MSE-optimal baseline ``b*(x)``, the prompt index for a user baseline
``b(x)``) come in a :class:`PromptContext` whose fields broadcast against ``z[..., 0]``.

Registry (Table 1 of the main paper plus the practical variants):

=================  ==========================================================================
``vanilla``        ``A = Z`` (no baseline)
``oracle``         ``A = Z - V(x)``
``grpo`` / ``rloo`` ``A = Z_g - mean_{k != g} Z_k`` (leave-one-out; Lemma 1)
``grpo_mean``      ``A = Z_g - mean_k Z_k`` (self-inclusive centring, Dr. GRPO / TRL)
``grpo_std``       ``A = (Z_g - centre) / (std_ddof(Z) + eps)`` (classic GRPO)
``optimal``        ``A = Z - b*(x)``, ``b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x]``
``baseline``       ``A = Z - b(x)`` for a user array ``b`` (see :func:`prompt_baseline`)
=================  ==========================================================================

Zero-variance rule (documented, used by every group-centred estimator): if a group's rewards
are all equal (compared exactly) every advantage is exactly 0, for every eps including
``eps = 0`` (where the std formula would read 0/0). Checking equality, not ``std == 0``, keeps
floating-point rounding of the mean (``z - mean(z)`` can be 1 ulp off for equal z) from turning
a constant group into O(1) advantages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import jax.numpy as jnp

__all__ = [
    "PromptContext",
    "Estimator",
    "register",
    "get_estimator",
    "available_estimators",
    "compute_advantages",
    "grpo_std",
    "prompt_baseline",
    "STD_PRESETS",
]


class PromptContext(NamedTuple):
    """Prompt-level quantities available to an advantage function (shape ``z.shape[:-1]``)."""

    prompt: jnp.ndarray | None = None  # integer prompt index
    value: jnp.ndarray | None = None  # V(x) under the current policy (oracle only)
    optimal_baseline: jnp.ndarray | None = None  # b*(x)


AdvantageFn = Callable[[jnp.ndarray, PromptContext], jnp.ndarray]


@dataclass(frozen=True, eq=False)  # hashed by identity: a static argument of jit
class Estimator:
    """A named estimator.

    ``exact`` names the closed form used by :func:`grpo_theory.exact_mse` (``"prompt_baseline"``,
    ``"loo"``, ``"mean"``) or is ``None``. ``binary_exact`` says the advantages are a
    permutation-equivariant function of the group's rewards only (plus prompt constants), which
    makes the MSE exactly computable for binary rewards by conditioning on the number of correct
    responses (:mod:`grpo_theory.exact`).
    """

    name: str
    advantage: AdvantageFn
    min_group_size: int = 1
    exact: str | None = None
    binary_exact: bool = True
    params: dict = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # context fields the advantage reads

    def __call__(self, z, ctx: PromptContext | None = None):
        return self.advantage(jnp.asarray(z), ctx if ctx is not None else PromptContext())


_REGISTRY: dict[str, Estimator] = {}


def register(est: Estimator, *aliases: str) -> Estimator:
    """Add an estimator (and aliases) to the registry; returns it for chaining."""
    for key in (est.name, *aliases):
        _REGISTRY[key] = est
    return est


def available_estimators() -> list[str]:
    return sorted(_REGISTRY)


def get_estimator(name_or_est) -> Estimator:
    """Look up an estimator by registry name, or pass an :class:`Estimator` through."""
    if isinstance(name_or_est, Estimator):
        return name_or_est
    if not isinstance(name_or_est, str) or name_or_est not in _REGISTRY:
        raise ValueError(
            f"estimator must be one of {available_estimators()} or an Estimator, got {name_or_est!r}"
        )
    return _REGISTRY[name_or_est]


def _require(ctx: PromptContext, field_name: str, est: str):
    val = getattr(ctx, field_name)
    if val is None:
        raise ValueError(f"estimator {est!r} needs PromptContext.{field_name}")
    return jnp.asarray(val)[..., None]


# --- the advantage functions -------------------------------------------------------------------


def _vanilla(z, ctx):
    return z


def _oracle(z, ctx):
    return z - _require(ctx, "value", "oracle")


def _constant_group(z):
    """True where every reward of the group is equal (the zero-variance rule applies)."""
    return jnp.all(z == z[..., :1], axis=-1, keepdims=True)


def _loo(z, ctx):
    g = z.shape[-1]
    total = jnp.sum(z, axis=-1, keepdims=True)
    return jnp.where(_constant_group(z), 0.0, z - (total - z) / (g - 1))


def _mean(z, ctx):
    return jnp.where(_constant_group(z), 0.0, z - jnp.mean(z, axis=-1, keepdims=True))


def _optimal(z, ctx):
    return z - _require(ctx, "optimal_baseline", "optimal")


register(Estimator("vanilla", _vanilla, exact="prompt_baseline"))
register(Estimator("oracle", _oracle, exact="prompt_baseline", needs=("value",)))
register(Estimator("grpo", _loo, min_group_size=2, exact="loo"), "rloo")
register(Estimator("grpo_mean", _mean, min_group_size=2, exact="mean"))
register(Estimator("optimal", _optimal, exact="prompt_baseline", needs=("optimal_baseline",)))


# --- std normalisation -------------------------------------------------------------------------

#: Conventions of public implementations (Table 1 and its footnotes): ddof of the group std, eps added
#: to it, and the centring. ``drgrpo`` is Dr. GRPO's fix: no std division at all.
STD_PRESETS: dict[str, dict] = {
    "trl": dict(ddof=1, eps=1e-4, centre="mean"),
    "verl": dict(ddof=1, eps=1e-6, centre="mean"),
    "openrlhf": dict(ddof=1, eps=1e-9, centre="mean"),
    "tunix": dict(ddof=1, eps=1e-6, centre="mean"),
    "oat": dict(ddof=1, eps=1e-8, centre="mean"),
    "easydel": dict(ddof=0, eps=1e-6, centre="mean"),
    "paper": dict(ddof=1, eps=0.0, centre="loo"),  # Appendix A: (Z_g - Zbar_(-g)) / se
    "drgrpo": dict(ddof=1, eps=0.0, centre="mean", scale=False),
}


def grpo_std(
    ddof: int = 1, eps: float = 1e-6, centre: str = "mean", scale: bool = True, name=None
) -> Estimator:
    r"""Classic GRPO advantage ``(Z_g - c_g) / (std_ddof(Z) + eps)``.

    ``centre`` is ``"mean"`` (``c_g = Zbar``) or ``"loo"`` (``c_g = Zbar_(-g)``, the paper's
    Appendix A form); ``scale=False`` skips the division (Dr. GRPO). The std is taken around the
    full group mean with ``ddof`` in {0, 1}. Zero-variance groups get advantage 0 (module doc).
    """
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if not (eps >= 0.0 and jnp.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if centre not in ("mean", "loo"):
        raise ValueError(f"centre must be 'mean' or 'loo', got {centre!r}")
    centre_fn = _mean if centre == "mean" else _loo

    def adv(z, ctx):
        num = centre_fn(z, ctx)
        if not scale:
            return num
        std = jnp.std(z, axis=-1, ddof=ddof, keepdims=True)
        zero_var = _constant_group(z) | (std <= 0.0)
        safe = jnp.where(zero_var, 1.0, std + eps)
        return jnp.where(zero_var, 0.0, num / safe)

    if name is None:
        name = f"grpo_std(ddof={ddof},eps={eps:g},centre={centre}{'' if scale else ',noscale'})"
    exact = None if scale else ("mean" if centre == "mean" else "loo")
    return Estimator(
        name, adv, min_group_size=2, exact=exact,
        params=dict(ddof=ddof, eps=eps, centre=centre, scale=scale),
    )


register(grpo_std(ddof=1, eps=1e-6, centre="mean", name="grpo_std"))
for _preset, _kw in STD_PRESETS.items():
    register(grpo_std(**_kw, name=f"grpo_std_{_preset}"))


def prompt_baseline(b, name: str = "baseline") -> Estimator:
    """Constant prompt-only baseline ``A = Z - b(x)`` for a user array ``b`` of shape (P,)."""
    b = jnp.asarray(b, dtype=jnp.float64)
    if b.ndim != 1 or not bool(jnp.all(jnp.isfinite(b))):
        raise ValueError("b must be a finite 1-d array with one baseline per prompt")

    def adv(z, ctx):
        if ctx.prompt is None:
            raise ValueError("estimator 'baseline' needs PromptContext.prompt")
        return z - b[jnp.asarray(ctx.prompt)][..., None]

    return Estimator(name, adv, exact="prompt_baseline", params=dict(b=b), needs=("prompt",))


def compute_advantages(estimator, rewards, value=None, optimal_baseline=None, prompt=None):
    """Functional entry point: advantages for rewards of shape ``(..., G)``.

    Raises ``ValueError`` for non-finite rewards, a group smaller than the estimator allows, or a
    missing prompt constant.
    """
    est = get_estimator(estimator)
    z = jnp.asarray(rewards, dtype=jnp.float64)
    if z.ndim < 1:
        raise ValueError("rewards must have a trailing group axis of size G")
    if not bool(jnp.all(jnp.isfinite(z))):
        raise ValueError("rewards must be finite (no NaN or inf)")
    if z.shape[-1] < est.min_group_size:
        raise ValueError(
            f"group_size must be >= {est.min_group_size} for estimator {est.name!r}, "
            f"got G={z.shape[-1]}"
        )
    return est(z, PromptContext(prompt=prompt, value=value, optimal_baseline=optimal_baseline))
