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

Framework conventions (presets named after each framework's own option; the table of options,
defaults and versions is :mod:`grpo_theory.core.frameworks`):

==================================  =============================================================
``grpo_std_<framework>``            group mean, group std with the framework's ddof and eps
``grpo_std_trl_batch``              TRL ``scale_rewards="batch"``: group mean, std of the batch
``grpo_std_easydel_batch``          EasyDeL ``scale_rewards="batch"`` (ddof 0, eps 1e-4)
``grpo_vectorized_verl``            verl v0.7 ``grpo_vectorized``: float32 one-pass variance floored
                                    at eps, ``(Z - mean) / (sqrt(max(var, eps)) + eps)``
``reinforce_plus_plus_baseline``    verl: group-mean centring, then whitening over the batch
``reinforce_baseline``              OpenRLHF: the same with ddof 0, ``max(var, 1e-8)``, float32
==================================  =============================================================

**Closed forms travel with the estimator** (``Estimator.closed_form``, a
:class:`~grpo_theory.core.closed_forms.ClosedForm`): the exact MSE, the advisor's prediction, the
leading order and the Gaussian theory call its methods, and refuse an estimator without the piece
they need by name. Besides the rewards an advantage may read what its ``needs`` declare from the
:class:`PromptContext`: prompt constants, each response's squared score norm (``score_sq``, for
weighted baselines), a state carried across steps (``state``, with ``init_state`` and
``update_state``: a history baseline) and verl's response lengths, greedy rewards and reward
channels (``length``, ``greedy_reward``, ``channels``: :mod:`grpo_theory.core.verl_estimators`).

**Batch-coupled** estimators (``Estimator.batch_coupled``) normalise over the whole batch: their
advantage function reads rewards of shape ``(..., B, G)`` and reduces over the last two axes (a
1-d ``z`` is one group, B = 1), so a response's advantage depends on the other prompts' groups.
The Monte Carlo engine and the training loop pass ``(..., B, G)`` and support them; the exact
closed forms assume independent groups and refuse them.

Zero-variance rule (documented, used by every group-centred estimator): if a group's rewards
are all equal (compared exactly) every advantage is exactly 0, for every eps including
``eps = 0`` (where the std formula would read 0/0). Checking equality, not ``std == 0``, keeps
floating-point rounding of the mean (``z - mean(z)`` can be 1 ulp off for equal z) from turning
a constant group into O(1) advantages.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from .. import _validation as V
from .._precision import float64
from .closed_forms import (ClosedForm, GivenBaseline, GroupMean, LeaveOneOut, NoBaseline,
                           OptimalBaseline, OracleBaseline)


class PromptContext(NamedTuple):
    """What an advantage function may read besides the rewards (the estimator's ``needs``).

    Prompt-level fields have shape ``z.shape[:-1]``; response-level fields ``z.shape``; ``state``
    is the estimator's own carried state (:meth:`Estimator.init_state`), any pytree.
    """

    prompt: jnp.ndarray | None = None  # integer prompt index
    value: jnp.ndarray | None = None  # V(x) under the current policy (oracle only)
    optimal_baseline: jnp.ndarray | None = None  # b*(x)
    score_sq: jnp.ndarray | None = None  # per response: the squared score norm ||s||^2
    state: object = None  # a stateful estimator's state before this step
    length: jnp.ndarray | None = None  # per response: its number of tokens (verl's mask sum)
    greedy_reward: jnp.ndarray | None = None  # per prompt: the greedy response's reward (ReMax)
    channels: jnp.ndarray | None = None  # per response: K reward channels, shape z.shape + (K,)


AdvantageFn = Callable[[jnp.ndarray, PromptContext], jnp.ndarray]


CONTEXT_FIELDS = ("prompt", "value", "optimal_baseline", "score_sq", "state", "length",
                  "greedy_reward", "channels")
"""The :class:`PromptContext` fields an estimator may declare in ``Estimator.needs``."""


class PooledForm(NamedTuple):
    r"""How a batch-coupled advantage sees the other groups: only through a sum of statistics.

    ``A_x = advantage(z_x, sum_{y != x} statistic(z_y), B - 1)`` for every group x of a batch of
    B groups; the exact pooled route conditions on that sum's law (a dynamic programme).

    Attributes:
        statistic: ``z (..., G) -> (..., d)``, one group's statistics.
        advantage: ``(z (..., G), others (..., d), n_others) -> A (..., G)``; ``n_others`` is a
            Python int (B - 1).
    """

    statistic: Callable
    advantage: Callable


@dataclass(frozen=True, eq=False)  # hashed by identity: a static argument of jit
class Estimator:
    """A named estimator: an advantage rule and what it knows about itself.

    Attributes:
        name: the registry key.
        advantage: ``(z, ctx) -> A``, rewards ``z`` of shape ``(..., G)`` (``(..., B, G)`` when
            ``batch_coupled``) to advantages of the same shape.
        min_group_size: the smallest G it accepts.
        closed_form: its :class:`~grpo_theory.core.closed_forms.ClosedForm` (exact per-prompt
            moments, the MSE over the advisor's pieces, the leading-order MSE) or ``None``; the
            exact, advisor and theory routes call it and name the missing piece without it.
        binary_exact: the advantages are a permutation-equivariant function of the group's
            rewards (of the batch's, when ``batch_coupled``) plus prompt constants: the MSE is
            then exact for binary rewards by conditioning on the numbers of correct responses
            (:mod:`grpo_theory.core.exact`, :mod:`grpo_theory.core.batch_exact`).
        params: its parameters (read by closed forms, e.g. a user baseline ``b``).
        needs: the :class:`PromptContext` fields the advantage reads (:data:`CONTEXT_FIELDS`);
            ``"score_sq"`` asks the caller for each response's squared score norm (per-response
            weights), ``"state"`` for the carried state.
        batch_coupled: the advantage reads the whole batch (other prompts' rewards): ``z`` is
            ``(..., B, G)``.
        init_state: ``n_prompts -> state`` for an estimator that carries state across steps
            (a history baseline), else ``None``.
        update_state: ``(state, x, z, ctx) -> state`` after a step with prompts ``x`` (B,) and
            rewards ``z`` (B, G); required with ``init_state``.
        pass_k: the exact routes' target is ``grad pass@k``, ``pass@k = E_X[1 - (1 - V(X))^k]``
            (binary rewards); 1, the mean reward J, for all but the pass@k estimators.
        pooled: a batch-coupled estimator's :class:`PooledForm` (the batch enters a group's
            advantages only through a sum of per-group statistics over the other groups), or
            ``None``: the exact pooled route (:mod:`grpo_theory.core.pooled_exact`) needs it.
        masked: ``(z (B, W), mask (B, W), ctx) -> A (B, W)``, the advantages of each row's kept
            responses when a rollout rule keeps groups of unequal size (read on the kept
            responses only: the advantage of the kept responses as a group of their own), or
            ``None``: training under a rollout rule needs it
            (:meth:`masked_advantage`; :mod:`grpo_theory.core.rollout_rules`).
    """

    name: str
    advantage: AdvantageFn
    min_group_size: int = 1
    closed_form: ClosedForm | None = None
    binary_exact: bool = True
    params: dict = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # context fields the advantage reads
    batch_coupled: bool = False  # advantages normalised over the batch: z is (..., B, G)
    init_state: Callable | None = None
    update_state: Callable | None = None
    pooled: PooledForm | None = None
    pass_k: int = 1
    masked: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Estimator name must be a non-empty string, got {self.name!r}")
        if not callable(self.advantage):
            raise ValueError(f"estimator {self.name!r}: advantage must be callable (z, ctx) -> A")
        if self.closed_form is not None and not isinstance(self.closed_form, ClosedForm):
            raise ValueError(f"estimator {self.name!r}: closed_form must be a ClosedForm or None, "
                             f"got {type(self.closed_form).__name__}")
        unknown = [n for n in self.needs if n not in CONTEXT_FIELDS]
        if unknown:
            raise ValueError(f"estimator {self.name!r}: needs must name PromptContext fields "
                             f"{list(CONTEXT_FIELDS)}, got {unknown}")
        if (self.init_state is None) != (self.update_state is None):
            raise ValueError(f"estimator {self.name!r}: init_state and update_state go together")
        if isinstance(self.pass_k, bool) or not isinstance(self.pass_k, int) or self.pass_k < 1:
            raise ValueError(f"estimator {self.name!r}: pass_k must be an integer >= 1, got "
                             f"{self.pass_k!r}")
        if self.pooled is not None and not (isinstance(self.pooled, PooledForm)
                                            and self.batch_coupled):
            raise ValueError(f"estimator {self.name!r}: pooled must be a PooledForm of a "
                             "batch-coupled estimator")
        if self.masked is not None and not callable(self.masked):
            raise ValueError(f"estimator {self.name!r}: masked must be callable "
                             "(z, mask, ctx) -> A or None")

    @property
    def rewards_only(self) -> bool:
        """Whether each group's advantages are a function of its own rewards (and prompt
        constants) alone: ``binary_exact``, not batch-coupled, no per-response weights and no
        state. The exact binary routes and the allocation audit need it."""
        return (self.binary_exact and not self.batch_coupled and "score_sq" not in self.needs
                and not self.stateful)

    @property
    def stateful(self) -> bool:
        """Whether the estimator carries a state across steps (``init_state`` given)."""
        return self.init_state is not None

    def initial_state(self, n_prompts: int):
        """The state before the first step (``None`` for a stateless estimator)."""
        return None if self.init_state is None else self.init_state(int(n_prompts))

    def next_state(self, state, x, z, ctx: PromptContext | None = None):
        """The state after a step (unchanged for a stateless estimator)."""
        if self.update_state is None:
            return state
        return self.update_state(state, x, z, ctx if ctx is not None else PromptContext())

    def masked_advantage(self, z, mask, ctx: PromptContext | None = None):
        """The advantages of each row's kept responses (``mask``), groups of unequal size.

        Raises:
            ValueError: naming the missing piece when the estimator has no ``masked`` form.
        """
        if self.masked is None:
            have = [n for n, e in _REGISTRY.items() if e.masked is not None and n == e.name]
            raise ValueError(
                f"estimator {self.name!r} has no masked form (the advantages of a rule's kept "
                "responses in groups of unequal size): give Estimator(masked=...) or train "
                f"under a rollout rule with one of {sorted(have)}")
        return self.masked(z, mask, ctx if ctx is not None else PromptContext())

    @float64
    def __call__(self, z, ctx: PromptContext | None = None):
        return self.advantage(jnp.asarray(z), ctx if ctx is not None else PromptContext())

    @float64
    def check_problem(self, n_prompts) -> None:
        """Raise ``ValueError`` if the estimator cannot serve a problem with ``n_prompts`` prompts.

        A user prompt baseline (:func:`prompt_baseline`) must have exactly one entry per prompt
        (JAX indexing would otherwise clamp out-of-range prompts silently).

        Args:
            n_prompts: the problem's number of prompts P.
        """
        b = self.params.get("b") if "prompt" in self.needs else None
        if b is not None and int(jnp.shape(b)[0]) != int(n_prompts):
            raise ValueError(
                f"estimator {self.name!r}: b must have shape ({int(n_prompts)},), one baseline per "
                f"prompt of the problem (n_prompts={int(n_prompts)}), got {jnp.shape(b)[0]} entries"
            )


def batch_context(est: Estimator, x, y, values, optimal_baselines, score_sq_table,
                  n_prompts: int) -> PromptContext:
    """The :class:`PromptContext` of a sampled batch, with the fields ``est`` needs.

    Prompt constants are gathered at the prompts ``x``; the per-response squared score norms at
    ``(x, y)`` only when ``est`` needs them (``"score_sq"``); a stateful estimator gets its
    initial state (estimates conditional on the state before the step).

    Args:
        est: the :class:`Estimator`.
        x: prompts, shape ``z.shape[:-1]``; y: responses, shape ``z.shape``.
        values, optimal_baselines: V(x) and b*(x) of every prompt, (P,).
        score_sq_table: a zero-argument function returning ``||s(x, y)||^2`` (P, K).
        n_prompts: P.

    Returns:
        The context.
    """
    sq = score_sq_table()[x[..., None], y] if "score_sq" in est.needs else None
    return PromptContext(prompt=x, value=values[x], optimal_baseline=optimal_baselines[x],
                         score_sq=sq, state=est.initial_state(n_prompts))


_COMPILED = weakref.WeakKeyDictionary()


def compiled_advantage(est: Estimator):
    """``est.advantage`` compiled once per estimator (then once per table shape), shared by the
    exact routes (:mod:`.exact`, :mod:`.batch_exact`): evaluated op by op, every group size
    would compile each operation anew (the allocation audit asks for every G up to its
    horizon; a study asks for every estimator at every cell)."""
    fn = _COMPILED.get(est)
    if fn is None:
        fn = _COMPILED[est] = jax.jit(est.advantage)
    return fn


_REGISTRY: dict[str, Estimator] = {}


@float64
def register(est: Estimator, *aliases: str) -> Estimator:
    """Add an estimator (and aliases) to the registry; returns it for chaining.

    Args:
        est: the :class:`Estimator`; its ``name`` becomes a registry key.
        *aliases: further names for it.

    Returns:
        ``est``.

    Examples:
        An advantage ``A = Z - 1/2`` (a constant baseline), by name everywhere afterwards:

        >>> import jax.numpy as jnp
        >>> from grpo_theory.core import Estimator, get_estimator, register
        >>> half = register(Estimator("half_baseline", lambda z, ctx: z - 0.5))
        >>> get_estimator("half_baseline") is half
        True
        >>> half(jnp.array([1.0, 0.0, 1.0, 1.0])).tolist()
        [0.5, -0.5, 0.5, 0.5]
    """
    for key in (est.name, *aliases):
        _REGISTRY[key] = est
    return est


@float64
def available_estimators() -> list[str]:
    """The registered estimator names (and aliases), sorted."""
    return sorted(_REGISTRY)


@float64
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


def constant_group(z):
    """True where every reward of the group is equal (the zero-variance rule applies)."""
    return jnp.all(z == z[..., :1], axis=-1, keepdims=True)


def _loo(z, ctx):
    g = z.shape[-1]
    total = jnp.sum(z, axis=-1, keepdims=True)
    return jnp.where(constant_group(z), 0.0, z - (total - z) / (g - 1))


def masked_leave_one_out(z, mask, ctx=None):
    r"""The leave-one-out advantage of each row's kept responses,
    ``A_bg = z_bg - \sum_{h \ne g} m_bh z_bh / (n_b - 1)`` (read on the kept responses only)."""
    n = jnp.sum(mask, axis=1)
    return z - (jnp.sum(mask * z, axis=1)[:, None] - z) / jnp.maximum(n[:, None] - 1, 1)


def _masked_centred(z, mask, ctx=None):
    n = jnp.sum(mask, axis=1)
    return z - (jnp.sum(mask * z, axis=1) / jnp.maximum(n, 1))[:, None]


def per_response(adv):
    """The masked form of an advantage that reads no other response (a prompt-only baseline):
    the same advantage, whatever the group's size."""
    return lambda z, mask, ctx: adv(z, ctx)


def centred(z, ctx):
    """``grpo_mean``'s advantage: ``Z - mean(Z)`` over the group (0 for a constant group)."""
    return jnp.where(constant_group(z), 0.0, z - jnp.mean(z, axis=-1, keepdims=True))


def _optimal(z, ctx):
    return z - _require(ctx, "optimal_baseline", "optimal")


register(Estimator("vanilla", _vanilla, closed_form=NoBaseline(), masked=per_response(_vanilla)))
register(Estimator("oracle", _oracle, closed_form=OracleBaseline(), needs=("value",),
                   masked=per_response(_oracle)))
register(Estimator("grpo", _loo, min_group_size=2, closed_form=LeaveOneOut(),
                   masked=masked_leave_one_out), "rloo")
register(Estimator("grpo_mean", centred, min_group_size=2, closed_form=GroupMean(),
                   masked=_masked_centred))
register(Estimator("optimal", _optimal, closed_form=OptimalBaseline(), masked=per_response(_optimal),
                   needs=("optimal_baseline",)))


# --- std normalisation -------------------------------------------------------------------------

STD_PRESETS: dict[str, dict] = {
    "trl": dict(ddof=1, eps=1e-4, centre="mean"),
    "verl": dict(ddof=1, eps=1e-6, centre="mean"),
    "openrlhf": dict(ddof=1, eps=1e-9, centre="mean"),
    "tunix": dict(ddof=1, eps=1e-6, centre="mean"),
    "oat": dict(ddof=1, eps=1e-8, centre="mean"),
    "easydel": dict(ddof=0, eps=1e-4, centre="mean"),  # jnp.nanstd (ddof 0) + 1e-4
    "paper": dict(ddof=1, eps=0.0, centre="loo"),  # Appendix A: (Z_g - Zbar_(-g)) / se
    "drgrpo": dict(ddof=1, eps=0.0, centre="mean", scale=False),
}
"""Conventions of public implementations (Table 1 and its footnotes): ddof of the group std, eps
added to it, and the centring. ``drgrpo`` is Dr. GRPO's fix: no std division at all."""


def batch_axes(z) -> tuple[int, ...]:
    """Axes of the batch ``(B, G)`` for a batch-coupled estimator (a 1-d ``z`` is one group)."""
    return (-2, -1) if z.ndim >= 2 else (-1,)


def _constant_batch(z):
    """True where every reward of the whole batch (last two axes) is equal."""
    ax = batch_axes(z)
    first = z[..., :1, :1] if z.ndim >= 2 else z[..., :1]
    return jnp.all(z == first, axis=ax, keepdims=True)


@float64
def grpo_std(
    ddof: int = 1, eps: float = 1e-6, centre: str = "mean", scale: bool = True, name=None,
    over: str = "group",
) -> Estimator:
    r"""Classic GRPO advantage ``(Z_g - c_g) / (std_ddof(Z) + eps)``.

    ``centre`` is ``"mean"`` (``c_g = Zbar``) or ``"loo"`` (``c_g = Zbar_(-g)``, the paper's
    Appendix A form); ``scale=False`` skips the division (Dr. GRPO). The std is taken around the
    full group mean with ``ddof`` in {0, 1}; ``over="batch"`` takes it over the whole batch
    instead (TRL/EasyDeL ``scale_rewards="batch"``: the centring stays per group, the estimator is
    batch-coupled). Zero-variance groups get advantage 0 (module doc).

    Args:
        ddof: 0 or 1, the std's delta degrees of freedom.
        eps: finite ``>= 0``, added to the std.
        centre: ``"mean"`` or ``"loo"``.
        scale: divide by the std (``False``: Dr. GRPO).
        name: registry name (default: built from the parameters).
        over: ``"group"`` or ``"batch"``, where the std is taken.

    Returns:
        An :class:`Estimator` (``min_group_size`` 2).
    """
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if not (eps >= 0.0 and jnp.isfinite(eps)):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if centre not in ("mean", "loo"):
        raise ValueError(f"centre must be 'mean' or 'loo', got {centre!r}")
    if over not in ("group", "batch"):
        raise ValueError(f"over must be 'group' or 'batch', got {over!r}")
    centre_fn = centred if centre == "mean" else _loo
    batch = over == "batch" and scale

    def adv(z, ctx):
        num = centre_fn(z, ctx)
        if not scale:
            return num
        if batch:
            std = jnp.std(z, axis=batch_axes(z), ddof=ddof, keepdims=True)
            zero_var = _constant_batch(z) | (std <= 0.0)
        else:
            std = jnp.std(z, axis=-1, ddof=ddof, keepdims=True)
            zero_var = constant_group(z) | (std <= 0.0)
        safe = jnp.where(zero_var, 1.0, std + eps)
        return jnp.where(zero_var, 0.0, num / safe)

    if name is None:
        name = (f"grpo_std(ddof={ddof},eps={eps:g},centre={centre}{'' if scale else ',noscale'}"
                f"{',batch' if batch else ''})")
    form = None if scale else (GroupMean() if centre == "mean" else LeaveOneOut())
    return Estimator(
        name, adv, min_group_size=2, closed_form=form,
        params=dict(ddof=ddof, eps=eps, centre=centre, scale=scale, over=over),
        batch_coupled=batch,
    )


register(grpo_std(ddof=1, eps=1e-6, centre="mean", name="grpo_std"))
for _preset, _kw in STD_PRESETS.items():
    register(grpo_std(**_kw, name=f"grpo_std_{_preset}"))
# TRL / EasyDeL scale_rewards="batch": mean per group, std over the whole batch, + 1e-4
register(grpo_std(ddof=1, eps=1e-4, over="batch", name="grpo_std_trl_batch"))
register(grpo_std(ddof=0, eps=1e-4, over="batch", name="grpo_std_easydel_batch"))


@float64
def prompt_baseline(b, name: str = "baseline") -> Estimator:
    """Constant prompt-only baseline ``A = Z - b(x)`` for a user array ``b`` of shape (P,).

    Args:
        b: one real, finite baseline per prompt (1-d, non-empty; complex and strings refused).
        name: registry name (a non-empty string).

    Returns:
        An :class:`Estimator`; ``est.check_problem(P)`` checks ``len(b) == P``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r} ({type(name).__name__})")
    b = jnp.asarray(V.finite_array("b", b, ndim=1), dtype=jnp.float64)

    def adv(z, ctx):
        if ctx.prompt is None:
            raise ValueError("estimator 'baseline' needs PromptContext.prompt")
        return z - b[jnp.asarray(ctx.prompt)][..., None]

    return Estimator(name, adv, closed_form=GivenBaseline(), params=dict(b=b), needs=("prompt",),
                     masked=per_response(adv))


@float64
def compute_advantages(estimator, rewards, value=None, optimal_baseline=None, prompt=None):
    """Functional entry point: advantages for rewards of shape ``(..., G)``.

    Raises ``ValueError`` for non-finite rewards, a group smaller than the estimator allows, or a
    missing prompt constant.
    """
    est = get_estimator(estimator)
    z = jnp.asarray(V.real_array("rewards", rewards, allow_empty=True), dtype=jnp.float64)
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
