r"""Dense prompt packing (DPPO, arXiv 2603.04135): variable-length sequences into fixed-size rows.

**Window-greedy packer** (:func:`pack`). Sequences arrive in order; the packer sees a window of
the next ``w`` unplaced sequences. It opens a row of ``capacity`` tokens and repeatedly moves the
*best-fitting* window sequence into it (the longest one that still fits, earliest on ties),
refilling the window from the stream after each placement; when no window sequence fits, the row
is closed and a new one opened. ``w = 1`` is next-fit in arrival order; ``w >= N`` sees every
sequence. Every row's first placement always fits (each sequence is at most ``capacity``), so the
packer terminates with ``n_rows <= N``; its cost is O(N w).

Each row carries **segment ids** (1, 2, ... per sequence within the row, 0 on padding) and
**positions** (0 .. L-1 within each sequence), so attention can be masked to
``seg_q == seg_k and pos_k <= pos_q`` and the loss to real tokens: the packed computation then
touches exactly the same terms as one-sequence-per-row (naive) batching, and packed and unpacked
losses and gradients agree (:func:`segment_causal_attention`, :func:`toy_lm_loss`).

Valid-token density = real tokens / (rows x capacity); naive batching (one sequence per row of
the same capacity) has density ``mean(L) / capacity``, a lower bound for every packing.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from .._precision import float64


@dataclass(frozen=True)
class Packing:
    """Placement of N sequences into rows: ``row[i]``, ``offset[i]`` and ``lengths[i]``."""

    capacity: int
    lengths: np.ndarray  # (N,)
    row: np.ndarray  # (N,)
    offset: np.ndarray  # (N,)
    n_rows: int

    @property
    @float64
    def n_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    @float64
    def density(self) -> float:
        """Valid-token density: real tokens / (rows x capacity)."""
        return self.n_tokens / (self.n_rows * self.capacity)

    @float64
    def row_fill(self) -> np.ndarray:
        """Tokens used in each row, shape (n_rows,)."""
        return np.bincount(self.row, weights=self.lengths, minlength=self.n_rows).astype(int)

    @float64
    def _token_index(self):
        """(sequence id, row, column, position) of every real token."""
        seq = np.repeat(np.arange(self.lengths.size), self.lengths)
        starts = np.cumsum(self.lengths) - self.lengths
        pos = np.arange(seq.size) - np.repeat(starts, self.lengths)
        return seq, self.row[seq], self.offset[seq] + pos, pos

    @float64
    def segment_ids(self) -> np.ndarray:
        """(n_rows, capacity) ints: 1 + rank of the sequence within its row, 0 on padding."""
        order = np.lexsort((self.offset, self.row))
        rank = np.empty(self.lengths.size, dtype=np.int64)
        first = np.r_[True, self.row[order][1:] != self.row[order][:-1]]
        idx = np.arange(order.size)
        start = np.maximum.accumulate(np.where(first, idx, 0))
        rank[order] = idx - start
        seg = np.zeros((self.n_rows, self.capacity), dtype=np.int64)
        s, r, c, _ = self._token_index()
        seg[r, c] = rank[s] + 1
        return seg

    @float64
    def positions(self) -> np.ndarray:
        """(n_rows, capacity) ints: position of each token within its own sequence (0 on pad)."""
        out = np.zeros((self.n_rows, self.capacity), dtype=np.int64)
        _, r, c, p = self._token_index()
        out[r, c] = p
        return out


def _check_lengths(lengths, capacity):
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be an integer >= 1, got {capacity!r}")
    arr = np.asarray(lengths)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError("lengths must be a non-empty 1-d sequence of sequence lengths")
    if not np.issubdtype(arr.dtype, np.integer):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError("lengths must be integers")
    arr = arr.astype(np.int64)
    if np.any(arr < 1):
        raise ValueError(f"lengths must be >= 1, got min {arr.min()}")
    if np.any(arr > capacity):
        i = int(np.argmax(arr > capacity))
        raise ValueError(
            f"sequence {i} has length {arr[i]} > capacity={capacity}: a row cannot hold it "
            "(raise capacity or truncate the sequence)")
    return arr


@float64
def pack(lengths, capacity: int, window: int) -> Packing:
    """Window-greedy packing of ``lengths`` (N,) into rows of ``capacity`` (module docstring).

    Args:
        lengths: (N,) sequence lengths, integers in [1, capacity].
        capacity: tokens per row.
        window: how many waiting sequences the greedy step may choose from (>= 1).

    Returns:
        :class:`Packing` (``row``, ``offset`` of each sequence and ``n_rows``).

    Examples:
        >>> from grpo_theory.companions import pack
        >>> p = pack([5, 3, 4, 2, 6], capacity=8, window=3)
        >>> p.n_rows, p.row.tolist(), p.offset.tolist()
        (3, [0, 0, 2, 1, 1], [0, 5, 0, 6, 0])
    """
    L = _check_lengths(lengths, capacity)
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    n = L.size
    row = np.full(n, -1, dtype=np.int64)
    offset = np.zeros(n, dtype=np.int64)
    win = list(range(min(window, n)))  # indices in the window, arrival order
    nxt = len(win)
    r = -1
    while win:
        r += 1
        free = capacity
        while win:
            wl = L[win]
            fits = wl <= free
            if not fits.any():
                break
            j = int(np.argmax(np.where(fits, wl, 0)))  # longest that fits; earliest on ties
            i = win.pop(j)
            row[i], offset[i] = r, capacity - free
            free -= L[i]
            if nxt < n:
                win.append(nxt)
                nxt += 1
    return Packing(capacity, L, row, offset, r + 1)


@float64
def naive_batching(lengths, capacity: int) -> Packing:
    """One sequence per row, padded to ``capacity`` (the unpacked reference layout)."""
    L = _check_lengths(lengths, capacity)
    return Packing(capacity, L, np.arange(L.size), np.zeros(L.size, dtype=np.int64), L.size)


@float64
def naive_density(lengths, capacity: int) -> float:
    L = _check_lengths(lengths, capacity)
    return float(L.mean() / capacity)


@float64
def row_lower_bound(lengths, capacity: int) -> int:
    """No packing uses fewer than ceil(sum L / capacity) rows."""
    L = _check_lengths(lengths, capacity)
    return int(-(-L.sum() // capacity))


@float64
def pack_tokens(sequences, packing: Packing, pad_id: int = 0) -> np.ndarray:
    """Lay out token sequences (list of 1-d int arrays) in the packing's rows, (n_rows, cap)."""
    lens = np.array([len(s) for s in sequences])
    if lens.shape != packing.lengths.shape or np.any(lens != packing.lengths):
        raise ValueError("sequences must have the lengths the packing was built from")
    out = np.full((packing.n_rows, packing.capacity), pad_id, dtype=np.int64)
    _, r, c, _ = packing._token_index()
    out[r, c] = np.concatenate([np.asarray(s, dtype=np.int64) for s in sequences])
    return out


@float64
def unpack_tokens(rows, packing: Packing) -> list[np.ndarray]:
    """Inverse of :func:`pack_tokens`: the N sequences, in their original order."""
    rows = np.asarray(rows)
    return [rows[packing.row[i], packing.offset[i]: packing.offset[i] + packing.lengths[i]]
            for i in range(packing.lengths.size)]


@float64
def per_sequence_to_tokens(values, packing: Packing) -> np.ndarray:
    """Broadcast one value per sequence (N,) to its tokens, (n_rows, capacity); 0 on padding."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros((packing.n_rows, packing.capacity))
    s, r, c, _ = packing._token_index()
    out[r, c] = values[s]
    return out


@float64
def next_token_targets(tokens, segment_ids):
    """Targets ``tokens[:, t+1]`` and a mask that is 1 only where t+1 is in the same sequence."""
    tokens, seg = jnp.asarray(tokens), jnp.asarray(segment_ids)
    tgt = jnp.concatenate([tokens[:, 1:], jnp.zeros_like(tokens[:, :1])], axis=1)
    nseg = jnp.concatenate([seg[:, 1:], jnp.zeros_like(seg[:, :1])], axis=1)
    return tgt, ((seg > 0) & (nseg == seg)).astype(jnp.float64)


@float64
def segment_causal_attention(q, k, v, segment_ids, positions):
    """Single-head attention where a token sees only earlier tokens of its own sequence.

    Mask ``seg_q == seg_k and pos_k <= pos_q``; padding (segment 0, position 0) attends only to
    padding, so every row of the softmax is finite and real tokens never see padding.
    """
    seg, pos = jnp.asarray(segment_ids), jnp.asarray(positions)
    mask = (seg[:, :, None] == seg[:, None, :]) & (pos[:, None, :] <= pos[:, :, None])
    logits = jnp.einsum("rqd,rkd->rqk", q, k) / jnp.sqrt(q.shape[-1])
    logits = jnp.where(mask, logits, -jnp.inf)
    return jnp.einsum("rqk,rkd->rqd", jax.nn.softmax(logits, axis=-1), v)


@float64
def init_toy_lm(key, vocab_size: int, max_len: int, dim: int = 8) -> dict:
    """Parameters of a one-layer, one-head causal transformer (float64)."""
    ks = jax.random.split(key, 6)
    init = lambda k, shape: 0.3 * jax.random.normal(k, shape, dtype=jnp.float64)  # noqa: E731
    return dict(emb=init(ks[0], (vocab_size, dim)), pos=init(ks[1], (max_len, dim)),
                wq=init(ks[2], (dim, dim)), wk=init(ks[3], (dim, dim)),
                wv=init(ks[4], (dim, dim)), out=init(ks[5], (dim, vocab_size)))


@float64
def toy_lm_loss(params, tokens, segment_ids, positions, token_weights):
    r"""Policy-gradient style loss ``-sum_t w_t log p(y_{t+1} | y_{<=t})`` over real next tokens.

    ``token_weights`` (rows, capacity) carries e.g. ``A_i / L_i`` on the tokens of sequence i
    (GRPO's sequence-mean aggregation). Layout-independent: naive and packed rows give the same
    value and gradient (up to float rounding).
    """
    h = params["emb"][tokens] + params["pos"][positions]
    a = segment_causal_attention(h @ params["wq"], h @ params["wk"], h @ params["wv"],
                                 segment_ids, positions)
    logp = jax.nn.log_softmax((h + a) @ params["out"], axis=-1)
    tgt, valid = next_token_targets(tokens, segment_ids)
    lp = jnp.take_along_axis(logp, tgt[..., None], axis=-1)[..., 0]
    return -jnp.sum(token_weights * valid * lp)


#: ``jit(value_and_grad(toy_lm_loss))``, shared so that callers reuse one compilation per shape.
toy_lm_value_and_grad = jax.jit(jax.value_and_grad(toy_lm_loss))
