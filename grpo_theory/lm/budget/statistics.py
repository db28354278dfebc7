r"""The advisor's statistics of a language-model policy, streamed at O(D) memory.

For m prompts ``x_a`` with n sampled responses ``y_ai`` each, rewards ``Z_ai``, scores
``s_ai = grad_theta log pi(y_ai | x_a)``, ``ghat_a = (1/n) sum_i Z_ai s_ai`` and
``S = sum_a ghat_a``, the estimators of c1, c2, c3 (the main paper, Theorem 7) need every
``||s_ai||^2``, every ``||ghat_a||^2`` and every ``<ghat_a, S>``: a
:class:`~grpo_theory.core.rollouts.RolloutStatistics`. Two routes, chosen by the policy
(:meth:`grpo_theory.lm.policy.LMPolicy.score_statistics`), never by probing it:

* :func:`per_sample_statistics` (the default of every policy): (1) per-sample scores in blocks
  of ``chunk`` (:meth:`~grpo_theory.lm.policy.LMPolicy.score_contractions`) give every
  ``||s_ai||^2`` and ``S``; (2) one backward pass per prompt gives ``ghat_a``
  (:meth:`~grpo_theory.lm.policy.LMPolicy.weighted_score`), hence ``||ghat_a||^2`` and
  ``<ghat_a, S>``;
* :func:`ghost_statistics` (a Hugging Face checkpoint,
  :meth:`grpo_theory.lm.checkpoints.hf.HFPolicy.score_statistics`): (1) one backward pass per block
  of whole groups gives every ``||s_ai||^2``, every ``||ghat_a||^2`` (the group's ghost norm) and
  ``S``; (2) one forward-mode pass gives every ``<s_ai, S>``, hence ``<ghat_a, S> = sum_i (Z_ai / n)
  <s_ai, S>``. When the chunk holds every response (one block), pass 1 forms the ``<s_ai, S>``
  itself, each layer's as its sum completes in the backward pass, and pass 2 is skipped
  (:func:`grpo_theory.lm.budget.ghost.ghost_moments` with ``dots``).

:func:`lm_rollout_statistics` samples the responses, scores them with the reward and returns
the record with the responses.
"""

from __future__ import annotations

import numpy as np

from ... import _validation as V
from ...core import RolloutStatistics
from .memory import out_of_memory_as_value_error
from .options import ModelOptions, score_memory


#: pass 1 of the statistics runs in at most this many calls (progress steps)
SCORE_CALLS = 16


def _call_rows(n_rows: int, chunk: int) -> int:
    """Rows per call: whole blocks of ``chunk``, at most :data:`SCORE_CALLS` calls."""
    n_chunks = -(-n_rows // chunk)
    return -(-n_chunks // SCORE_CALLS) * chunk


def _padded(arrays, rows: int):
    """Each array's leading axis padded to ``rows`` with copies of row 0 (zero-weighted by
    the caller)."""
    return [a if a.shape[0] == rows else
            np.concatenate([a, np.repeat(a[:1], rows - a.shape[0], 0)]) for a in arrays]


def _streamed_contractions(policy, xs, y, weights, chunk, stage):
    """``policy.score_contractions`` over all N rows in at most :data:`SCORE_CALLS` calls of
    ``k * chunk`` rows each (equal shapes, one compile; the last call padded with zero-weight
    copies of row 0), reporting ``stage("scores", done, total)`` after each call."""
    n = xs.shape[0]
    chunk = int(min(chunk, n))
    rows = _call_rows(n, chunk)
    calls = -(-n // rows)
    acc, sq = None, []
    if stage is not None:
        stage("scores", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(n, (i + 1) * rows))
        bx, by, bw = xs[sl], y[sl], weights[:, sl]
        pad = rows - bx.shape[0]
        if pad and calls > 1:
            bx, by = _padded([bx, by], rows)
            bw = np.concatenate([bw, np.zeros((bw.shape[0], pad))], axis=1)
        with out_of_memory_as_value_error(f"the per-sample scores (chunk {chunk} of "
                                          f"{score_memory(policy)[0]:,} parameters)"):
            a, q = policy.score_contractions(bx, by, bw, chunk=chunk)
        if acc is None:  # the first result itself when writeable float64, then added in place
            acc = np.asarray(a, dtype=np.float64)
            if not acc.flags.writeable:
                acc = acc.copy()
        else:
            acc += np.asarray(a)
        sq.append(np.asarray(q)[:rows - pad if calls > 1 else None])
        if stage is not None:
            stage("scores", i + 1, calls)
    return acc, np.concatenate(sq)


def _dots64(g, s, block: int = 1 << 22):
    """``(g . g, g . s)`` accumulated in float64 over slices of ``block`` entries (no float64
    copy of the whole D-vector ``g``)."""
    gg = gs = 0.0
    for i in range(0, g.shape[0], block):
        gi = np.asarray(g[i:i + block], np.float64)
        gg += float(gi @ gi)
        gs += float(gi @ s[i:i + block])
    return gg, gs


def _rollouts(prompts, responses, rewards):
    """Checked (prompts (m, P), responses (m, n, R), rewards (m, n) float64) of one call."""
    x = np.asarray(prompts)
    y = np.asarray(V.token_array("responses", responses, 3))
    m, n, _ = y.shape
    if x.ndim != 2 or x.shape[0] != m:
        raise ValueError(f"prompts must have shape ({m}, P) (one row per prompt of responses "
                         f"{y.shape}), got {x.shape}")
    z = V.finite_array("rewards", rewards, ndim=2).astype(np.float64)
    V.same_shape("rewards", z, (m, n), "responses' (n_prompts, n_samples)")
    return x, y, z


def per_sample_statistics(policy, prompts, responses, rewards, chunk: int, *, stage=None,
                          progress=None) -> RolloutStatistics:
    """The statistics by per-sample scores (module docstring; any policy).

    Args:
        policy: an :class:`~grpo_theory.lm.policy.LMPolicy`.
        prompts: (m, P) prompt ids; responses: (m, n, R) response ids; rewards: (m, n).
        chunk: per-sample scores held at once in pass 1 (>= 1).
        stage: optional ``stage(phase, done, total)``: ``"scores"`` (the calls of pass 1) and
            ``"gradients"`` (the prompts of pass 2).
        progress: optional ``progress(done, total)`` over the prompts of pass 2.

    Returns:
        :class:`~grpo_theory.core.rollouts.RolloutStatistics` (``chunk`` the chunk used).
    """
    x, y, z = _rollouts(prompts, responses, rewards)
    m, n, R = y.shape
    chunk = V.positive_int("chunk", chunk)
    xs, yf = np.repeat(x, n, axis=0), y.reshape(m * n, R)
    acc, sq = _streamed_contractions(policy, xs, yf, (z.reshape(-1) / n)[None, :], chunk, stage)
    s_total = acc[0]
    mean_sq, mean_dot = np.zeros(m), np.zeros(m)
    for a in range(m):
        sl = slice(a * n, (a + 1) * n)
        with out_of_memory_as_value_error(f"the gradient of prompt {a + 1}'s {n} responses"):
            g = np.asarray(policy.weighted_score(xs[sl], yf[sl], z[a] / n))
        mean_sq[a], mean_dot[a] = _dots64(g, s_total)
        if progress is not None:
            progress(a + 1, m)
        if stage is not None:
            stage("gradients", a + 1, m)
    return RolloutStatistics(z, np.asarray(sq).reshape(m, n), mean_sq, mean_dot,
                             n_params=score_memory(policy)[0], chunk=chunk)


def ghost_statistics(policy, prompts, responses, rewards, chunk: int, *, stage=None,
                     progress=None) -> RolloutStatistics:
    """The statistics by ghost norms (module docstring): a policy with ``ghost_moments`` and
    ``score_dots`` (:class:`grpo_theory.lm.checkpoints.hf.HFPolicy`, which calls this).

    Blocks hold whole groups: ``chunk`` is rounded down to a multiple of n (at least n); the
    last call is padded with zero-weight copies of row 0 (whole groups).

    Args:
        policy, prompts, responses, rewards: as :func:`per_sample_statistics`.
        chunk: sequences per block (>= n responses per prompt).
        stage: optional ``stage(phase, done, total)``: ``"scores"`` (pass 1) and ``"dots"``
            (the forward-mode pass 2; none when one block holds every response).
        progress: optional ``progress(done, total)`` over the prompts of pass 2.

    Returns:
        :class:`~grpo_theory.core.rollouts.RolloutStatistics` (``chunk`` the chunk used).
    """
    x, y, z = _rollouts(prompts, responses, rewards)
    m, n, R = y.shape
    big = m * n
    chunk = (min(V.positive_int("chunk", chunk), big) // n) * n
    if chunk < n:
        raise ValueError(f"chunk must hold a whole group of {n} responses on the ghost-norm "
                         f"route, got {chunk}")
    xs, yf, w = np.repeat(x, n, axis=0), y.reshape(big, R), z.reshape(-1) / n
    rows = _call_rows(big, chunk)
    calls = -(-big // rows)
    what = f"the ghost-norm statistics (chunk {chunk} of {score_memory(policy)[0]:,} parameters)"
    if chunk == big:  # one block: the dot products from the same backward pass
        if stage is not None:
            stage("scores", 0, 1)
        with out_of_memory_as_value_error(what):
            _, q, gq, d = policy.ghost_moments(xs, yf, w, n, chunk=chunk, dots=True)
        if stage is not None:
            stage("scores", 1, 1)
        if progress is not None:
            progress(m, m)
        return RolloutStatistics(z, q.reshape(m, n), gq, (w * d).reshape(m, n).sum(axis=1),
                                 n_params=score_memory(policy)[0], chunk=chunk)
    s_total, sq, gsq = None, [], []
    if stage is not None:
        stage("scores", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(big, (i + 1) * rows))
        k = sl.stop - sl.start
        bx, by = _padded([xs[sl], yf[sl]], rows)
        bw = np.concatenate([w[sl], np.zeros(rows - k)])
        with out_of_memory_as_value_error(what):
            s_total, q, gq = policy.ghost_moments(bx, by, bw, n, chunk=chunk, init=s_total)
        sq.append(q[:k])
        gsq.append(gq[:k // n])
        if stage is not None:
            stage("scores", i + 1, calls)
    dots = []
    if stage is not None:
        stage("dots", 0, calls)
    for i in range(calls):
        sl = slice(i * rows, min(big, (i + 1) * rows))
        bx, by = _padded([xs[sl], yf[sl]], rows)
        with out_of_memory_as_value_error(f"the score dot products (chunk {chunk})"):
            dots.append(policy.score_dots(bx, by, s_total, chunk=chunk)[:sl.stop - sl.start])
        if progress is not None:
            progress(sl.stop // n, m)
        if stage is not None:
            stage("dots", i + 1, calls)
    mean_dot = (w * np.concatenate(dots)).reshape(m, n).sum(axis=1)
    return RolloutStatistics(z, np.concatenate(sq).reshape(m, n), np.concatenate(gsq),
                             mean_dot, n_params=score_memory(policy)[0], chunk=chunk)


def lm_rollout_statistics(policy, prompts, reward, n_samples: int, key, response_len: int,
                          chunk: int | None = 64, progress=None, *, memory_budget=None,
                          stage=None, options: ModelOptions | None = None
                          ) -> RolloutStatistics:
    """Sampled responses of a language-model policy, their rewards and score statistics.

    ``n_samples`` responses per prompt (:meth:`~grpo_theory.lm.policy.LMPolicy.
    sample_blocked`), their rewards, and the statistics by the policy's own route
    (:meth:`~grpo_theory.lm.policy.LMPolicy.score_statistics`: per-sample scores by default,
    ghost norms for a Hugging Face checkpoint; module docstring), O(D) memory.

    Args:
        policy: an :class:`~grpo_theory.lm.policy.LMPolicy`.
        prompts: (m, P) integer prompt tokens (one row per sampled prompt).
        reward: ``reward(rows (N,), responses (N, R)) -> (N,)`` with ``rows`` the row of
            ``prompts`` each response answers.
        n_samples: n >= 1 responses per prompt.
        key: a JAX key or an integer seed.
        response_len: R >= 1 sampled tokens (the policy's EOS ids end a response).
        chunk: sequences per block of pass 1 (>= 1), or None: the largest that fits in
            ``memory_budget`` (:meth:`~grpo_theory.lm.budget.options.ModelOptions.resolve_chunk`).
        progress: optional ``progress(done, total)`` callback (prompts of pass 2).
        memory_budget: bytes for ``chunk=None`` (None: half the available memory).
        stage: optional ``stage(phase, done, total)`` callback, ``phase`` one of
            ``"sampling"`` (0/k, then i/k after each of the k blocks of
            :meth:`~grpo_theory.lm.policy.LMPolicy.sample_blocked`), ``"scores"`` (the calls
            of pass 1) and
            ``"dots"`` (forward-mode pass 2) or ``"gradients"`` (per-prompt pass 2).
        options: the :class:`~grpo_theory.lm.budget.options.ModelOptions` instead of ``chunk`` and
            ``memory_budget`` (then both must be left at their defaults).

    Returns:
        :class:`~grpo_theory.core.rollouts.RolloutStatistics` with ``responses`` (m, n, R) and
        ``chunk`` (the chunk used).

    Raises:
        ValueError: bad input, also for an out-of-memory error of XLA (naming
            ``--memory-budget`` and ``--chunk``).
    """
    if options is None:
        options = ModelOptions(memory_budget=memory_budget, chunk=chunk)
    elif chunk != 64 or memory_budget is not None:
        raise ValueError("give options or (chunk, memory_budget), not both")
    key = V.key_or_seed(key)
    x = np.asarray(policy.check_prompts(prompts))
    m = x.shape[0]
    n = V.positive_int("n_samples", n_samples)
    R = V.positive_int("response_len", response_len)
    chunk = options.resolve_chunk(policy, m * n, seq_len=x.shape[1] + R, response_len=R,
                                  group_size=n)
    xs = np.repeat(x, n, axis=0)
    blocks = None if stage is None else (lambda done, total: stage("sampling", done, total))
    max_rows = options.sample_rows(policy, x.shape[1], R)  # the sampler's blocks in the budget
    with out_of_memory_as_value_error(f"sampling {m * n} responses"):
        y = np.asarray(policy.sample_blocked(key, xs, R, progress=blocks, max_rows=max_rows))
    rows = np.repeat(np.arange(m), n)
    z = V.finite_array("reward(...)", np.asarray(reward(rows, y), np.float64).reshape(-1))
    if z.shape[0] != m * n:
        raise ValueError(f"reward must return one reward per response ({m * n}), got {z.shape[0]}")
    y = y.reshape(m, n, R)
    st = policy.score_statistics(x, y, z.reshape(m, n), chunk, stage=stage, progress=progress)
    return RolloutStatistics(st.rewards, st.sq_norms, st.mean_sq, st.mean_dot, y, st.n_params,
                             st.chunk)
