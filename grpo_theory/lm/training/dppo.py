r"""DPPO pruning and dense packing inside the small transformer's GRPO step.

One step is split into two jitted parts, so that their time can be measured apart:

* :func:`sample_batch` -- B prompts from the pool, G responses each, rewards, advantages from
  the registry estimator on the **full** group, keep probabilities ``(qp, qc) = scheme(A)``
  (:class:`grpo_theory.companions.dppo.KeepScheme`; uniform: ``qp = 1 - r_q``,
  ``qc = 1 - r_o``) and independent Bernoulli masks ``m_b ~ qp_b``, ``c_bg ~ qc_bg``.
* :func:`update` -- the Adam step on the kept responses only. Each kept response n carries the
  weight (:func:`response_weights`, as in :func:`grpo_theory.companions.dppo.pruned_estimate`)

  .. math:: w_n = \frac{m_b c_{bg}}{qp_b\, qc_{bg}} \frac{A_{bg}}{BG},\qquad
            \hat g_{\rm DPPO} = \sum_n w_n \nabla\log\pi(y_n|x_n),

  whose expectation over the masks is the full-batch estimate of Algorithm 1 (Horvitz-Thompson).
  Controls: ``no_rescale`` (no ``1/q``) and ``recompute`` (advantages recomputed on the kept
  completions, :func:`grpo_theory.companions.dppo.masked_advantages`), both biased.

The backward pass really skips the pruned tokens: the kept sequences are gathered on the host
into a smaller array (:func:`layout`), either one sequence per row (``capacity=None``) or
densely packed -- prompt PADs and the PADs after EOS stripped, sequences laid end to end in rows
of ``capacity`` tokens (:func:`grpo_theory.companions.packing.pack`), attention restricted to
one's own segment and positions as in the unpacked layout (``segment_ids`` / ``positions`` of
:func:`grpo_theory.lm.model.apply`), so every token's log-probability is the unpacked one. The
row count is rounded up to a static bucket (:func:`bucket`: multiples of ``max_rows /
n_buckets``; padding rows have weight 0), so the update compiles once per bucket.

The clipped multi-epoch variant (``epochs > 1`` or ``clip_eps``) maximises
``sum_t min(r_t w_n, clip(r_t, 1 - eps, 1 + eps) w_n)`` over the kept tokens (token ratios to
the sampling policy), which for the full batch is ``N`` times
:func:`grpo_theory.lm.training.loop.clipped_objective`; a positive ``1/q`` factor commutes with the
min and the clip, so the rescaled weights keep it unbiased at the first epoch.
"""

from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from ... import _validation as V
from ...companions import KeepScheme, masked_advantages, pack
from ...core import PromptContext, get_estimator
from ...optim import clipped_surrogate, multi_epoch_update
from .grpo import cached_optimizer, exact_accuracy
from ..policy import LMPolicy
from ..task import PAD, encode_prompts, response_mask, reward_exact_tokens, target_responses


#: weightings of the kept responses: the unbiased one and the two biased controls
METHODS = ("dppo", "no_rescale", "recompute")


def bucket(n: int, max_rows: int, n_buckets: int = 8) -> int:
    """The static row count for ``n`` rows: ``n`` rounded up to a multiple of
    ``ceil(max_rows / n_buckets)``, at least one unit, at most ``max_rows``.

    Args:
        n: rows needed, 0 <= n <= max_rows.
        max_rows: the largest row count (the full batch's).
        n_buckets: number of distinct buckets (compilations).

    Returns:
        The bucket's row count.
    """
    max_rows = V.positive_int("max_rows", max_rows)
    n_buckets = V.positive_int("n_buckets", n_buckets)
    n = V.integer("n", n, 0, max_rows)
    unit = -(-max_rows // n_buckets)
    return int(min(max_rows, unit * max(1, -(-n // unit))))


@partial(jax.jit, static_argnames=("sample_fn", "estimator", "batch", "group", "eos"))
def _sample(sample_fn, estimator, params, key, pool_x, pool_canon, scheme, batch, group,
            temperature, eos):
    est = get_estimator(estimator)
    kx, ky, km, kc = jax.random.split(key, 4)
    idx = jax.random.randint(kx, (batch,), 0, pool_x.shape[0])
    x = jnp.repeat(pool_x[idx], group, axis=0)
    canon = jnp.repeat(pool_canon[idx], group, axis=0)
    y = sample_fn(params, ky, x, pool_canon.shape[1], temperature)
    z = reward_exact_tokens(y, canon).astype(jnp.float32).reshape(batch, group)
    adv = est.advantage(z, PromptContext()).astype(jnp.float32)
    qp, qc = scheme(adv)
    m = jax.random.bernoulli(km, qp)
    c = jax.random.bernoulli(kc, qc)
    return dict(x=x, y=y, z=z, adv=adv, qp=qp.astype(jnp.float32), qc=qc.astype(jnp.float32),
                m=m, c=c, mask=response_mask(y, eos))


@V.renamed_arguments(group="group_size")
def sample_batch(policy: LMPolicy, key, pool_x, pool_canon, scheme: KeepScheme, batch: int,
                 group_size: int, estimator: str = "grpo") -> dict:
    r"""One sampled batch with full-group advantages, keep probabilities and keep masks.

    Args:
        policy: an :class:`LMPolicy` with a jit-able ``sample_fn``.
        key: JAX PRNG key.
        pool_x, pool_canon: (P, Lp) prompts and (P, R) canonical answers of the training pool.
        scheme: a :class:`KeepScheme` (``qp``, ``qc`` from the full-group advantages).
        batch, group_size: B prompts, G responses each.
        estimator: registry name of the advantage estimator.

    Returns:
        dict of device arrays: ``x`` (BG, Lp), ``y`` (BG, R), ``mask`` (BG, R) response tokens
        up to the first EOS, ``z``, ``adv``, ``qc``, ``c`` (B, G), ``qp``, ``m`` (B,).
    """
    if policy.sample_fn is None:
        raise ValueError("policy needs a jit-able sample_fn")
    if not isinstance(scheme, KeepScheme):
        raise ValueError(f"scheme must be a KeepScheme, got {type(scheme).__name__}")
    return _sample(policy.sample_fn, estimator, policy.params, key, jnp.asarray(pool_x),
                   jnp.asarray(pool_canon), scheme, V.positive_int("batch", batch),
                   V.positive_int("group_size", group_size, 2), policy.temperature, policy.eos_ids)


def response_weights(b: dict, method: str = "dppo", estimator: str = "grpo", m=None, c=None):
    r"""Per-response weights ``w`` (BG,) and the kept mask (BG,) of a sampled batch.

    ``dppo``: ``w = m c / (qp qc) A / BG``; ``no_rescale``: ``m c A / BG``; ``recompute``:
    advantages recomputed on the kept completions, then ``1/(qp qc)``.

    Args:
        b: a :func:`sample_batch` dict (host or device arrays).
        method: one of :data:`METHODS`.
        estimator: the advantage estimator (``recompute`` only).
        m, c: (B,) and (B, G) masks overriding the batch's (to draw many masks for one batch).

    Returns:
        ``(w, keep)``: float64 weights (BG,) and booleans (BG,).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    m = np.asarray(b["m"] if m is None else m, np.float64)
    c = np.asarray(b["c"] if c is None else c, np.float64)
    adv, qp, qc = (np.asarray(b[k], np.float64) for k in ("adv", "qp", "qc"))
    B, G = adv.shape
    keep = m[:, None] * c
    if method == "recompute":
        z = jnp.asarray(np.asarray(b["z"], np.float32))
        adv = np.asarray(masked_advantages(estimator, z, jnp.asarray(keep > 0),
                                           PromptContext()), np.float64)
    w = keep * adv / (B * G)
    if method != "no_rescale":
        w = w / (qp[:, None] * qc)
    return w.reshape(-1), keep.reshape(-1) > 0


def layout(x, y, mask, w, keep, capacity=None, max_prompt=None, n_buckets: int = 8) -> dict:
    r"""The kept sequences as a static-shape token array for :func:`update`.

    ``capacity=None``: one kept sequence per row (``[prompt, response]``, PADs kept), rows
    rounded up to a bucket of ``N``. Otherwise dense packing into rows of ``capacity`` tokens:
    each kept sequence is its prompt without PADs and its response up to and including EOS;
    ``positions = offset - prompt tokens + max_prompt`` (the unpacked embedding index),
    ``segment_ids`` one per sequence (0 on row padding); rows rounded up to a bucket of
    ``ceil(N / (capacity // (Lp + R)))``.

    Args:
        x, y, mask: (N, Lp) prompts, (N, R) responses, (N, R) response-token mask (host arrays).
        w: (N,) weights; keep: (N,) booleans (the sequences to lay out).
        capacity: None or the packed row length (>= Lp + R).
        max_prompt: the model's ``max_prompt`` (packing only).
        n_buckets: buckets of the row count.

    Returns:
        dict: ``tokens`` (rows, T) int32, ``tw`` (rows, T - 1) float32 weight of token t+1's
        log-probability, ``segment_ids``/``positions`` (packing; else None), ``prompt_len``,
        ``n_kept`` sequences, ``n_tokens`` real tokens laid out, ``n_rows`` used.
    """
    x, y, mask = np.asarray(x), np.asarray(y), np.asarray(mask, np.float32)
    w, keep = np.asarray(w, np.float32), np.asarray(keep, bool)
    n, lp = x.shape
    r = y.shape[1]
    idx = np.flatnonzero(keep)
    k = idx.size
    p_len = (x[idx] != PAD).sum(1)
    r_len = mask[idx].sum(1).astype(np.int64)
    n_tokens = int(p_len.sum() + r_len.sum())
    if capacity is None:
        rows = bucket(k, n, n_buckets)
        tokens = np.full((rows, lp + r), PAD, np.int32)
        tokens[:k] = np.concatenate([x[idx], y[idx]], axis=1)
        tw = np.zeros((rows, lp + r - 1), np.float32)
        tw[:k, lp - 1:] = w[idx, None] * mask[idx]
        return dict(tokens=tokens, tw=tw, segment_ids=None, positions=None, prompt_len=lp,
                    n_kept=k, n_tokens=n_tokens, n_rows=k)
    capacity = V.integer("capacity", capacity, lp + r)
    if max_prompt is None:
        raise ValueError("max_prompt must be given for packing (the model's cfg.max_prompt)")
    lengths = p_len + r_len
    pk = pack(lengths, capacity, window=16) if k else None
    used = pk.n_rows if k else 0
    rows = bucket(used, -(-n // (capacity // (lp + r))), n_buckets)
    tokens = np.full((rows, capacity), PAD, np.int32)
    seg = np.zeros((rows, capacity), np.int32)
    pos = np.zeros((rows, capacity), np.int32)
    tw = np.zeros((rows, capacity), np.float32)
    for j, i in enumerate(idx):
        row, off, pl, rl = pk.row[j], pk.offset[j], p_len[j], r_len[j]
        seq = np.concatenate([x[i, lp - pl:], y[i, :rl]])
        sl = slice(off, off + pl + rl)
        tokens[row, sl] = seq
        seg[row, sl] = j + 1
        pos[row, sl] = np.arange(pl + rl) - pl + max_prompt
        tw[row, off + pl: off + pl + rl] = w[i]
    return dict(tokens=tokens, tw=tw[:, 1:], segment_ids=seg, positions=pos, prompt_len=lp,
                n_kept=k, n_tokens=n_tokens, n_rows=used)


def _token_lp(apply_fn, params, tokens, seg, pos, prompt_len, temperature):
    """log pi of token t+1 given tokens <= t, (rows, T - 1)."""
    if seg is None:
        logits = apply_fn(params, tokens, prompt_len)
    else:
        logits = apply_fn(params, tokens, prompt_len, segment_ids=seg, positions=pos)
    lp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32) / temperature, axis=-1)
    return jnp.take_along_axis(lp, tokens[:, 1:, None], axis=-1)[..., 0]


@partial(jax.jit, static_argnames=("apply_fn", "prompt_len"))
def _grad(apply_fn, params, tokens, seg, pos, tw, prompt_len, temperature):
    return jax.grad(lambda p: -jnp.sum(tw * _token_lp(apply_fn, p, tokens, seg, pos,
                                                       prompt_len, temperature)))(params)


@partial(jax.jit, static_argnames=("apply_fn", "opt", "prompt_len", "epochs"))
def _update(apply_fn, opt, params, opt_state, tokens, seg, pos, tw, prompt_len, temperature,
            epochs, eps):
    if epochs == 1:  # Algorithm 1 (the clipped objective has this gradient at ratio 1)
        g = _grad(apply_fn, params, tokens, seg, pos, tw, prompt_len, temperature)
        u, opt_state = opt.update(g, opt_state, params)
        return jax.tree_util.tree_map(jnp.add, params, u), opt_state
    old = jax.lax.stop_gradient(_token_lp(apply_fn, params, tokens, seg, pos, prompt_len,
                                          temperature))

    def objective(q):
        rt = jnp.exp(_token_lp(apply_fn, q, tokens, seg, pos, prompt_len, temperature) - old)
        return jnp.sum(clipped_surrogate(rt, tw, eps))

    return multi_epoch_update(opt, params, opt_state, objective, epochs)


def update(policy: LMPolicy, opt, params, opt_state, lay: dict, epochs: int = 1,
           clip_eps=None):
    """The Adam step(s) on a :func:`layout` (Algorithm 1 for ``epochs == 1``, else the clipped
    multi-epoch surrogate of the module docstring).

    Args:
        policy: the :class:`LMPolicy` (its ``apply_fn`` and temperature).
        opt: an optax optimiser; params, opt_state: the current state.
        lay: from :func:`layout`.
        epochs: >= 1; clip_eps: None (no clipping) or in (0, 1).

    Returns:
        ``(params, opt_state)`` after the step(s).
    """
    eps = jnp.inf if clip_eps is None else float(clip_eps)
    return _update(policy.apply_fn, opt, params, opt_state, lay["tokens"], lay["segment_ids"],
                   lay["positions"], lay["tw"], lay["prompt_len"], policy.temperature,
                   int(epochs), eps)


def gradient(policy: LMPolicy, lay: dict) -> np.ndarray:
    r"""The estimate ``sum_n w_n grad log pi(y_n|x_n)`` of a :func:`layout`, flattened (D,)."""
    g = _grad(policy.apply_fn, policy.params, lay["tokens"], lay["segment_ids"],
              lay["positions"], lay["tw"], lay["prompt_len"], policy.temperature)
    return np.asarray(ravel_pytree(g)[0])


def _max_prompt(policy: LMPolicy, capacity):
    if capacity is None:
        return None
    cfg = getattr(policy.apply_fn, "keywords", {}).get("cfg")
    if cfg is None or not hasattr(cfg, "max_prompt"):
        raise ValueError("packing (capacity) needs the package's transformer "
                         "(apply_fn = grpo_theory.lm.model.make_apply(cfg))")
    return int(cfg.max_prompt)


def warm_up(policy: LMPolicy, opt, b: dict, capacity=None, epochs: int = 1, clip_eps=None,
            n_buckets: int = 8) -> int:
    """Compile :func:`update` for every row bucket of this batch shape (weights 0; results
    discarded), so that timed steps exclude compilation. Returns the number of buckets."""
    x, y, mask = (np.asarray(b[k]) for k in ("x", "y", "mask"))
    n, lp = x.shape
    per_row = 1 if capacity is None else capacity // (lp + y.shape[1])
    max_rows = -(-n // per_row)
    sizes = sorted({bucket(i, max_rows, n_buckets) for i in range(max_rows + 1)})
    t = lp + y.shape[1] if capacity is None else capacity
    state = opt.init(policy.params)
    for rows in sizes:
        lay = dict(tokens=np.zeros((rows, t), np.int32), tw=np.zeros((rows, t - 1), np.float32),
                   segment_ids=None if capacity is None else np.ones((rows, t), np.int32),
                   positions=None if capacity is None else np.zeros((rows, t), np.int32),
                   prompt_len=lp)
        jax.block_until_ready(update(policy, opt, policy.params, state, lay, epochs, clip_eps))
    return len(sizes)


@V.renamed_arguments(group="group_size")
def train_dppo(policy: LMPolicy, pool, eval_questions, batch: int, group_size: int,
               n_steps: int, checkpoints, lr: float, seed, scheme: KeepScheme = KeepScheme(),
               estimator: str = "grpo", epochs: int = 1, clip_eps=None, capacity=None,
               method: str = "dppo", n_buckets: int = 8, *, key=None) -> list[dict]:
    """GRPO with DPPO pruning from ``policy`` (answer-only format); one row per checkpoint.

    Each step is timed in two parts after a warm-up that compiles every shape:
    ``sample_seconds`` (:func:`sample_batch`, to ``block_until_ready``) and ``update_seconds``
    (host :func:`response_weights` + :func:`layout` + :func:`update`); the held-out exact
    accuracy (:func:`grpo_theory.lm.training.grpo.exact_accuracy`) is computed at step 0 and at each
    checkpoint, outside the timed parts.

    Args:
        policy: the starting :class:`LMPolicy` (``sample_fn`` required).
        pool, eval_questions: training pool and evaluation questions (:mod:`grpo_theory.lm.task`).
        batch, group_size: B prompts x G responses per step.
        n_steps: steps; checkpoints: steps at which to evaluate (``n_steps`` is added).
        lr: Adam learning rate (global-norm clip 1, as
            :func:`~grpo_theory.lm.training.grpo.train_grpo`).
        seed: integer or key; key: a JAX key (or integer), used instead of ``seed`` when given.
        scheme: keep probabilities; ``KeepScheme()`` keeps everything (full GRPO).
        estimator, epochs, clip_eps: as :func:`~grpo_theory.lm.training.grpo.train_grpo`.
        capacity: None (one sequence per row) or the packed row length.
        method: ``dppo`` or a biased control (:data:`METHODS`).
        n_buckets: row buckets.

    Returns:
        Rows ``step, accuracy, train_reward, sample_seconds, update_seconds`` (cumulative
        wall clock) and ``sample_cpu_seconds, update_cpu_seconds`` (cumulative CPU time of the
        process, all threads: less sensitive to other processes on a shared machine),
        ``kept_share`` (kept responses / BG), ``token_share`` (kept real tokens / all real
        tokens), ``row_share`` (token slots of the array the update processes / the unpacked full
        batch's ``BG (Lp + R)``), the last
        three averaged since the previous checkpoint.
    """
    group = group_size
    n_steps = V.positive_int("n_steps", n_steps)
    if int(epochs) != epochs or epochs < 1:
        raise ValueError(f"epochs must be an integer >= 1, got {epochs!r}")
    if clip_eps is not None and not 0.0 < clip_eps < 1.0:
        raise ValueError(f"clip_eps must be None or lie in (0, 1), got {clip_eps!r}")
    max_prompt = _max_prompt(policy, capacity)
    checkpoints = sorted({int(c) for c in checkpoints if 0 < c <= n_steps} | {n_steps})
    pool_x = jnp.asarray(encode_prompts(pool, "answer"))
    pool_c = jnp.asarray(target_responses(pool, "answer"))
    ex = encode_prompts(eval_questions, "answer")
    ec = target_responses(eval_questions, "answer")
    opt = cached_optimizer(float(lr))
    params, state = policy.params, opt.init(policy.params)
    key = V.key_or_seed(seed, "seed") if key is None else V.key_or_seed(key, "key")
    n = batch * group
    # warm-up: compile sampling and every update bucket (not timed)
    b0 = jax.block_until_ready(sample_batch(policy, jax.random.fold_in(key, 1 << 20), pool_x,
                                            pool_c, scheme, batch, group, estimator))
    warm_up(policy, opt, b0, capacity, epochs, clip_eps, n_buckets)
    rows = [dict(step=0, accuracy=exact_accuracy(policy, ex, ec), train_reward=float("nan"),
                 sample_seconds=0.0, update_seconds=0.0, sample_cpu_seconds=0.0,
                 update_cpu_seconds=0.0, kept_share=float("nan"),
                 token_share=float("nan"), row_share=float("nan"))]
    t_s = t_u = c_s = c_u = 0.0
    acc = dict(reward=[], kept=[], tok=[], rows=[])
    for step in range(1, n_steps + 1):
        k = jax.random.fold_in(key, step)
        t0, p0 = time.perf_counter(), time.process_time()
        b = jax.block_until_ready(sample_batch(policy.with_params(params), k, pool_x, pool_c,
                                               scheme, batch, group, estimator))
        t1, p1 = time.perf_counter(), time.process_time()
        hb = jax.device_get(b)
        w, keep = response_weights(hb, method, estimator)
        lay = layout(hb["x"], hb["y"], hb["mask"], w, keep, capacity, max_prompt, n_buckets)
        params, state = jax.block_until_ready(update(policy, opt, params, state, lay, epochs,
                                                     clip_eps))
        t2, p2 = time.perf_counter(), time.process_time()
        t_s, t_u, c_s, c_u = t_s + t1 - t0, t_u + t2 - t1, c_s + p1 - p0, c_u + p2 - p1
        full_tokens = int((hb["x"] != PAD).sum() + hb["mask"].sum())
        acc["reward"].append(float(np.mean(hb["z"])))
        acc["kept"].append(lay["n_kept"] / n)
        acc["tok"].append(lay["n_tokens"] / full_tokens)
        acc["rows"].append(lay["tokens"].size / (n * (hb["x"].shape[1] + hb["y"].shape[1])))
        if step in checkpoints:
            rows.append(dict(step=step, accuracy=exact_accuracy(policy.with_params(params), ex,
                                                                ec),
                             train_reward=float(np.mean(acc["reward"])), sample_seconds=t_s,
                             update_seconds=t_u, sample_cpu_seconds=c_s,
                             update_cpu_seconds=c_u, kept_share=float(np.mean(acc["kept"])),
                             token_share=float(np.mean(acc["tok"])),
                             row_share=float(np.mean(acc["rows"]))))
            acc = dict(reward=[], kept=[], tok=[], rows=[])
    return rows
