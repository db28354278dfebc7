r"""An estimator's closed forms: one value that travels with the estimator (the open contract).

Every route that predicts an estimator's error without sampling asks the estimator's
:class:`ClosedForm` (``Estimator.closed_form``) rather than a list of names:

* the exact MSE (:func:`grpo_theory.core.exact_mse`, :func:`~grpo_theory.core.exact_prompt_mse`)
  and the Gaussian bandit's covariance (:mod:`grpo_theory.optim.theory`) call
  :meth:`ClosedForm.moments` with a *route*: an object that knows one problem family and offers
  the two primitive per-prompt laws, ``route.prompt_baseline(b, G)`` (``A = Z - b(x)``) and
  ``route.leave_one_out(G)`` (Lemma 1's U-statistic); a form composes them;
* the advisor's prediction from rollouts (:meth:`grpo_theory.advisor.ScalingEstimate.mse`) calls
  :meth:`ClosedForm.mse_weights`: the MSE as weights over the unbiased pieces
  :data:`PIECES` ``= (c1, c2, c3, c_v, grad_sq)``, ``grad_sq = ||grad J||^2``;
* the paper's leading-order MSE (:func:`grpo_theory.core.leading_order_mse`) calls
  :meth:`ClosedForm.leading_order_weights` with the exact pieces.

With B prompts of G responses (Theorem 2, Proposition 3; ``c_v = E_X[E[||s||^2 Z^2|X] -
||g(X)||^2]``):

=====================  ============================================================  ==========
form                   exact MSE over the pieces                                      estimators
=====================  ============================================================  ==========
:class:`NoBaseline`    ``c1/B + c_v/(BG)``                                            vanilla
:class:`OracleBaseline` ``c1/B + c2/(BG)``                                             oracle
:class:`LeaveOneOut`   ``c1/B + c2/(BG) + c3/(BG(G-1))``                              grpo, rloo
:class:`GroupMean`     ``((G-1)/G)^2 MSE_grpo + ||grad J||^2/G^2``                    grpo_mean
:class:`CrossPromptMean` over :data:`BASIS_PIECES` (see the class)                basis
:class:`OptimalBaseline`, :class:`GivenBaseline`  exact moments only (no advisor pieces)  optimal, b(x)
=====================  ============================================================  ==========

A form states the names of the pieces its ``mse_weights`` run over (:attr:`ClosedForm.pieces`,
:data:`PIECES` unless it says otherwise: :class:`CrossPromptMean` runs over :data:`BASIS_PIECES`)
and the fewest prompts a batch needs (:attr:`ClosedForm.min_batch_size`).

A form that lacks a piece raises :class:`MissingClosedForm` naming the method to implement; an
estimator with no form at all (``closed_form=None``) is refused by the closed-form routes with
the same error. A new form subclasses :class:`ClosedForm` and overrides what it knows.

Examples:
    The leave-one-out MSE at B = 2, G = 4 as weights over ``(c1, c2, c3, c_v, ||grad J||^2)``:

    >>> from grpo_theory.core import get_estimator
    >>> get_estimator("grpo").closed_form.mse_weights(2, 4).tolist()
    [0.5, 0.125, 0.041666666666666664, 0.0, 0.0]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


PIECES = ("c1", "c2", "c3", "c_v", "grad_sq")
"""The advisor's unbiased pieces ``(c1, c2, c3, c_v, ||grad J||^2)``, in the order of
:meth:`ClosedForm.mse_weights`' last axis."""


BASIS_PIECES = ("c1", "c_v", "grad_sq", "j_qz", "j2_q", "v2_q", "s2_q")
"""The pieces of :class:`CrossPromptMean`'s MSE: ``c1``, ``c_v``, ``grad_sq`` as in :data:`PIECES`
and four products of population means over prompts, ``j_qz = J E[q Z]``, ``j2_q = J^2 E[q]``,
``v2_q = E[V(X)^2] E[q]`` and ``s2_q = E[sigma^2(X)] E[q]`` (``q = ||s||^2``, ``J = E Z``)."""


class MissingClosedForm(ValueError):
    """An estimator (or its closed form) lacks the piece a route asked for."""

    def __init__(self, estimator_name: str, piece: str, alternative: str = ""):
        self.estimator_name, self.piece = estimator_name, piece
        msg = f"estimator {estimator_name!r} has no {piece}"
        super().__init__(msg + (f"; {alternative}" if alternative else ""))


def closed_form_of(est, piece: str, alternative: str = "") -> "ClosedForm":
    """``est.closed_form``, or :class:`MissingClosedForm` naming ``piece`` when it has none.

    Args:
        est: an :class:`~grpo_theory.core.estimators.Estimator`.
        piece: what the caller needs, for the message (e.g. ``"closed-form MSE"``).
        alternative: what the user can do instead, appended to the message.

    Returns:
        The estimator's :class:`ClosedForm`.
    """
    form = est.closed_form
    if form is None:
        raise MissingClosedForm(est.name, f"{piece} (Estimator.closed_form is None: attach a "
                                "grpo_theory.core.ClosedForm)", alternative)
    return form


def _grid(batch_size, group_size):
    B, G = np.broadcast_arrays(np.asarray(batch_size, np.float64), np.asarray(group_size,
                                                                               np.float64))
    return B, G, np.zeros(B.shape)


@dataclass(frozen=True)
class ClosedForm:
    """Base of the closed forms (distrax-style: every piece has a default that says it is missing).

    Attributes (class-level facts a form states about its estimator):
        unbiased: ``E[ghat | x] = g(x)`` for every prompt and G (the theory and the optimal
            allocation need it).
        pair_term: the per-prompt variance is ``a/G + b/(G(G-1))`` (a U-statistic of order 2);
            ``False`` means ``a/G`` (a prompt baseline).
    """

    unbiased = False
    pair_term = False
    #: the names of :meth:`mse_weights`' last axis
    pieces = PIECES
    #: the fewest prompts a batch needs (B >= 2 for a baseline built from the other prompts)
    min_batch_size = 1

    # -- the per-prompt law through a route (exact MSE, Gaussian covariance)
    def moments(self, route, group_size, baseline):
        """Per-prompt ``(mean, spread)`` of one prompt's G-group estimate on ``route``.

        Args:
            route: a problem family's route (``prompt_baseline(b, G)``, ``leave_one_out(G)``);
                ``spread`` is the route's measure: a trace variance (P,) on the score-structure
                route, a covariance (P, d, d) on the Gaussian bandit's.
            group_size: G (traced).
            baseline: what :meth:`baseline` returned (or ``None``).

        Returns:
            ``(mean, spread)``.
        """
        raise MissingClosedForm(self._label(), "per-prompt closed form (ClosedForm.moments)",
                                "use method='binary' or mc_mse")

    def baseline(self, values, optimal_baselines, estimator):
        """The prompt baseline ``b(x)`` (P,) that :meth:`moments` reads, or ``None``.

        Args:
            values: a zero-argument function returning V(x) (P,) on the caller's problem.
            optimal_baselines: a zero-argument function returning b*(x) (P,).
            estimator: the :class:`~grpo_theory.core.estimators.Estimator` (its ``params``).
        """
        return None

    # -- the advisor's pieces
    def mse_weights(self, batch_size, group_size) -> np.ndarray:
        """The MSE with B prompts of G responses as weights over :attr:`pieces` (:data:`PIECES`
        unless the form says otherwise), shape (..., len(pieces))."""
        raise MissingClosedForm(self._label(), "MSE over the advisor's pieces c1, c2, c3, c_v, "
                                "||grad J||^2 (ClosedForm.mse_weights)")

    def leading_order_weights(self, batch_size, group_size) -> np.ndarray:
        """The paper's leading-order MSE as weights over :data:`PIECES` (O(G^-2) dropped)."""
        raise MissingClosedForm(self._label(), "leading-order MSE "
                                "(ClosedForm.leading_order_weights)")

    def _label(self) -> str:
        return type(self).__name__


# --- prompt baselines: A = Z - b(x) ------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PromptBaseline(ClosedForm):
    """``A = Z - b(x)``: mean ``g - b E[s]``, variance ``(E||s||^2 (Z - b)^2 - ||mean||^2)/G``.

    Every prompt-baseline form traces the same computation (``b`` is an argument), so they
    compare equal: one compiled program serves them all.
    """

    unbiased = True

    def moments(self, route, group_size, baseline):
        return route.prompt_baseline(baseline, group_size)

    def __eq__(self, other):
        return isinstance(other, PromptBaseline)

    def __hash__(self):
        return hash(PromptBaseline)


@dataclass(frozen=True, eq=False)
class NoBaseline(PromptBaseline):
    """``b = 0`` (vanilla REINFORCE, Proposition 3): ``c1/B + c_v/(BG)`` exactly."""

    def baseline(self, values, optimal_baselines, estimator):
        return np.zeros(np.shape(values()))

    def mse_weights(self, batch_size, group_size):
        B, G, z = _grid(batch_size, group_size)
        return np.stack([1 / B, z, z, 1 / (B * G), z], axis=-1)

    leading_order_weights = mse_weights


@dataclass(frozen=True, eq=False)
class OracleBaseline(PromptBaseline):
    """``b = V(x)`` (the oracle, Theorem 2): ``c1/B + c2/(BG)`` exactly."""

    def baseline(self, values, optimal_baselines, estimator):
        return values()

    def mse_weights(self, batch_size, group_size):
        B, G, z = _grid(batch_size, group_size)
        return np.stack([1 / B, 1 / (B * G), z, z, z], axis=-1)

    leading_order_weights = mse_weights


@dataclass(frozen=True, eq=False)
class OptimalBaseline(PromptBaseline):
    """``b = b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x]``, the MSE-optimal prompt baseline."""

    def baseline(self, values, optimal_baselines, estimator):
        return optimal_baselines()


@dataclass(frozen=True, eq=False)
class GivenBaseline(PromptBaseline):
    """``b = estimator.params["b"]``, a user's baseline per prompt (:func:`prompt_baseline`)."""

    def baseline(self, values, optimal_baselines, estimator):
        b = estimator.params["b"]
        n = np.shape(values())[0]
        if np.shape(b) != (n,):
            raise ValueError(f"b must have shape ({n},), got {np.shape(b)}")
        return b


# --- group baselines ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaveOneOut(ClosedForm):
    """Leave-one-out GRPO (Lemma 1): unbiased, ``c1/B + c2/(BG) + c3/(BG(G-1))``."""

    unbiased = True
    pair_term = True

    def moments(self, route, group_size, baseline):
        return route.leave_one_out(group_size)

    def mse_weights(self, batch_size, group_size):
        B, G, z = _grid(batch_size, group_size)
        with np.errstate(divide="ignore"):
            return np.stack([1 / B, 1 / (B * G), 1 / (B * G * (G - 1)), z, z], axis=-1)

    def leading_order_weights(self, batch_size, group_size):
        B, G, z = _grid(batch_size, group_size)
        return np.stack([1 / B, 1 / (B * G), z, z, z], axis=-1)


@dataclass(frozen=True)
class GroupMean(ClosedForm):
    """Self-inclusive centring ``Z - Zbar`` = ``(G-1)/G`` x leave-one-out: biased by ``-g(x)/G``.

    MSE ``((G-1)/G)^2 MSE_grpo + ||grad J||^2 / G^2``.
    """

    pair_term = True

    def moments(self, route, group_size, baseline):
        mean, spread = route.leave_one_out(group_size)
        c = (group_size - 1) / group_size
        return c * mean, c**2 * spread

    def mse_weights(self, batch_size, group_size):
        B, G, z = _grid(batch_size, group_size)
        w = LeaveOneOut().mse_weights(B, G)
        w = ((G - 1) / G)[..., None] ** 2 * w
        w[..., 4] = 1 / G**2
        return w


# --- a cross-prompt baseline -------------------------------------------------------------------


@dataclass(frozen=True)
class CrossPromptMean(ClosedForm):
    r"""BASIS's baseline ``b_x`` = the mean of the other B - 1 prompts' group means: unbiased.

    With ``q = ||s||^2``, ``J = E Z``, ``m0 = E[q]``, ``c_J = E[q (Z - J)^2] - E||g(X)||^2
    = c_v - 2 J E[q Z] + J^2 m0`` and ``Var(Zbar_G) = Var_X V(X) + E[sigma^2(X)]/G``, the exact
    MSE with B >= 2 prompts of G >= 1 responses is

    .. math:: \frac{c_1}{B} + \frac{c_J}{BG} + \frac{\mathrm{Var}(\bar Z_G)\, m_0}{BG(B-1)}
              + \frac{\|\nabla J\|^2}{B(B-1)G^2},

    linear in :data:`BASIS_PIECES` (``Var_X V m0 = v2_q - j2_q``). At a budget ``N = BG``:
    ``N MSE = c1 G + c_J + ((Var_X V G + E sigma^2) m0 + ||grad J||^2)/(N - G)``. No per-prompt
    law (the baseline couples the batch's prompts): the exact routes are the pooled ones
    (:func:`grpo_theory.core.batch_moments`).
    """

    unbiased = True
    pieces = BASIS_PIECES
    min_batch_size = 2

    def mse_weights(self, batch_size, group_size):
        B, G, _ = _grid(batch_size, group_size)
        if np.any(B < 2):
            raise ValueError(f"batch_size must be >= 2 for a baseline built from the other prompts "
                             f"(BASIS), got min {float(np.min(B))!r}")
        if np.any(G <= 0):
            raise ValueError(f"group_size must be > 0, got min {float(np.min(G))!r}")
        within, across = 1 / (B * G), 1 / (B * G * (B - 1))
        # c1, c_v, grad_sq, j_qz, j2_q, v2_q, s2_q
        return np.stack([1 / B, within, across / G, -2 * within, within - across, across,
                         across / G], axis=-1)
