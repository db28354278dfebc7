"""A tiny neural sequence policy for the credit-assignment study: an MLP's next-token logits
over :class:`~grpo_theory.core.policies.SequencePolicy`'s response space, a temperature-scaled
copy of a policy and the exact sequence entropy."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _validation as V
from ..core import EnumerablePolicy, SequencePolicy, as_problem
from .._precision import float64


class MLPSequencePolicy(EnumerablePolicy):
    r"""Autoregressive softmax policy whose next-token logits come from a one-hidden-layer MLP.

    Input ``[onehot(prompt), onehot(position), onehot(previous token or start)]`` (dimension
    ``P + T + V + 1``), ``h = tanh(x W1 + b1)`` (``hidden`` units), logits ``h W2 + b2`` over
    ``V + eos`` tokens. The response space is that of :class:`SequencePolicy` (same enumeration,
    rewards and ``token_log_probs``); ``params`` is the flat vector ``[W1, b1, W2, b2]``.
    """

    @float64
    def __init__(self, reward, n_prompts: int, vocab_size: int, horizon: int, hidden: int = 16,
                 seed: int = 0, eos: bool = True, init_scale: float = 1.0, prompt_probs=None,
                 *, key=None):
        V.positive_int("n_prompts", n_prompts, 1)
        self.hidden = V.positive_int("hidden", hidden, 1)
        n_out = vocab_size + int(eos)
        zeros = np.zeros((n_prompts, horizon, vocab_size + 1, n_out))
        self.seq = SequencePolicy(zeros, reward, vocab_size, horizon, eos=eos,
                                  prompt_probs=prompt_probs)
        self.vocab_size, self.horizon, self.eos = vocab_size, horizon, eos
        self.responses, self.lengths = self.seq.responses, self.seq.lengths
        self.reward_means, self.prompt_probs = self.seq.reward_means, self.seq.prompt_probs
        P, T, Vp = n_prompts, horizon, vocab_size + 1
        d_in = P + T + Vp
        self.shapes = dict(W1=(d_in, hidden), b1=(hidden,), W2=(hidden, n_out), b2=(n_out,))
        pp, tt, vv = np.meshgrid(np.arange(P), np.arange(T), np.arange(Vp), indexing="ij")
        feats = np.concatenate([np.eye(P)[pp], np.eye(T)[tt], np.eye(Vp)[vv]], axis=-1)
        self.features = jnp.asarray(feats)  # (P, T, V+1, d_in)
        k1, k2 = jax.random.split(V.random_key(seed, key))
        w1 = jax.random.normal(k1, (d_in, hidden)) / np.sqrt(d_in)
        w2 = init_scale * jax.random.normal(k2, (hidden, n_out)) / np.sqrt(hidden)
        self.params = jnp.concatenate([w1.ravel(), jnp.zeros(hidden), w2.ravel(),
                                       jnp.zeros(n_out)])

    @float64
    def unflatten(self, theta):
        out, i = {}, 0
        for name, shp in self.shapes.items():
            n = int(np.prod(shp))
            out[name] = theta[i:i + n].reshape(shp)
            i += n
        return out

    @float64
    def block(self, flat, name: str):
        """The slice of a flat vector (..., D) for one weight, reshaped to its matrix shape."""
        if name not in self.shapes:
            raise ValueError(f"name must be one of {list(self.shapes)}, got {name!r}")
        i = 0
        for nm, shp in self.shapes.items():
            n = int(np.prod(shp))
            if nm == name:
                return flat[..., i:i + n].reshape(*flat.shape[:-1], *shp)
            i += n

    @float64
    def logit_table(self, params=None):
        theta = self.params if params is None else params
        w = self.unflatten(theta)
        h = jnp.tanh(self.features @ w["W1"] + w["b1"])
        return h @ w["W2"] + w["b2"]

    @float64
    def token_log_probs(self, params=None):
        return self.seq.token_log_probs(self.logit_table(params))

    @float64
    def log_probs(self, params=None):
        return jnp.sum(self.token_log_probs(params), axis=-1)

    @float64
    def scaled(self, beta: float):
        """The same network with output logits multiplied by ``beta`` (inverse temperature)."""
        w = self.unflatten(self.params)
        flat = jnp.concatenate([w["W1"].ravel(), w["b1"], beta * w["W2"].ravel(), beta * w["b2"]])
        return self.with_params(flat)


@float64
def scaled_policy(policy, beta: float):
    """Inverse-temperature copy: tabular logits times ``beta`` (or the MLP's output layer)."""
    if not (np.isfinite(beta) and beta >= 0):
        raise ValueError(f"beta must be a finite number >= 0, got {beta!r}")
    if isinstance(policy, MLPSequencePolicy):
        return policy.scaled(beta)
    if isinstance(policy, EnumerablePolicy):
        return policy.with_params(beta * policy.params)
    raise ValueError(f"policy must be an enumerable policy, got {type(policy).__name__}")


@float64
def sequence_entropy(problem) -> jnp.ndarray:
    """Response-level entropy ``H(pi(.|x))`` in nats, shape (P,)."""
    p = as_problem(problem).probs
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=1)
