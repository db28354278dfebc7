r"""Policies whose whole response space can be enumerated, so every quantity is exact.

All policies reduce to one array representation, :class:`DiscreteProblem`: P prompts with
probabilities ``f`` (P,), K responses per prompt with probabilities ``pi`` (P, K), flattened
scores ``s(x, y) = grad_theta log pi(y|x)`` (P, K, D) and Bernoulli rewards with means
``mu`` (P, K). From it (the main paper, Algorithm 1):

* ``V(x) = sum_y pi(y|x) mu(x,y)``, ``J = sum_x f(x) V(x)``;
* ``g(x) = E[s Z | x]``, ``g = sum_x f(x) g(x)``;
* ``Sigma_or(x) = Cov[s (Z - V(x)) | x]`` (the oracle's per-sample covariance, Theorem 2).

Three policies are provided, each an :class:`~grpo_theory.core.policy.EnumerablePolicy` (the
contract: ``log_probs`` and three fields, every other capability derived):
:class:`SoftmaxBandit` (tabular logits), :class:`LinearSoftmaxBandit` (shared parameters,
``logits = features @ theta``) and :class:`SequencePolicy` (a tabular autoregressive policy over
a small vocabulary with optional EOS). Scores are computed by ``jax.jacfwd`` of the
log-probabilities, so any parametrisation written as a log-prob function is exact too.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from .gram import ExplicitScores, TabularScores
from .objective import exact_objective, maximise
from .policy import EnumerablePolicy
from .._precision import float64


def _check_problem(shape, reward_means, prompt_probs, name="reward_means"):
    """Validated ``(prompt_probs, reward_means)`` for a policy with (P, K) = ``shape``."""
    p = shape[0]
    V.same_shape(name, reward_means, shape, "the policy's (P, K) responses")
    means = V.unit_interval(name, reward_means)
    if prompt_probs is None:
        return np.full(p, 1.0 / p), means
    return V.probability_vector("prompt_probs", prompt_probs, size=p), means


def _real_parameters(name, value, ndim=None):
    """Finite real parameters; booleans are refused (``True`` is not a logit)."""
    if _is_bool_array(value):
        raise ValueError(f"{name} must be real numbers, got booleans (dtype bool)")
    return V.finite_array(name, value, ndim=ndim)


def _is_bool_array(value) -> bool:
    if isinstance(value, (str, bytes)):
        return False
    try:
        return np.asarray(value).dtype.kind == "b"
    except Exception:  # ragged lists: the real-array check reports them
        return False


def _check_logit_spread(name, logits):
    """log_softmax subtracts the row maximum: max - min must be finite too."""
    with np.errstate(over="ignore", invalid="ignore"):
        spread = logits.max(axis=-1) - logits.min(axis=-1)
    if not np.all(np.isfinite(spread)):
        raise ValueError(f"{name}: max - min within a row overflows float64; rescale the logits")


class SoftmaxBandit(EnumerablePolicy):
    """Tabular softmax bandit: P prompts x K responses, theta = logits (P, K).

    Reward ``Z ~ Bernoulli(reward_means[x, y])``; prompts drawn from ``prompt_probs`` (uniform if
    ``None``). The score is ``s(x, y) = e_x (e_y - pi(.|x))^T`` as a (P, K) matrix, flattened.
    """

    @float64
    def __init__(self, logits, reward_means, prompt_probs=None):
        """Args:
            logits: (P, K) finite real logits (P, K >= 1).
            reward_means: (P, K) Bernoulli means in [0, 1].
            prompt_probs: (P,) prompt distribution, or ``None`` for uniform.
        """
        logits = _real_parameters("logits", logits, ndim=2)
        _check_logit_spread("logits", logits)
        means = V.finite_array("reward_means", reward_means, ndim=2)
        f, means = _check_problem(logits.shape, means, prompt_probs)
        self.prompt_probs = jnp.asarray(f)
        self.params = jnp.asarray(logits)
        self.reward_means = jnp.asarray(means)

    @float64
    def log_probs(self, params=None):
        """log pi(y|x), shape (P, K)."""
        theta = self._theta(params)
        return jax.nn.log_softmax(theta, axis=-1)

    @float64
    def score_structure(self, params=None):
        """Tabular score structure (disjoint blocks, O(P K)); see :mod:`grpo_theory.core.gram`."""
        return TabularScores.softmax_bandit(self._theta(params), self.reward_means,
                                            self.prompt_probs)

    @classmethod
    @float64
    def random(cls, key, n_prompts: int, n_responses: int, logit_scale: float = 1.0,
               binary: bool = False):
        """A random bandit (for tests and sweeps): Gaussian logits, uniform or 0/1 reward means.

        Args:
            key: a JAX PRNG key or an integer seed.
            n_prompts, n_responses: P, K >= 1.
            logit_scale: standard deviation of the logits (finite, >= 0).
            binary: 0/1 reward means instead of uniform ones.

        Returns:
            A :class:`SoftmaxBandit`.
        """
        key = V.key_or_seed(key)
        n_prompts = V.positive_int("n_prompts", n_prompts)
        n_responses = V.positive_int("n_responses", n_responses)
        logit_scale = V.real_scalar("logit_scale", logit_scale, minimum=0.0)
        binary = V.boolean("binary", binary)
        V.check_memory("SoftmaxBandit.random", 8.0 * n_prompts * n_responses * 4,
                       "use fewer prompts or responses")
        k1, k2 = jax.random.split(key)
        logits = logit_scale * jax.random.normal(k1, (n_prompts, n_responses))
        if binary:
            means = jax.random.bernoulli(k2, 0.5, (n_prompts, n_responses)).astype(jnp.float64)
        else:
            means = jax.random.uniform(k2, (n_prompts, n_responses))
        return cls(np.asarray(logits), np.asarray(means))


class LinearSoftmaxBandit(EnumerablePolicy):
    """Softmax over K responses with shared parameters: logits(x, y) = features[x, y] @ theta.

    ``features`` (P, K, d), ``theta`` (d,). Prompts share parameters, so per-prompt gradients
    interact (the setting of Proposition 13 and of the scaling-law constants c1).
    """

    @float64
    def __init__(self, features, theta, reward_means, prompt_probs=None):
        """Args:
            features: (P, K, d) finite real features (P, K, d >= 1).
            theta: (d,) finite real parameters; ``features @ theta`` must not overflow.
            reward_means: (P, K) Bernoulli means in [0, 1].
            prompt_probs: (P,) prompt distribution, or ``None`` for uniform.
        """
        feats = _real_parameters("features", features, ndim=3)
        th = _real_parameters("theta", theta, ndim=1)
        if feats.shape[2] != th.shape[0]:
            raise ValueError(
                f"theta must have length features.shape[2] = {feats.shape[2]}, got {th.shape[0]}"
            )
        with np.errstate(over="ignore", invalid="ignore"):
            logits = feats @ th
        if not np.all(np.isfinite(logits)):
            raise ValueError(
                "features @ theta overflows (non-finite logits, largest |features| "
                f"{float(np.abs(feats).max())!r}, |theta| {float(np.abs(th).max())!r}); rescale features or theta"
            )
        _check_logit_spread("features @ theta", logits)
        means = V.finite_array("reward_means", reward_means, ndim=2)
        f, means = _check_problem(feats.shape[:2], means, prompt_probs)
        self.prompt_probs = jnp.asarray(f)
        self.features = jnp.asarray(feats)
        self.params = jnp.asarray(th)
        self.reward_means = jnp.asarray(means)

    @float64
    def log_probs(self, params=None):
        """log pi(y|x) = log_softmax(features @ theta), shape (P, K)."""
        theta = self._theta(params)
        return jax.nn.log_softmax(self.features @ theta, axis=-1)

    @float64
    def score_structure(self, params=None):
        """Shared-parameter scores ``F_x - 1 pi_x^T F_x`` (O(P K d)); see :mod:`.gram`."""
        return ExplicitScores.linear_softmax(self.features, self._theta(params),
                                             self.reward_means, self.prompt_probs)

    @float64
    def max_objective(self) -> float:
        """``sup_theta J`` by L-BFGS from six starts (the parameters are shared, so the best
        response is in general not a limit of the parametrisation); exact when the maximiser is
        interior."""
        _, val = maximise(lambda th: exact_objective(self, th), self.params, n_starts=6,
                          scale=2.0)
        return val


class SequencePolicy(EnumerablePolicy):
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

    @float64
    def __init__(self, params, reward, vocab_size: int, horizon: int, eos: bool = True,
                 prompt_probs=None):
        """Args:
            params: (P, horizon, vocab_size + 1, vocab_size + eos) finite real logits.
            reward: (P, K) Bernoulli means in [0, 1], or a callable (see the class docstring).
            vocab_size, horizon: integers >= 1; the response count K (:func:`n_sequences`) must
                stay within :data:`MAX_SEQUENCES` and the enumeration within the memory limit.
            eos: whether responses may end early with an EOS token.
            prompt_probs: (P,) prompt distribution, or ``None`` for uniform.
        """
        self.vocab_size = V.positive_int("vocab_size", vocab_size, 1)
        self.horizon = V.positive_int("horizon", horizon, 1)
        self.eos = V.boolean("eos", eos)
        vocab_size, horizon = self.vocab_size, self.horizon
        n_out = vocab_size + int(self.eos)
        if _is_bool_array(params):
            raise ValueError("params must be real numbers (logits), got booleans (dtype bool)")
        th = V.real_array("params", params, allow_empty=True)
        if th.ndim != 4 or th.shape[1:] != (horizon, vocab_size + 1, n_out):
            raise ValueError(
                f"params must have shape (P, {horizon}, {vocab_size + 1}, {n_out}), got {th.shape}"
            )
        th = V.finite_array("params", th)
        n_prompts = th.shape[0]
        _check_sequence_size(n_prompts, vocab_size, horizon, self.eos)
        self.responses, self.lengths = self._enumerate()
        self._build_index()
        if callable(reward):
            means = np.array(
                [[reward(p, self.responses[k], self.lengths[k]) for k in range(len(self.lengths))]
                 for p in range(n_prompts)])
        else:
            means = reward
        means = V.finite_array("reward", means, ndim=2)
        f, means = _check_problem((n_prompts, len(self.lengths)), means, prompt_probs, "reward")
        self.prompt_probs = jnp.asarray(f)
        self.params = jnp.asarray(th)
        self.reward_means = jnp.asarray(means)

    @float64
    def _enumerate(self):
        """Responses (K, T) padded with -1 and their lengths (K,), by length then lexicographic."""
        blocks, lens = [], []
        v, T = self.vocab_size, self.horizon

        def bodies(n):  # every length-n token string, in itertools.product order
            if n == 0:
                return np.zeros((1, 0), dtype=np.int64)
            return np.indices((v,) * n, dtype=np.int64).reshape(n, -1).T

        for length in range(1, T + 1):
            if self.eos:
                # length-1 body tokens followed by EOS, or (at full length) T body tokens
                b = bodies(length - 1)
                blk = np.full((b.shape[0], T), -1, dtype=np.int64)
                blk[:, : length - 1] = b
                blk[:, length - 1] = v
                blocks.append(blk)
                lens.append(np.full(b.shape[0], length, dtype=np.int64))
            if length == T:
                b = bodies(T)
                blocks.append(b)
                lens.append(np.full(b.shape[0], T, dtype=np.int64))
        return np.concatenate(blocks), np.concatenate(lens)

    @float64
    def _build_index(self):
        T = self.horizon
        tok = self.responses
        prev = np.full_like(tok, self.vocab_size)
        prev[:, 1:] = np.where(tok[:, :-1] >= 0, tok[:, :-1], self.vocab_size)
        self._mask = jnp.asarray(tok >= 0, dtype=jnp.float64)  # (K, T)
        self._tok = jnp.asarray(np.maximum(tok, 0))
        self._prev = jnp.asarray(prev)
        self._pos = jnp.asarray(np.broadcast_to(np.arange(T), tok.shape))

    @float64
    def token_log_probs(self, params=None) -> jnp.ndarray:
        """log pi(y_t | x, t, y_{t-1}) for every enumerated response, shape (P, K, T) (0 padded)."""
        theta = self._theta(params)
        logp = jax.nn.log_softmax(theta, axis=-1)  # (P, T, V+1, n_out)
        per_tok = logp[:, self._pos, self._prev, self._tok]  # (P, K, T)
        return per_tok * self._mask

    @float64
    def log_probs(self, params=None):
        """log pi(y|x) = sum_t log pi(y_t | x, t, y_{t-1}), shape (P, K)."""
        return jnp.sum(self.token_log_probs(params), axis=-1)

    @float64
    def score_structure(self, params=None):
        """Tabular score structure (disjoint blocks, O(P K T)); see :mod:`.gram`."""
        theta = self._theta(params)
        return TabularScores.sequence(theta, self.probs(theta), self.reward_means,
                                      self.prompt_probs, self._pos, self._prev, self._tok,
                                      self._mask)

    @classmethod
    @float64
    def random(cls, key, n_prompts: int, vocab_size: int, horizon: int, reward=None,
               eos: bool = True, logit_scale: float = 1.0):
        """A random sequence policy: Gaussian logits, uniform reward means unless ``reward``.

        Args:
            key: a JAX PRNG key or an integer seed.
            n_prompts, vocab_size, horizon: integers >= 1 (sizes checked before anything is
                allocated, see :func:`n_sequences`).
            reward: as in the constructor, or ``None`` for uniform random means.
            eos: whether responses may end early with EOS.
            logit_scale: standard deviation of the logits (finite, >= 0).

        Returns:
            A :class:`SequencePolicy`.
        """
        key = V.key_or_seed(key)
        n_prompts = V.positive_int("n_prompts", n_prompts)
        vocab_size = V.positive_int("vocab_size", vocab_size)
        horizon = V.positive_int("horizon", horizon)
        eos = V.boolean("eos", eos)
        logit_scale = V.real_scalar("logit_scale", logit_scale, minimum=0.0)
        n_resp = _check_sequence_size(n_prompts, vocab_size, horizon, eos)
        n_out = vocab_size + int(eos)
        k1, k2 = jax.random.split(key)
        params = logit_scale * jax.random.normal(k1, (n_prompts, horizon, vocab_size + 1, n_out))
        if reward is None:
            reward = np.asarray(jax.random.uniform(k2, (n_prompts, n_resp)))
        return cls(np.asarray(params), reward, vocab_size, horizon, eos=eos)


#: the most responses a :class:`SequencePolicy` enumerates
MAX_SEQUENCES = 10**7


@float64
def n_sequences(vocab_size: int, horizon: int, eos: bool = True) -> int:
    """K = number of responses of a :class:`SequencePolicy`: ``v^T + eos * sum_{l<T} v^l``.

    Args:
        vocab_size, horizon: integers >= 1.
        eos: whether responses may end early.

    Returns:
        K as a Python int (exact, no overflow).
    """
    v = V.positive_int("vocab_size", vocab_size)
    T = V.positive_int("horizon", horizon)
    eos = V.boolean("eos", eos)
    return v**T + int(eos) * sum(v**l for l in range(T))


def _check_sequence_size(n_prompts, vocab_size, horizon, eos) -> int:
    """Refuse (before enumerating) a policy whose response set or arrays cannot be held."""
    K = n_sequences(vocab_size, horizon, eos)
    if K > MAX_SEQUENCES:
        raise ValueError(
            f"SequencePolicy with vocab_size={vocab_size}, horizon={horizon}, eos={eos} has "
            f"K = {K:,} responses, more than the {MAX_SEQUENCES:,} it enumerates; use a smaller "
            "vocab_size or horizon"
        )
    n_out = vocab_size + int(eos)
    # enumeration index arrays (5 x K x T), per-token log-probs and reward means (P x K x T)
    n_bytes = 8.0 * K * (5 * horizon + n_prompts * (horizon + 2))
    n_bytes += 8.0 * n_prompts * horizon * (vocab_size + 1) * n_out
    V.check_memory(f"SequencePolicy enumeration (P={n_prompts}, K={K:,}, horizon={horizon})",
                   n_bytes, "use fewer prompts, a smaller vocab_size or horizon")
    return K
