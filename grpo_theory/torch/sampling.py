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


class GenerationSteps:
    """A ``model.generate`` logits processor that leaves the scores as they are and reports the
    generation steps as ``stage("sampling", done, total)`` (``done`` tokens of ``total`` =
    ``max_new_tokens`` generated; about ten reports, then ``(total, total)`` from the caller when
    ``generate`` returns, also after an early stop at EOS).

    Args:
        stage: the ``stage(phase, done, total)`` callback
            (:class:`grpo_theory.advisor.progress.Progress` ``.stage`` draws it).
        prompt_len: the prompts' columns (``input_ids`` has them before the new tokens).
        total: ``max_new_tokens``.
    """

    def __init__(self, stage, prompt_len: int, total: int):
        self.stage, self.prompt_len, self.total = stage, prompt_len, total
        self.every = max(1, total // 10)

    def __call__(self, input_ids, scores):
        done = int(input_ids.shape[1]) - self.prompt_len
        if done % self.every == 0:
            self.stage("sampling", done, self.total)
        return scores


def sample_from_policy(model, ids, mask, n: int, temperature: float, max_new_tokens: int, pad,
                       eos, generation_kwargs=None, stage=None):
    """``n`` responses (rows ``a n .. a n + n - 1`` for prompt a) drawn by ``model.generate``
    from the policy itself (:data:`POLICY_SAMPLING`, then ``generation_kwargs`` on top).

    ``stage``: an optional ``stage(phase, done, total)`` callback that receives the phase
    ``"sampling"`` over the ``max_new_tokens`` generation steps (:class:`GenerationSteps`; the
    samples do not depend on it).

    Returns:
        The (m n, R) response ids (after the prompts' columns).
    """
    kwargs = dict(POLICY_SAMPLING, **(generation_kwargs or {}))
    if stage is not None:
        from transformers import LogitsProcessorList

        steps = GenerationSteps(stage, ids.shape[1], max_new_tokens)
        kwargs["logits_processor"] = LogitsProcessorList(
            [*(kwargs.get("logits_processor") or []), steps])
    with torch.no_grad():
        out = model.generate(input_ids=ids.repeat_interleave(n, 0),
                             attention_mask=mask.repeat_interleave(n, 0),
                             temperature=temperature, max_new_tokens=max_new_tokens,
                             pad_token_id=pad, eos_token_id=list(eos), **kwargs)
    if stage is not None:
        stage("sampling", max_new_tokens, max_new_tokens)
    resp = out[:, ids.shape[1]:]
    if resp.shape[1] == 0:
        raise ValueError("model.generate returned no new tokens")
    return resp
