r"""The advisor's statistics from a PyTorch causal language model (``transformers``), streamed.

For m prompts ``x_a`` with n sampled responses ``y_ai`` each and rewards ``Z_ai``, the advisor
(:func:`grpo_theory.advisor.estimate_from_rollouts`) needs, per sample, the squared norm of the
score ``s_ai = w_ai grad_theta log pi(y_ai | x_a)`` (``w_ai`` an optional per-sequence weight,
1 by default) and, per prompt, ``||ghat_a||^2`` and ``<ghat_a, S>`` with
``ghat_a = (1/n) sum_i Z_ai s_ai`` and ``S = sum_a ghat_a``. ``theta`` is the set of parameters
with ``requires_grad`` (for a LoRA/PEFT model: the adapters, which is what GRPO updates).

``log pi(y|x) = sum_t m_t log softmax(logits_t / temperature)[y_t]`` over the response tokens
with mask ``m_t`` (``response_mask``, else every token up to and including the first EOS), by
teacher forcing on the left-padded prompt followed by the response: attention mask = prompt
mask then response mask, position of a token = number of attended tokens before it (as
``model.generate`` numbers a left-padded prompt), so padding changes nothing.

All of it comes from one forward and one backward pass over the batch (:mod:`.ghost`): the
backward pass of ``sum log pi`` to the outputs of the modules that own trainable parameters
gives the per-sample squared norms by ghost norms (Li et al. 2021; Bu et al. 2023), the
per-prompt ``||ghat_a||^2`` by the same algebra over each prompt's n rows, ``S`` by one matmul per
layer and ``<ghat_a, S>`` by another, at O(D) memory beside the activations. With ``chunk``
prompts per pass (fewer than m), ``S`` is known only after the last chunk: the per-prompt means
are then kept (m x D floats, ``store_means``) or the dots taken in a second pass.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Protocol

import numpy as np
import torch

from grpo_theory import _validation as V
from grpo_theory.core import RolloutStatistics
from grpo_theory.advisor import MIN_PROMPTS, MIN_SAMPLES, ScalingEstimate, estimate_from_rollouts

from . import _checks as C
from .ghost import batch_dots, batch_statistics, owned_ids
from .layers import Recorder, check_trainable_layers
from .sampling import sample_from_policy


#: keep the m per-prompt means ``ghat_a`` (m x D floats) instead of a second pass when they take
#: at most this many bytes
STORE_MEANS_BYTES = 2 * V.GiB


# --- inputs -------------------------------------------------------------------------------------

def _int_tensor(name, value, ndim):
    if isinstance(value, torch.Tensor):
        t = value
    else:
        arr = np.asarray(value)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.integer)
                                       or np.issubdtype(arr.dtype, np.bool_)):
            raise ValueError(f"{name} must be an integer array, got dtype {arr.dtype}")
        t = torch.as_tensor(arr)
    if t.is_floating_point() or t.is_complex():
        raise ValueError(f"{name} must be an integer array, got dtype {t.dtype}")
    if t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(t.shape)}")
    if min(t.shape, default=1) < 1:
        raise ValueError(f"{name} must not be empty, got shape {tuple(t.shape)}")
    return t.long()


def _mask_tensor(name, value, shape):
    t = _int_tensor(name, value, len(shape))
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if bool(((t != 0) & (t != 1)).any()):
        raise ValueError(f"{name} must hold only 0 and 1")
    return t


def _eos_of(model, eos_token_id):
    if eos_token_id is None:
        gen = getattr(model, "generation_config", None)
        eos_token_id = getattr(gen, "eos_token_id", None)
        if eos_token_id is None:
            eos_token_id = getattr(getattr(model, "config", None), "eos_token_id", None)
        if eos_token_id is None:
            raise ValueError("give response_mask or eos_token_id: the model's generation_config "
                             "and config name no eos_token_id")
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    return tuple(V.integer("eos_token_id", i, 0) for i in ids)


def response_mask_from_eos(response_ids, eos_token_id):
    """1 for response tokens up to and including the first EOS, else 0.

    Args:
        response_ids: integer tensor (..., T).
        eos_token_id: an id or a sequence of ids, any of which ends a response.

    Returns:
        long tensor of ``response_ids``' shape.
    """
    ids = response_ids
    eos = torch.as_tensor(list(eos_token_id) if not isinstance(eos_token_id, int)
                          else [eos_token_id], device=ids.device)
    is_eos = torch.isin(ids, eos).long()
    before = torch.cumsum(is_eos, dim=-1) - is_eos
    return (before == 0).long()


def _trainable(model):
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named:
        raise ValueError("model has no parameter with requires_grad=True: the scores are "
                         "gradients with respect to the trainable parameters")
    return named


# --- log-probabilities ----------------------------------------------------------------------------

def sequence_log_probs(model, prompt_ids, prompt_mask, response_ids, response_mask,
                       temperature: float = 1.0):
    """``log pi(y|x)`` (N,) by teacher forcing (module docstring), differentiable.

    Only the logits of the positions that predict the response are computed when the model
    takes transformers' ``logits_to_keep`` (as TRL computes its log-probabilities).

    Args:
        model: a ``transformers`` causal LM (``model(input_ids, attention_mask, position_ids)``
            returning ``.logits``).
        prompt_ids, prompt_mask: (N, P) left-padded prompts and their 0/1 mask.
        response_ids, response_mask: (N, T) responses and their 0/1 mask.
        temperature: the logits are divided by it (> 0).

    Returns:
        (N,) float tensor.
    """
    P, T = prompt_ids.shape[1], response_ids.shape[1]
    ids = torch.cat([prompt_ids, response_ids], dim=1)
    att = torch.cat([prompt_mask, response_mask], dim=1)
    pos = (torch.cumsum(att, dim=1) - 1).clamp(min=0)
    if _keeps_logits(model):  # positions P - 1 .. P + T - 1; the last predicts nothing
        logits = model(input_ids=ids, attention_mask=att, position_ids=pos,
                       logits_to_keep=T + 1).logits[:, :-1]
    else:
        logits = model(input_ids=ids, attention_mask=att, position_ids=pos).logits[:, P - 1:-1]
    logits = logits.float() / temperature
    tok = torch.log_softmax(logits, dim=-1).gather(-1, response_ids[..., None])[..., 0]
    return (tok * response_mask.to(tok.dtype)).sum(dim=1)


def _keeps_logits(model) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (of a PEFT model: its base model's,
    as TRL 1.16 reads it)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is part of the torch extra
        PeftModel = ()
    base = model.get_base_model() if isinstance(model, PeftModel) else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


# --- the statistics -------------------------------------------------------------------------------

def _prepare(model, prompt_ids, response_ids, rewards, prompt_mask, response_mask, eos_token_id,
             sequence_weights):
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a transformers causal LM), got "
                        f"{type(model).__name__}")
    C.check_causal(model)
    x = _int_tensor("prompt_ids", prompt_ids, 2)
    y = _int_tensor("response_ids", response_ids, 3)
    m, n, T = y.shape
    if x.shape[0] != m:
        raise ValueError(f"prompt_ids has {x.shape[0]} rows but response_ids has {m} prompts "
                         f"(shape (m, n, T))")
    z = C.real_rewards("rewards", rewards)
    V.same_shape("rewards", z, (m, n), "response_ids' (n_prompts, n_samples)")
    if n < MIN_SAMPLES or m < MIN_PROMPTS:
        raise ValueError(f"need >= {MIN_PROMPTS} prompts and >= {MIN_SAMPLES} responses each "
                         f"(the advisor's U-statistics), got response_ids of shape {(m, n, T)}")
    xm = (torch.ones_like(x) if prompt_mask is None
          else _mask_tensor("prompt_mask", prompt_mask, tuple(x.shape)))
    if bool((xm.sum(dim=1) == 0).any()):
        raise ValueError("prompt_mask must keep at least one token of every prompt")
    C.check_left_padded(xm)
    if response_mask is None:
        ym = response_mask_from_eos(y, _eos_of(model, eos_token_id))
    else:
        if eos_token_id is not None:
            raise ValueError("give response_mask or eos_token_id, not both")
        ym = _mask_tensor("response_mask", response_mask, (m, n, T))
    if sequence_weights is None:
        w = np.ones((m, n))
    else:
        w = V.finite_array("sequence_weights", sequence_weights, ndim=2).astype(np.float64)
        V.same_shape("sequence_weights", w, (m, n), "rewards' (n_prompts, n_samples)")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    for name, t in (("prompt_ids", x), ("response_ids", y)):
        if bool((t < 0).any()) or (vocab is not None and bool((t >= vocab).any())):
            raise ValueError(f"{name} must hold token ids in [0, {vocab}), got range "
                             f"[{int(t.min())}, {int(t.max())}]")
    return x, xm, y, ym, z, w


def score_statistics(model, prompt_ids, response_ids, rewards, *, prompt_mask=None,
                     response_mask=None, eos_token_id=None, sequence_weights=None,
                     temperature: float = 1.0, chunk: int | None = None,
                     store_means: bool | None = None, progress=None) -> RolloutStatistics:
    """The inner products the advisor needs, from a PyTorch causal LM (module docstring).

    Args:
        model: a ``transformers`` causal LM; its trainable (``requires_grad``) parameters are
            the ``theta`` of the scores. Dropout is switched off for the computation
            (``model.eval()``; the previous mode is restored).
        prompt_ids: (m, P) left-padded prompts; prompt_mask: (m, P) 0/1 (default all ones).
        response_ids: (m, n, T) the n responses of each prompt; response_mask: (m, n, T) 0/1,
            else every token up to and including the first ``eos_token_id`` (default: the
            model's ``generation_config.eos_token_id``).
        rewards: (m, n) real rewards (enter only ``ghat_a``).
        sequence_weights: optional (m, n) weights ``w_ai`` of the scores (e.g. ``1/L_ai`` for
            a per-sequence length normalisation), default 1.
        temperature: > 0, the logits are divided by it.
        chunk: prompts per forward/backward pass (all m by default: one pass, the cost of one
            training step on the batch; fewer bound the activations held to chunk x n rows).
        store_means: with several chunks, keep the m per-prompt gradients (one pass; m x D
            floats) or take the dots in a second pass; default: keep when they take at most
            :data:`STORE_MEANS_BYTES`. Ignored with one chunk.
        progress: optional ``progress(done, total)`` callback over the passes.

    Returns:
        :class:`~grpo_theory.core.rollouts.RolloutStatistics` (the record
        :func:`grpo_theory.advisor.estimate_from_rollouts` reads, as the JAX route's): float64
        NumPy arrays ``rewards`` (m, n), ``sq_norms`` (m, n), ``mean_sq`` (m,), ``mean_dot``
        (m,), and ``n_params`` (D).
    """
    x, xm, y, ym, z, w = _prepare(model, prompt_ids, response_ids, rewards, prompt_mask,
                                  response_mask, eos_token_id, sequence_weights)
    temperature = V.real_scalar("temperature", temperature, positive=True)
    named = _trainable(model)
    check_trainable_layers(model)
    params = [p for _, p in named]
    C.check_device(params)
    D = sum(p.numel() for p in params)
    m, n, _ = y.shape
    k = m if chunk is None else min(V.positive_int("chunk", chunk), m)
    starts = list(range(0, m, k))
    if store_means is None:
        store_means = m * D * params[0].element_size() <= STORE_MEANS_BYTES
    store_means = V.boolean("store_means", store_means)
    one = len(starts) == 1
    dev = params[0].device
    x, xm, y, ym = (t.to(dev) for t in (x, xm, y, ym))
    coef = torch.as_tensor(z * w / n, device=dev).reshape(-1)
    wt = torch.as_tensor(w, device=dev).reshape(-1)
    q, mean_sq, mean_dot = np.zeros(m * n), np.zeros(m), np.zeros(m)
    sums, kept = None, []
    passes = len(starts) * (1 if one or store_means else 2)
    was_training = model.training
    rec = Recorder(model, dict(named))
    model.eval()
    no_autocast = torch.autocast(dev.type, enabled=False)
    no_autocast.__enter__()

    def forward(a0):
        a1 = min(a0 + k, m)
        rec.calls, rec.on = [], True
        logp = sequence_log_probs(model, x[a0:a1].repeat_interleave(n, 0),
                                  xm[a0:a1].repeat_interleave(n, 0), y[a0:a1].reshape(-1, y.shape[2]),
                                  ym[a0:a1].reshape(-1, y.shape[2]), temperature)
        rec.on = False
        owned = owned_ids(rec)
        uncovered = [(nm, p) for nm, p in named if id(p) not in owned]
        return a1, logp, coef[a0 * n:a1 * n].to(logp.dtype), uncovered

    try:
        for j, a0 in enumerate(starts):
            a1, logp, c, unc = forward(a0)
            st = batch_statistics(rec, logp, c, a1 - a0, n, named, unc, dots=one,
                                  keep=not one and store_means, sums=not one)
            rec.calls = []
            q[a0 * n:a1 * n] = (st.sq_norms * wt[a0 * n:a1 * n] ** 2).cpu().numpy()
            mean_sq[a0:a1] = st.mean_sq.cpu().numpy()
            if not one:
                sums = st.sums if sums is None else [t + u for t, u in zip(sums, st.sums)]
            if one:
                mean_dot[:] = st.mean_dot.cpu().numpy()
            elif store_means:
                kept.append((a0, a1, st.kept))
            if progress is not None:
                progress(j + 1, passes)
        for a0, a1, ks in kept:
            mean_dot[a0:a1] = sum((g.double() * S).flatten(1).sum(1) for g, S in zip(ks, sums)
                                  ).cpu().numpy()
        if not one and not store_means:
            for j, a0 in enumerate(starts):
                a1, logp, c, unc = forward(a0)
                mean_dot[a0:a1] = batch_dots(rec, logp, c, a1 - a0, n, named, sums,
                                             unc).cpu().numpy()
                rec.calls = []
                if progress is not None:
                    progress(len(starts) + j + 1, passes)
    finally:
        no_autocast.__exit__(None, None, None)
        rec.remove()
        model.train(was_training)
    return RolloutStatistics(z, q.reshape(m, n), mean_sq, mean_dot, n_params=int(D))


def estimate_from_torch_rollouts(model, prompt_ids, response_ids, rewards, *, prompt_mask=None,
                                response_mask=None, eos_token_id=None, sequence_weights=None,
                                temperature: float = 1.0, alpha: float = 0.05,
                                chunk: int | None = None, store_means: bool | None = None,
                                progress=None) -> ScalingEstimate:
    """The advisor's estimate (c1, c2, c3, G*, intervals, MSE predictions) for a PyTorch LM on
    rollouts already sampled (token ids and their rewards).

    Equal to ``grpo_theory.advisor.estimate_from_rollouts(rewards, scores=S)`` with ``S`` the
    (m, n, D) per-sample scores ``w_ai grad_theta log pi(y_ai|x_a)`` over the trainable
    parameters, computed at O(D) memory (:func:`score_statistics`).

    Args:
        model, prompt_ids, response_ids, rewards, prompt_mask, response_mask, eos_token_id,
            sequence_weights, temperature, chunk, store_means, progress: see
            :func:`score_statistics`
            (m >= 3 prompts, n >= 3 responses each).
        alpha: level of the ``*_ci`` attributes (0.05: 95%).

    Returns:
        :class:`grpo_theory.advisor.ScalingEstimate`.
    """
    st = score_statistics(model, prompt_ids, response_ids, rewards, prompt_mask=prompt_mask,
                          response_mask=response_mask, eos_token_id=eos_token_id,
                          sequence_weights=sequence_weights, temperature=temperature,
                          chunk=chunk, store_means=store_means, progress=progress)
    return estimate_from_rollouts(st, alpha=alpha)


class CompletionReward(Protocol):
    """The reward contract of the PyTorch layer: TRL's reward-function convention on text.

    ``reward(prompts, completions) -> rewards``: equal-length lists of prompt and decoded
    completion strings, one real reward per completion. Inside ``trl.GRPOTrainer``
    (:class:`~grpo_theory.torch.GroupSizeAdvisor`) the trainer's own ``reward_funcs`` score the
    completions and the callback reads their weighted sum.
    """

    def __call__(self, prompts, completions): ...


def estimate_from_torch_model(model, tokenizer, prompts, reward, n_samples: int = 8, *,
                              max_new_tokens: int = 64, temperature: float = 1.0,
                              chat_template: bool = True, seed: int = 0, alpha: float = 0.05,
                              generation_kwargs: dict | None = None,
                              progress=None, stage=None) -> ScalingEstimate:
    """Sample ``n_samples`` responses per prompt with the torch model's ``model.generate``, score
    them with ``reward`` and estimate (:func:`estimate_from_torch_rollouts`).

    Not :func:`grpo_theory.advisor.estimate_scaling_constants`, which samples a JAX policy.

    Args:
        model: a ``transformers`` causal LM.
        tokenizer: its tokenizer (a pad token, else its EOS, pads; prompts are left-padded).
        prompts: m >= 3 prompt strings (or chat message lists when ``chat_template``).
        reward: a :class:`CompletionReward`, ``reward(prompts, completions) -> rewards``,
            called with the m * n prompt and decoded completion strings (each prompt repeated
            n times, consecutively).
        n_samples: n >= 3 responses per prompt.
        max_new_tokens: response length limit (>= 1).
        temperature: sampling temperature, also used for the log-probabilities (> 0).
        chat_template: apply ``tokenizer.apply_chat_template`` (add_generation_prompt) to each
            prompt (a string becomes one user message).
        seed: ``torch.manual_seed`` before sampling, an integer in [0, 2**64 - 1].
        alpha: level of the intervals.
        generation_kwargs: extra ``model.generate`` arguments. Without them the responses
            are drawn from the policy itself (:data:`POLICY_SAMPLING`: no top-k, top-p, min-p or
            repetition penalty, whatever the checkpoint's ``generation_config`` or
            transformers' defaults say, top-k 50 among them); a ``top_k`` or ``top_p`` given
            here samples from another distribution, and the estimate is then for that sampler.
        progress: as in :func:`score_statistics`.
        stage: an optional ``stage(phase, done, total)`` callback for the sampling, phase
            ``"sampling"`` over the ``max_new_tokens`` generation steps
            (:class:`~grpo_theory.torch.sampling.GenerationSteps`); e.g.
            ``grpo_theory.advisor.progress.Progress(True, name="torch").stage``, a tqdm bar on a
            terminal and plain lines on stderr otherwise. None: silent.

    Returns:
        :class:`grpo_theory.advisor.ScalingEstimate`.
    """
    if isinstance(prompts, str) or not hasattr(prompts, "__len__"):
        raise ValueError("prompts must be a list of prompt strings (or message lists)")
    prompts = list(prompts)
    m = len(prompts)
    n = V.integer("n_samples", n_samples, MIN_SAMPLES)
    if m < MIN_PROMPTS:
        raise ValueError(f"prompts must hold >= {MIN_PROMPTS} prompts, got {m}")
    C.check_causal(model)
    C.check_device(list(model.parameters()))
    seed = C.seed(seed)
    if not callable(reward):
        raise ValueError(f"reward must be callable, got {type(reward).__name__}")
    max_new = V.positive_int("max_new_tokens", max_new_tokens)
    temperature = V.real_scalar("temperature", temperature, positive=True)
    if chat_template:
        texts = [tokenizer.apply_chat_template(
            [{"role": "user", "content": p}] if isinstance(p, str) else p, tokenize=False,
            add_generation_prompt=True) for p in prompts]
    else:
        texts = [str(p) for p in prompts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad is None:
        raise ValueError("tokenizer has neither a pad nor an EOS token")
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    eos = _eos_of(model, gen_eos if gen_eos is not None else tokenizer.eos_token_id)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    dev = next(model.parameters()).device
    ids, mask = enc["input_ids"].to(dev), enc["attention_mask"].to(dev)
    torch.manual_seed(seed)
    resp = sample_from_policy(model, ids, mask, n, temperature, max_new, pad, eos,
                              generation_kwargs, stage=stage)
    ym = response_mask_from_eos(resp, eos)
    completions = tokenizer.batch_decode(resp * ym + pad * (1 - ym), skip_special_tokens=True)
    r = C.real_rewards("the rewards returned by reward", reward(
        [p for p in prompts for _ in range(n)], completions), (m * n,))
    return estimate_from_torch_rollouts(model, ids, resp.reshape(m, n, -1), r.reshape(m, n),
                                        prompt_mask=mask, response_mask=ym.reshape(m, n, -1),
                                        temperature=temperature, alpha=alpha, progress=progress)


# --- the names of the previous release -----------------------------------------------------------


def _deprecated(old, new):
    """A function that warns (``DeprecationWarning`` naming ``new``) and calls ``new``."""
    def call(*args, **kwargs):
        warnings.warn(f"grpo_theory.torch.{old} is deprecated and will be removed in the next "
                      f"release; use grpo_theory.torch.{new.__name__}", DeprecationWarning,
                      stacklevel=2)
        return new(*args, **kwargs)

    call.__name__ = call.__qualname__ = old
    call.__doc__ = f"Deprecated name of :func:`{new.__name__}` (warns, then calls it)."
    call.__wrapped__ = new
    return call


estimate_from_model = _deprecated("estimate_from_model", estimate_from_torch_rollouts)
estimate_scaling_constants = _deprecated("estimate_scaling_constants", estimate_from_torch_model)

