r"""Supervised warm-ups giving the three policies of the paper's Figure 4: base < instruct < ICL.

The corpus is the task's training stream with answers *corrupted* with a difficulty-dependent
probability (a wrong integer near the right one; in the trace format only the final integer is
corrupted). A model trained to convergence on such a corpus imitates it, so its accuracy is set
by the corpus rather than by stopping training mid-way (NOTES: such a policy behaves like a real
one under RL, unlike a half-trained model).

* ``base``: trained from scratch on zero-shot prompts with corruption ``CORRUPTION["base"]``;
* ``instruct``: continued from base with lower corruption, on zero-shot and in-context prompts;
  in-context prompts (two solved examples of the same category) carry the lowest corruption;
* ``icl``: the instruct parameters tuned further on in-context prompts only (``icl_steps``,
  corruption ``CORRUPTION["icl"]``) and prompted with solved examples. Without that stage the
  2-layer model does not turn the shots into accuracy (instruct weights with shots score below
  their zero-shot accuracy in the full setting), so base < instruct < in-context would fail;
  the instruct weights prompted with shots are reported as ``instruct+shots`` for comparison.

Both response formats (``answer`` and ``trace``) are trained into the same model (the prompt's
last character selects the format). Checkpoints are ``.npz`` files of the flattened parameters
with the configuration, saved under a cache folder and reused.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from .._cache import artefact_key, cache_dir as _cache_dir
from .._validation import seed_key
from .model import ModelConfig, init_params, make_apply, make_sampler
from .policy import LMPolicy
from .task import (ICL_PROMPT_LEN, RESPONSE_LEN, TaskConfig, encode_prompts, response_mask, reward,
                   target_responses, train_pool)


POLICIES = ("base", "instruct", "icl")
#: (easy, hard) answer-corruption probabilities of each corpus
CORRUPTION = {"base": (0.45, 0.85), "instruct": (0.2, 0.6), "icl": (0.05, 0.35)}


@dataclass(frozen=True)
class WarmupConfig:
    """The supervised warm-ups of the small transformer: its shape, the steps of the base,
    instruct and in-context stages, batch size, learning rate, seed and task."""

    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    base_steps: int = 1500
    instruct_steps: int = 1500
    icl_steps: int = 1000  # in-context stage (own checkpoint file, see ``icl_file``)
    batch_size: int = 128
    lr: float = 3e-3
    chunk: int = 50  # steps per lax.scan chunk (one prompt layout per chunk)
    seed: int = 0
    task: TaskConfig = TaskConfig()

    @property
    def model(self) -> ModelConfig:
        return ModelConfig(d_model=self.d_model, n_layers=self.n_layers, n_heads=self.n_heads)

    def tag(self) -> str:
        t = self.task
        return (f"d{self.d_model}L{self.n_layers}h{self.n_heads}_b{self.base_steps}"
                f"_i{self.instruct_steps}_bs{self.batch_size}_lr{self.lr:g}_s{self.seed}"
                f"_hard{t.hard_fraction:g}_cat{''.join(f'{c:g}' for c in t.category_probs)}"
                f"_p{ICL_PROMPT_LEN}")

    @property
    def icl_file(self) -> str:
        """File of the in-context stage inside the ``tag()`` folder (base/instruct reused)."""
        return f"icl_i{self.icl_steps}.npz"


QUICK_WARMUP = WarmupConfig(d_model=32, n_layers=1, n_heads=2, base_steps=150, instruct_steps=150,
                            icl_steps=200, batch_size=64, chunk=25, lr=1e-2,
                            task=TaskConfig(hard_fraction=0.0,
                                            category_probs=(0, 0, 0.5, 0.5, 0)))
"""The tiny warm-up of the quick settings (``lm-mse``, ``lm-rank``, ``advise --warmup quick``): a
1-layer, 32-wide model on the two one-operation categories with single-digit operands, which
learns something within seconds (its rewards are not all zero)."""


def corrupt_answers(answers, hard, rates, rng) -> np.ndarray:
    """Replace each answer by a nearby wrong integer with probability ``rates[hard]``."""
    answers = np.asarray(answers, np.int64)
    p = np.where(hard, rates[1], rates[0])
    flip = rng.random(answers.shape) < p
    delta = rng.choice(np.array([-10, -2, -1, 1, 2, 10]), size=answers.shape)
    delta = np.where(rng.random(answers.shape) < 0.3,
                     rng.integers(1, 30, size=answers.shape) * rng.choice([-1, 1], answers.shape),
                     delta)
    return np.where(flip, answers + delta, answers)


def _batches(pool, rng, n_steps, batch, fmt, icl, rates):
    idx = rng.integers(0, len(pool), size=(n_steps, batch))
    q = pool.subset(idx.reshape(-1))
    ans = corrupt_answers(q.answer, q.hard, rates, rng)
    x = encode_prompts(q, fmt, icl).reshape(n_steps, batch, -1)
    y = target_responses(q, fmt, ans, seed=int(rng.integers(2**31))).reshape(n_steps, batch, -1)
    return x, y


def _loss(apply_fn, params, x, y):
    p = x.shape[1]
    tokens = jnp.concatenate([x, y], axis=1)
    logits = apply_fn(params, tokens, p)[:, p - 1: -1]
    lp = jax.nn.log_softmax(logits, axis=-1)
    tok = jnp.take_along_axis(lp, y[..., None], axis=-1)[..., 0]
    m = response_mask(y)
    return -jnp.sum(tok * m) / jnp.sum(m)


@partial(jax.jit, static_argnames=("apply_fn", "opt"))
def _train_chunk(apply_fn, opt, params, opt_state, xs, ys):
    def step(carry, batch):
        params, opt_state = carry
        loss, grads = jax.value_and_grad(lambda pp: _loss(apply_fn, pp, *batch))(params)
        upd, opt_state = opt.update(grads, opt_state, params)
        return (optax.apply_updates(params, upd), opt_state), loss

    (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (xs, ys))
    return params, opt_state, losses


def train_supervised(params, apply_fn, pool, layouts, n_steps, batch, lr, seed, chunk=50,
                     log=None):
    """Adam on the cross-entropy of corpus responses; ``layouts`` = [(fmt, icl, rates), ...]
    cycled chunk by chunk. Returns the trained parameters and the mean loss per chunk."""
    opt = optax.chain(optax.clip_by_global_norm(1.0),
                      optax.adam(optax.cosine_decay_schedule(lr, max(n_steps, 1), 0.1)))
    opt_state = opt.init(params)
    rng = np.random.default_rng(seed)
    losses, done, t0 = [], 0, time.time()
    i = 0
    while done < n_steps:
        k = min(chunk, n_steps - done)
        fmt, icl, rates = layouts[i % len(layouts)]
        xs, ys = _batches(pool, rng, k, batch, fmt, icl, rates)
        params, opt_state, ls = _train_chunk(apply_fn, opt, params, opt_state,
                                             jnp.asarray(xs), jnp.asarray(ys))
        losses.append(float(np.mean(ls)))
        done += k
        i += 1
        if log is not None:
            el = time.time() - t0
            log(f"step {done}/{n_steps} loss {losses[-1]:.3f} "
                f"({done * batch * (xs.shape[2] + ys.shape[2]) / el:.0f} tok/s)")
    return params, losses


def save_checkpoint(path, params, meta: dict) -> None:
    """Write ``params`` (flattened) and ``meta`` to ``path`` atomically: through a temporary file
    of its own (two processes saving the same checkpoint never write into one file)."""
    flat, _ = ravel_pytree(params)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp.npz")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, flat=np.asarray(flat), meta=json.dumps(meta, default=str))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_checkpoint(path, cfg: ModelConfig):
    with np.load(path) as f:
        flat = f["flat"]
        meta = json.loads(str(f["meta"]))
    template = init_params(jax.random.PRNGKey(0), cfg)
    _, unravel = ravel_pytree(template)
    return unravel(jnp.asarray(flat, jnp.float32)), meta


def accuracy(policy: LMPolicy, questions, fmt: str, icl: bool, key, n_samples: int = 4) -> float:
    """Mean reward of sampled responses (``n_samples`` per question) on ``questions``."""
    x = np.repeat(encode_prompts(questions, fmt, icl), n_samples, axis=0)
    y = policy.sample(key, x, RESPONSE_LEN[fmt])
    canon = np.repeat(target_responses(questions, fmt), n_samples, axis=0) if fmt == "answer" else None
    return float(np.mean(reward(fmt, y, np.repeat(questions.answer, n_samples), canon)))


def three_policies(cache_dir, wcfg: WarmupConfig = WarmupConfig(), log=print):
    """Train (or load from ``cache_dir``) the base, instruct and in-context models.

    The checkpoints live in ``cache_dir/<artefact_key(wcfg.tag())>``
    (:func:`grpo_theory._cache.artefact_key`): one entry per precision in effect.

    Returns ``{"base": (LMPolicy, icl=False), "instruct": (..., False), "icl": (..., True),
    "instruct+shots": (instruct policy, True)}`` and the checkpoint metadata.
    """
    cfg = wcfg.model
    apply_fn, sample_fn = make_apply(cfg), make_sampler(cfg)
    cache = Path(cache_dir) / artefact_key(wcfg.tag())  # one entry per precision
    pool = train_pool(wcfg.task)

    def stage(name, file, start, layouts, steps, lr, seed):
        """Load the stage's checkpoint, or train it from ``start`` and save it."""
        path = cache / file
        if path.exists():
            return load_checkpoint(path, cfg)
        t0 = time.time()
        params, losses = train_supervised(start, apply_fn, pool, layouts, steps, wcfg.batch_size,
                                          lr, seed, wcfg.chunk,
                                          log=lambda s: log(f"[warmup {name}] {s}"))
        meta = dict(config=asdict(wcfg), stage=name, seconds=time.time() - t0,
                    final_loss=losses[-1])
        save_checkpoint(path, params, meta)
        return params, meta

    zero = lambda stage_name: [(f, False, CORRUPTION[stage_name]) for f in ("answer", "trace")]
    shots = [(f, True, CORRUPTION["icl"]) for f in ("answer", "trace")]
    base, meta_b = stage("base", "base.npz", init_params(seed_key(wcfg.seed), cfg),
                         zero("base"), wcfg.base_steps, wcfg.lr, wcfg.seed)
    inst, meta_i = stage("instruct", "instruct.npz", base, zero("instruct") + shots,
                         wcfg.instruct_steps, wcfg.lr * 0.5, wcfg.seed + 1)
    iclp, meta_c = stage("icl", wcfg.icl_file, inst, shots, wcfg.icl_steps, wcfg.lr * 0.5,
                         wcfg.seed + 2)
    out = {name: (LMPolicy(params, apply_fn, sample_fn), icl)
           for name, params, icl in (("base", base, False), ("instruct", inst, False),
                                     ("icl", iclp, True), ("instruct+shots", inst, True))}
    return out, dict(base=meta_b, instruct=meta_i, icl=meta_c, cache=str(cache))


_MEMO: dict = {}
_MEMO_LOCK = threading.Lock()
_MEMO_SIZE = 4


def checkpoint_files(cache_dir, wcfg: WarmupConfig = WarmupConfig()) -> list:
    """The base, instruct and in-context checkpoint files of ``wcfg`` under ``cache_dir`` at
    the precision in effect (:func:`grpo_theory._cache.artefact_key`); all present = cached."""
    folder = Path(cache_dir).resolve() / artefact_key(wcfg.tag())
    return [folder / f for f in ("base.npz", "instruct.npz", wcfg.icl_file)]


def cached_policies(cache_dir, wcfg: WarmupConfig = WarmupConfig(), log=print):
    """:func:`three_policies`, loaded once per process for each (cache folder, configuration).

    The checkpoints are read (or trained and saved) on the first call; later calls return the
    same policies while the checkpoint files are still on disk (a deleted file is trained
    again). Locks make concurrent threads of one process, and processes sharing the folder
    (a file lock), train a configuration only once.
    """
    import fcntl

    folder = Path(cache_dir).resolve()
    memo_key = (str(folder), wcfg, artefact_key(wcfg.tag()))
    files = checkpoint_files(folder, wcfg)
    with _MEMO_LOCK:
        hit = _MEMO.get(memo_key)
        if hit is None or not all(f.exists() for f in files):
            files[0].parent.mkdir(parents=True, exist_ok=True)
            with open(files[0].parent / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
                hit = three_policies(folder, wcfg, log)
            _MEMO.pop(memo_key, None)
            while len(_MEMO) >= _MEMO_SIZE:
                _MEMO.pop(next(iter(_MEMO)))
            _MEMO[memo_key] = hit
        return hit


def study_policies(wcfg: WarmupConfig = WarmupConfig()) -> dict:
    """The warm-up policies of ``wcfg`` that the LM studies share: :func:`cached_policies` in
    ``cache_dir()/lm`` (:func:`grpo_theory._cache.cache_dir`; trained there on first use, then
    loaded once per process), silently. ``{name: (LMPolicy, uses solved-example prompt)}``."""
    return cached_policies(_cache_dir() / "lm", wcfg, log=lambda m: None)[0]
