r"""Policies whose whole response space can be enumerated, so every quantity is exact.

All policies reduce to one array representation, :class:`DiscreteProblem`: P prompts with
probabilities ``f`` (P,), K responses per prompt with probabilities ``pi`` (P, K), flattened
scores ``s(x, y) = grad_theta log pi(y|x)`` (P, K, D) and Bernoulli rewards with means
``mu`` (P, K). From it (the main paper, Algorithm 1):

* ``V(x) = sum_y pi(y|x) mu(x,y)``, ``J = sum_x f(x) V(x)``;
* ``g(x) = E[s Z | x]``, ``g = sum_x f(x) g(x)``;
* ``Sigma_or(x) = Cov[s (Z - V(x)) | x]`` (the oracle's per-sample covariance, Theorem 2).

Three policies are provided: :class:`SoftmaxBandit` (tabular logits), :class:`LinearSoftmaxBandit`
(shared parameters, ``logits = features @ theta``) and :class:`SequencePolicy` (a tabular
autoregressive policy over a small vocabulary with optional EOS). Scores are computed by
``jax.jacfwd`` of the log-probabilities, so any parametrisation written as a log-prob function is
exact too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .sampling import sample_groups

__all__ = [
    "DiscreteProblem",
    "SoftmaxBandit",
    "LinearSoftmaxBandit",
    "SequencePolicy",
    "as_problem",
]


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class DiscreteProblem:
    """Arrays that define a policy's gradient problem exactly (see module docstring)."""

    prompt_probs: jnp.ndarray  # (P,)
    probs: jnp.ndarray  # (P, K); rows sum to one (zero-probability padding allowed)
    scores: jnp.ndarray  # (P, K, D)
    reward_means: jnp.ndarray  # (P, K) Bernoulli means

    def tree_flatten(self):
        return (self.prompt_probs, self.probs, self.scores, self.reward_means), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    @property
    def n_prompts(self) -> int:
        return self.probs.shape[0]

    @property
    def n_responses(self) -> int:
        return self.probs.shape[1]

    @property
    def dim(self) -> int:
        return self.scores.shape[2]

    # --- exact per-prompt quantities --------------------------------------------------------
    def values(self) -> jnp.ndarray:
        """V(x), shape (P,)."""
        return jnp.sum(self.probs * self.reward_means, axis=1)

    def objective(self) -> jnp.ndarray:
        """J(theta) = E_X V(X)."""
        return jnp.dot(self.prompt_probs, self.values())

    def reward_variances(self) -> jnp.ndarray:
        """sigma^2(x) = Var(Z | x) (Bernoulli: E Z^2 = E Z)."""
        v = self.values()
        return v - v**2

    def prompt_gradients(self) -> jnp.ndarray:
        """g(x) = E[s Z | x], shape (P, D)."""
        return jnp.einsum("pk,pkd->pd", self.probs * self.reward_means, self.scores)

    def gradient(self) -> jnp.ndarray:
        """grad J = E_X g(X), shape (D,)."""
        return self.prompt_probs @ self.prompt_gradients()

    def score_sq_norms(self) -> jnp.ndarray:
        """||s(x, y)||^2, shape (P, K)."""
        return jnp.sum(self.scores**2, axis=-1)

    def mean_score_sq_norm(self) -> jnp.ndarray:
        """E[||s||^2 | x], shape (P,)."""
        return jnp.sum(self.probs * self.score_sq_norms(), axis=1)

    def optimal_baselines(self) -> jnp.ndarray:
        """MSE-optimal constant baseline b*(x) = E[||s||^2 Z | x] / E[||s||^2 | x] (Greensmith)."""
        num = jnp.sum(self.probs * self.score_sq_norms() * self.reward_means, axis=1)
        den = self.mean_score_sq_norm()
        return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), self.values())

    def oracle_covariances(self) -> jnp.ndarray:
        """Sigma_or(x) = Cov[s (Z - V(x)) | x], shape (P, D, D)."""
        v = self.values()[:, None]
        m2 = self.reward_means - 2 * self.reward_means * v + v**2  # E[(Z - V)^2 | x, y]
        second = jnp.einsum("pk,pkd,pke->pde", self.probs * m2, self.scores, self.scores)
        g = self.prompt_gradients()
        return second - jnp.einsum("pd,pe->pde", g, g)

    def expected_prompt_value(self, per_prompt) -> jnp.ndarray:
        return jnp.tensordot(self.prompt_probs, per_prompt, axes=1)


def _check_problem(probs, reward_means, prompt_probs):
    p = probs.shape[0]
    V.same_shape("reward_means", reward_means, probs.shape, "the policy's (P, K) responses")
    V.unit_interval("reward_means", reward_means)
    if prompt_probs is None:
        return np.full(p, 1.0 / p)
    return V.probability_vector("prompt_probs", prompt_probs, size=p)


class _EnumerablePolicy:
    """Shared machinery: a log-prob function ``theta -> (P, K)`` and Bernoulli reward means."""

    params: jnp.ndarray
    reward_means: jnp.ndarray
    prompt_probs: jnp.ndarray

    def log_probs(self, params=None) -> jnp.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def with_params(self, params):
        """A copy of this policy at new parameters (used by training loops)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.params = jnp.asarray(params, dtype=jnp.float64)
        return new

    def probs(self, params=None) -> jnp.ndarray:
        return jnp.exp(self.log_probs(params))

    def scores(self, params=None) -> jnp.ndarray:
        """s(x, y) flattened to (P, K, D), by forward-mode autodiff of the log-probabilities."""
        theta = self.params if params is None else params
        jac = jax.jacfwd(self.log_probs)(theta)  # (P, K, *theta.shape)
        return jac.reshape(jac.shape[0], jac.shape[1], -1)

    def problem(self, params=None) -> DiscreteProblem:
        theta = self.params if params is None else params
        return DiscreteProblem(
            jnp.asarray(self.prompt_probs), self.probs(theta), self.scores(theta),
            jnp.asarray(self.reward_means),
        )

    # convenience views of the exact quantities at the current parameters
    def objective(self):
        return self.problem().objective()

    def values(self):
        return self.problem().values()

    def prompt_gradients(self):
        return self.problem().prompt_gradients()

    def gradient(self):
        """grad J with the shape of the parameters."""
        return self.problem().gradient().reshape(jnp.shape(self.params))

    def score_norms(self):
        return jnp.sqrt(self.problem().score_sq_norms())

    def oracle_covariances(self):
        return self.problem().oracle_covariances()

    def sample_groups(self, key, batch_size: int, group_size: int):
        """Draw B prompts ~ f and G responses each with rewards. Returns (x, y, z)."""
        return sample_groups(key, self.problem(), batch_size, group_size)


class SoftmaxBandit(_EnumerablePolicy):
    """Tabular softmax bandit: P prompts x K responses, theta = logits (P, K).

    Reward ``Z ~ Bernoulli(reward_means[x, y])``; prompts drawn from ``prompt_probs`` (uniform if
    ``None``). The score is ``s(x, y) = e_x (e_y - pi(.|x))^T`` as a (P, K) matrix, flattened.
    """

    def __init__(self, logits, reward_means, prompt_probs=None):
        logits = V.finite_array("logits", logits, ndim=2)
        means = V.finite_array("reward_means", reward_means, ndim=2)
        self.prompt_probs = jnp.asarray(_check_problem(logits, means, prompt_probs))
        self.params = jnp.asarray(logits)
        self.reward_means = jnp.asarray(means)

    def log_probs(self, params=None):
        theta = self.params if params is None else params
        return jax.nn.log_softmax(theta, axis=-1)

    @classmethod
    def random(cls, key, n_prompts: int, n_responses: int, logit_scale: float = 1.0,
               binary: bool = False):
        """A random bandit (for tests and sweeps): Gaussian logits, uniform or 0/1 reward means."""
        k1, k2 = jax.random.split(key)
        logits = logit_scale * jax.random.normal(k1, (n_prompts, n_responses))
        if binary:
            means = jax.random.bernoulli(k2, 0.5, (n_prompts, n_responses)).astype(jnp.float64)
        else:
            means = jax.random.uniform(k2, (n_prompts, n_responses))
        return cls(np.asarray(logits), np.asarray(means))


class LinearSoftmaxBandit(_EnumerablePolicy):
    """Softmax over K responses with shared parameters: logits(x, y) = features[x, y] @ theta.

    ``features`` (P, K, d), ``theta`` (d,). Prompts share parameters, so per-prompt gradients
    interact (the setting of Proposition 13 and of the scaling-law constants c1).
    """

    def __init__(self, features, theta, reward_means, prompt_probs=None):
        feats = V.finite_array("features", features, ndim=3)
        th = V.finite_array("theta", theta, ndim=1)
        if feats.shape[2] != th.shape[0]:
            raise ValueError(
                f"theta must have length features.shape[2] = {feats.shape[2]}, got {th.shape[0]}"
            )
        means = V.finite_array("reward_means", reward_means, ndim=2)
        self.prompt_probs = jnp.asarray(_check_problem(feats[:, :, 0], means, prompt_probs))
        self.features = jnp.asarray(feats)
        self.params = jnp.asarray(th)
        self.reward_means = jnp.asarray(means)

    def log_probs(self, params=None):
        theta = self.params if params is None else params
        return jax.nn.log_softmax(self.features @ theta, axis=-1)


class SequencePolicy(_EnumerablePolicy):
    r"""Tabular autoregressive policy over whole sequences, enumerable.

    Tokens ``0 .. vocab_size-1``; if ``eos=True`` the extra token ``vocab_size`` ends a response,
    so lengths vary in 1..horizon (EOS counts as a token); otherwise every response has length
    ``horizon``. The next-token logits depend on (prompt, position, previous token):
    ``params`` has shape (P, horizon, vocab_size + 1, n_out) with ``n_out = vocab_size + eos`` and
    previous-token index ``vocab_size`` meaning "start". ``log pi(y|x) = sum_t log pi(y_t | x, t,
    y_{t-1})`` (no length normalisation).

    ``reward`` is an array (P, K) of Bernoulli means over the enumerated responses (see
    :attr:`responses`), or a callable ``reward(prompt, tokens, length) -> mean in [0, 1]`` with
    ``tokens`` padded by -1.
    """

    def __init__(self, params, reward, vocab_size: int, horizon: int, eos: bool = True,
                 prompt_probs=None):
        self.vocab_size = V.positive_int("vocab_size", vocab_size, 1)
        self.horizon = V.positive_int("horizon", horizon, 1)
        self.eos = bool(eos)
        n_out = vocab_size + int(eos)
        th = np.asarray(params, dtype=np.float64)
        if th.ndim != 4 or th.shape[1:] != (horizon, vocab_size + 1, n_out):
            raise ValueError(
                f"params must have shape (P, {horizon}, {vocab_size + 1}, {n_out}), got {th.shape}"
            )
        th = V.finite_array("params", th)
        n_prompts = th.shape[0]
        self.responses, self.lengths = self._enumerate()
        self._build_index()
        if callable(reward):
            means = np.array(
                [[reward(p, self.responses[k], self.lengths[k]) for k in range(len(self.lengths))]
                 for p in range(n_prompts)], dtype=np.float64)
        else:
            means = V.finite_array("reward", reward, ndim=2)
        means = V.finite_array("reward", means)
        self.prompt_probs = jnp.asarray(_check_problem(np.zeros((n_prompts, len(self.lengths))),
                                                       means, prompt_probs))
        self.params = jnp.asarray(th)
        self.reward_means = jnp.asarray(means)

    def _enumerate(self):
        seqs, lens = [], []
        v, T = self.vocab_size, self.horizon
        for length in range(1, T + 1):
            if self.eos:
                # length-1 body tokens followed by EOS, or (at full length) T body tokens
                for body in itertools.product(range(v), repeat=length - 1):
                    seqs.append(list(body) + [v])
                    lens.append(length)
            if length == T:
                for body in itertools.product(range(v), repeat=T):
                    seqs.append(list(body))
                    lens.append(T)
        tokens = np.full((len(seqs), T), -1, dtype=np.int64)
        for i, s in enumerate(seqs):
            tokens[i, : len(s)] = s
        return tokens, np.asarray(lens, dtype=np.int64)

    def _build_index(self):
        T = self.horizon
        tok = self.responses
        prev = np.full_like(tok, self.vocab_size)
        prev[:, 1:] = np.where(tok[:, :-1] >= 0, tok[:, :-1], self.vocab_size)
        self._mask = jnp.asarray(tok >= 0, dtype=jnp.float64)  # (K, T)
        self._tok = jnp.asarray(np.maximum(tok, 0))
        self._prev = jnp.asarray(prev)
        self._pos = jnp.asarray(np.broadcast_to(np.arange(T), tok.shape))

    def token_log_probs(self, params=None) -> jnp.ndarray:
        """log pi(y_t | x, t, y_{t-1}) for every enumerated response, shape (P, K, T) (0 padded)."""
        theta = self.params if params is None else params
        logp = jax.nn.log_softmax(theta, axis=-1)  # (P, T, V+1, n_out)
        per_tok = logp[:, self._pos, self._prev, self._tok]  # (P, K, T)
        return per_tok * self._mask

    def log_probs(self, params=None):
        return jnp.sum(self.token_log_probs(params), axis=-1)

    @classmethod
    def random(cls, key, n_prompts: int, vocab_size: int, horizon: int, reward=None,
               eos: bool = True, logit_scale: float = 1.0):
        n_out = vocab_size + int(eos)
        k1, k2 = jax.random.split(key)
        params = logit_scale * jax.random.normal(k1, (n_prompts, horizon, vocab_size + 1, n_out))
        if reward is None:
            n_resp = sum(vocab_size ** (l - 1) for l in range(1, horizon + 1)) * int(eos)
            n_resp += vocab_size**horizon
            reward = np.asarray(jax.random.uniform(k2, (n_prompts, n_resp)))
        return cls(np.asarray(params), reward, vocab_size, horizon, eos=eos)


def as_problem(policy_or_problem) -> DiscreteProblem:
    """Accept a policy object or a :class:`DiscreteProblem`."""
    if isinstance(policy_or_problem, DiscreteProblem):
        return policy_or_problem
    if hasattr(policy_or_problem, "problem"):
        return policy_or_problem.problem()
    raise ValueError(
        "bandit must be a SoftmaxBandit, LinearSoftmaxBandit, SequencePolicy or DiscreteProblem, "
        f"got {type(policy_or_problem).__name__}"
    )



from .._precision import scope_module as _scope  # noqa: E402

_scope(globals(), classes=(_EnumerablePolicy,))
