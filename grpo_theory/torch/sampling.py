"""Sampling responses from the policy itself with ``transformers``' ``model.generate``."""

from __future__ import annotations

import torch


#: ``model.generate`` settings that sample from the policy ``softmax(logits / temperature)``
#: itself: transformers applies ``top_k = 50`` when neither the user nor the checkpoint's
#: ``generation_config`` sets it (``GenerationConfig._get_default_generation_params``,
#: transformers 5.12), and a checkpoint may set top-p, min-p or a repetition penalty
POLICY_SAMPLING = dict(do_sample=True, top_k=0, top_p=1.0, min_p=None, typical_p=1.0,
                       epsilon_cutoff=0.0, eta_cutoff=0.0, repetition_penalty=1.0,
                       no_repeat_ngram_size=0)


def sample_from_policy(model, ids, mask, n: int, temperature: float, max_new_tokens: int, pad,
                       eos, generation_kwargs=None):
    """``n`` responses (rows ``a n .. a n + n - 1`` for prompt a) drawn by ``model.generate``
    from the policy itself (:data:`POLICY_SAMPLING`, then ``generation_kwargs`` on top).

    Returns:
        The (m n, R) response ids (after the prompts' columns).
    """
    kwargs = dict(POLICY_SAMPLING, **(generation_kwargs or {}))
    with torch.no_grad():
        out = model.generate(input_ids=ids.repeat_interleave(n, 0),
                             attention_mask=mask.repeat_interleave(n, 0),
                             temperature=temperature, max_new_tokens=max_new_tokens,
                             pad_token_id=pad, eos_token_id=list(eos), **kwargs)
    resp = out[:, ids.shape[1]:]
    if resp.shape[1] == 0:
        raise ValueError("model.generate returned no new tokens")
    return resp
