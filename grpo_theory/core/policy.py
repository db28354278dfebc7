r"""The policy contracts of the core: :class:`EnumerablePolicy` and :class:`GradientProblem`.

As distrax's ``Distribution``: a small abstract core, every other capability derived from it
with a default that a subclass may override with something better. Callers (the exact and
Monte Carlo routes, the training loop, the companions) call these methods; they never test a
policy's class or probe for its attributes.

* :class:`EnumerablePolicy`: a policy whose whole response space is enumerated, so every
  quantity is exact. Its core is ``log_probs(params) -> (P, K)`` and three fields; from them
  the :class:`~grpo_theory.core.problem.DiscreteProblem` (``pi``, the scores
  ``s = grad_theta log pi`` by ``jax.jacfwd``), the score structure, ``J``, ``grad J``,
  ``sup J`` and sampling follow.
* :class:`GradientProblem`: a problem known by its objective and a sampled gradient only (no
  enumerable response space, e.g. :class:`~grpo_theory.optim.theory.GaussianBandit`).

:class:`PolicyWrapper` is an enumerable policy seen through another one (everything delegated),
to which a subclass adds the training loop's hooks.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .gram import ExplicitScores, ScoreStructure
from .problem import DiscreteProblem, ProblemSource
from .sampling import sample_groups
from .._precision import float64


#: the fields every enumerable policy sets (the core of the contract besides ``log_probs``)
CORE_FIELDS = {
    "params": "its parameters theta (an array; the score is the gradient in them)",
    "reward_means": "the (P, K) Bernoulli reward means mu(x, y)",
    "prompt_probs": "the (P,) prompt distribution f(x)",
}


def _static_key(value):
    """A hashable stand-in for a non-array attribute (dicts and lists by value)."""
    if isinstance(value, dict):
        return ("dict", tuple((k, _static_key(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_static_key(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return ("id", id(value))
    return value


class _Aux:
    """A non-array attribute of a policy as pytree auxiliary data, compared by value."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value, self.key = value, _static_key(value)

    def __eq__(self, other):
        return isinstance(other, _Aux) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def _is_child(value) -> bool:
    return isinstance(value, (np.ndarray, jax.Array, EnumerablePolicy))


def _flatten_policy(policy):
    """Arrays (and nested policies) are the leaves; ints, flags and shapes the static part."""
    attrs = policy.__dict__
    names = tuple(sorted(k for k, v in attrs.items() if _is_child(v)))
    static = tuple(sorted((k, _Aux(v)) for k, v in attrs.items() if not _is_child(v)))
    return tuple(attrs[k] for k in names), (names, static)


def _unflatten_policy(cls, aux, children):
    names, static = aux
    new = object.__new__(cls)
    new.__dict__.update(zip(names, children))
    new.__dict__.update((k, a.value) for k, a in static)
    return new


class EnumerablePolicy(ProblemSource):
    r"""A policy over an enumerated response space: P prompts x K responses, every quantity exact.

    The contract (as distrax's ``Distribution``: a small core, every other capability derived
    with a default). Callers use these methods and never test the policy's class or attributes.

    Core: :meth:`log_probs` (``params -> log pi(y|x)``, shape (P, K), traceable in ``params``)
    and the fields ``params``, ``reward_means`` (P, K) and ``prompt_probs`` (P,), set by the
    constructor. A subclass that lacks one gets an error naming it on first use.

    Derived, with defaults:

    * :meth:`with_params`: a copy at new parameters (the training loops' update);
    * :meth:`probs`: ``pi = exp(log_probs)``;
    * :meth:`scores`: ``s(x, y) = grad_theta log pi(y|x)`` (P, K, D) by ``jax.jacfwd``;
    * :meth:`problem`: the :class:`~grpo_theory.core.problem.DiscreteProblem` at ``params``;
    * :meth:`score_structure`: the score structure of the exact routines (default: the dense
      :class:`~grpo_theory.core.gram.ExplicitScores` of :meth:`problem`);
    * :meth:`objective`, :meth:`values`, :meth:`prompt_gradients`, :meth:`gradient`,
      :meth:`oracle_covariances`: the exact quantities at the current parameters;
    * :meth:`max_objective`: ``sup_theta J`` (default: the best-response value
      ``E_X max_y mu(X, y)``, exact when every deterministic response map is a limit of the
      parametrisation, an upper bound otherwise);
    * :meth:`sample_groups`: B prompts and G responses each with their rewards;
    * :meth:`response_weights`, :meth:`step_record`: the training loop's hooks (default: no
      weights, no record).

    The package's policies override: :class:`~grpo_theory.core.policies.SoftmaxBandit` and
    :class:`~grpo_theory.core.policies.SequencePolicy` ``score_structure`` (tabular blocks);
    :class:`~grpo_theory.core.policies.LinearSoftmaxBandit` ``score_structure`` and
    ``max_objective`` (L-BFGS from several starts: the parameters are shared);
    :class:`PolicyWrapper` delegates everything to the policy it wraps.

    Every subclass is a JAX pytree: its arrays (parameters, rewards, prompt probabilities,
    features, index tables) and nested policies are leaves, its integers, flags and shape tables
    static data. A policy passed to a jitted function is therefore traced: policies with equal
    shapes (the members of a problem family) share one compilation.
    """

    params: jnp.ndarray
    reward_means: jnp.ndarray
    prompt_probs: jnp.ndarray

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        jax.tree_util.register_pytree_node(cls, _flatten_policy,
                                           partial(_unflatten_policy, cls))

    def __getattr__(self, name):
        # called only when normal lookup fails: a missing core field gets an error naming it
        if name in CORE_FIELDS:
            raise AttributeError(f"{type(self).__name__} must set self.{name} "
                                 f"({CORE_FIELDS[name]}), a core field of EnumerablePolicy")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # --- the core ------------------------------------------------------------------------------
    def log_probs(self, params=None) -> jnp.ndarray:
        """log pi(y|x) at ``params`` (default: the current ones), shape (P, K).

        Args:
            params: parameters with the shape of :attr:`params` (a tracer is fine), or None.

        Returns:
            The (P, K) log-probabilities.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement log_probs(params=None) -> (P, K) "
            "log pi(y|x), the core of EnumerablePolicy")

    # --- derived -------------------------------------------------------------------------------
    @float64
    def _theta(self, params, name="params"):
        """``params`` (or the current parameters) after static checks: real, same shape."""
        if params is None:
            return self.params
        if isinstance(params, (str, bytes)):
            raise ValueError(f"{name} must be a real array, got a string")
        dtype = np.dtype(params.dtype) if isinstance(params, (np.ndarray, np.generic, jax.Array)
                                                     ) else np.asarray(params).dtype
        if dtype.kind not in "biuf":
            raise ValueError(f"{name} must be a real array, got dtype {dtype}")
        if tuple(jnp.shape(params)) != tuple(jnp.shape(self.params)):
            raise ValueError(f"{name} must have shape {tuple(jnp.shape(self.params))} (this "
                             f"policy's parameters), got {tuple(jnp.shape(params))}")
        return params

    @float64
    def with_params(self, params):
        """A copy of this policy at new parameters (used by training loops).

        Args:
            params: real array with the shape of :attr:`params` (a tracer is fine).

        Returns:
            A policy of the same type sharing everything but the parameters.
        """
        params = self._theta(params)
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.params = jnp.asarray(params, dtype=jnp.float64)
        return new

    @float64
    def probs(self, params=None) -> jnp.ndarray:
        """pi(y|x), shape (P, K)."""
        return jnp.exp(self.log_probs(params))

    @float64
    def scores(self, params=None) -> jnp.ndarray:
        """s(x, y) flattened to (P, K, D), by forward-mode autodiff of the log-probabilities."""
        theta = self._theta(params)
        P, K = self.reward_means.shape
        V.check_memory(f"the dense ({P}, {K}, {int(np.size(theta))}) score tensor",
                       8.0 * P * K * np.size(theta) * 2,
                       "the exact routines (exact_mse, scaling_constants, ...) need none: they "
                       "use policy.score_structure()")
        jac = jax.jacfwd(self.log_probs)(theta)  # (P, K, *theta.shape)
        return jac.reshape(jac.shape[0], jac.shape[1], -1)

    @float64
    def problem(self, params=None) -> DiscreteProblem:
        """The policy's :class:`DiscreteProblem` at ``params`` (default: the current ones).

        Built without re-validation (the constructor checked the inputs; ``params`` gets the
        shape/dtype checks of :meth:`with_params`).
        """
        theta = self._theta(params)
        return DiscreteProblem.tree_unflatten(None, (
            jnp.asarray(self.prompt_probs), self.probs(theta), self.scores(theta),
            jnp.asarray(self.reward_means),
        ))

    @float64
    def score_structure(self, params=None) -> ScoreStructure:
        """The scores as the exact routines read them (see :mod:`grpo_theory.core.gram`).

        Default: the dense scores of :meth:`problem` as one shared block (O(P K D) memory).
        """
        return ExplicitScores.from_problem(self.problem(params))

    # convenience views of the exact quantities at the current parameters
    @float64
    def objective(self):
        """J = E_X V(X) at the current parameters."""
        return self.problem().objective()

    @float64
    def values(self):
        """V(x), shape (P,)."""
        return self.problem().values()

    @float64
    def prompt_gradients(self):
        """g(x) = E[s Z | x], shape (P, D)."""
        return self.problem().prompt_gradients()

    @float64
    def gradient(self):
        """grad J with the shape of the parameters."""
        return self.problem().gradient().reshape(jnp.shape(self.params))

    @float64
    def oracle_covariances(self):
        """Sigma_or(x) = Cov[s (Z - V(x)) | x], shape (P, D, D)."""
        return self.problem().oracle_covariances()

    @float64
    def max_objective(self) -> float:
        """``sup_theta J``; default the best-response value ``E_X max_y mu(X, y)``.

        Returns:
            A float (the supremum when every deterministic response map is a limit of the
            parametrisation, as for tabular policies; an upper bound otherwise).
        """
        mu = np.asarray(self.reward_means)
        return float(np.asarray(self.prompt_probs) @ mu.max(axis=1))

    @float64
    def sample_groups(self, key, batch_size: int, group_size: int):
        """Draw B prompts ~ f and G responses each with rewards.

        Args:
            key: a JAX PRNG key or an integer seed.
            batch_size: B >= 1.
            group_size: G >= 1.

        Returns:
            ``(x, y, z)`` of shapes (B,), (B, G), (B, G).
        """
        key = V.key_or_seed(key)
        B = V.positive_int("batch_size", batch_size)
        G = V.positive_int("group_size", group_size)
        return sample_groups(key, self.problem(), B, G)

    # --- the training loop's hooks (grpo_theory.optim.train) ------------------------------------
    def response_weights(self, dp):
        """Weights ``w(x, y)`` (P, K) of the per-response terms of the gradient estimate.

        Args:
            dp: the :class:`DiscreteProblem` at the step's parameters.

        Returns:
            The (P, K) weights, or None (default: every response weighs 1).
        """
        return None

    def step_record(self, dp, x, y, z, adv):
        """A pytree recorded at every training step (before the update), or None (default).

        Args:
            dp: the :class:`DiscreteProblem` at the step's parameters.
            x, y, z, adv: the step's prompts (B,), responses, rewards and advantages (B, G).
        """
        return None


class PolicyWrapper(EnumerablePolicy):
    """An enumerable policy seen through another: every method of the contract is delegated.

    A subclass adds what the wrapped policy lacks (e.g. the training loop's hooks
    :meth:`~EnumerablePolicy.response_weights` and :meth:`~EnumerablePolicy.step_record`);
    its other attributes are pytree leaves (arrays) or static data, as for every policy.
    """

    def __init__(self, policy):
        """Args:
            policy: the :class:`EnumerablePolicy` to wrap.
        """
        if not isinstance(policy, EnumerablePolicy):
            raise ValueError(f"policy must be an EnumerablePolicy, got {type(policy).__name__}")
        self.policy = policy

    @property
    def params(self):
        return self.policy.params

    @property
    def reward_means(self):
        return self.policy.reward_means

    @property
    def prompt_probs(self):
        return self.policy.prompt_probs

    def log_probs(self, params=None):
        return self.policy.log_probs(params)

    def with_params(self, params):
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.policy = self.policy.with_params(params)
        return new

    def problem(self, params=None):
        return self.policy.problem(params)

    def score_structure(self, params=None):
        return self.policy.score_structure(params)

    def max_objective(self):
        return self.policy.max_objective()


class GradientProblem:
    r"""A problem known by its objective and a sampled gradient only (no enumerated responses).

    The contract of the training loop's second kind (:func:`grpo_theory.optim.train.make_train`).

    Core: the property ``params`` (the initial parameters), :meth:`objective` (``J(params)``,
    traceable) and :meth:`sample_gradient` (one draw of the estimator's gradient estimate).

    Derived, with defaults:

    * :meth:`max_objective`: ``sup J`` (default: an error asking for ``sup_objective=``);
    * :meth:`objective_and_gap`: ``(J(params), sup J - J(params))`` as the loop logs them
      (default: from :meth:`objective`).

    :class:`~grpo_theory.optim.theory.GaussianBandit` overrides both (its maximiser is known in
    closed form, and so is its gap). A subclass must be a JAX pytree (its arrays traced), e.g. a
    ``NamedTuple`` of arrays or a registered dataclass.
    """

    __slots__ = ()

    @property
    def params(self):
        """The initial parameters theta."""
        raise NotImplementedError(f"{type(self).__name__} must define params (the initial "
                                  "parameters), a core member of GradientProblem")

    def objective(self, params):
        """J(params), traceable.

        Args:
            params: parameters with the shape of :attr:`params`.

        Returns:
            The scalar objective.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement objective(params), "
                                  "a core method of GradientProblem")

    def sample_gradient(self, key, params, estimator, batch_size: int, group_size: int):
        """One draw of the estimator's gradient estimate at ``params`` (traceable).

        Args:
            key: a JAX PRNG key.
            params: the current parameters.
            estimator: an :class:`~grpo_theory.core.estimators.Estimator`.
            batch_size, group_size: B prompts, G responses each.

        Returns:
            The estimate, with the shape of ``params``.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must implement sample_gradient(key, params, estimator, "
            "batch_size, group_size), a core method of GradientProblem")

    def max_objective(self) -> float:
        """``sup J``; the default has none and asks for it."""
        raise ValueError(f"{type(self).__name__} has no max_objective(); pass sup_objective= "
                         "(sup J) to the training loop")

    def objective_and_gap(self, params, sup_objective):
        """``(J(params), sup_objective - J(params))``, traceable.

        Args:
            params: the current parameters.
            sup_objective: ``sup J`` (a float).

        Returns:
            The objective and the suboptimality gap.
        """
        j = self.objective(params)
        return j, sup_objective - j
