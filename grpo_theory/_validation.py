"""Input checks shared by the library.

Every failure is a ``ValueError`` (or ``TypeError`` for a wrong kind of object) that names the
argument and says what is allowed. Integers may be Python, NumPy or 0-d JAX integers; booleans,
floats, complex numbers and strings are refused where an integer or a real array is expected.
"""

from __future__ import annotations

import functools
import numbers
import warnings

import numpy as np


GiB = 2**30
#: default memory a single route may allocate before it refuses with a ValueError
MEMORY_LIMIT = 4 * GiB
#: tolerance within which a value just outside [0, 1] (rounding) is accepted and clipped
UNIT_TOL = 1e-9


def integer(name: str, value, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int: Python/NumPy ints and 0-d integer arrays (JAX included).

    Raises ``ValueError`` for bools, floats (also integral ones such as ``8.0``), strings or
    arrays of another shape, and for values outside ``[minimum, maximum]``.
    """
    ok = False
    if isinstance(value, (bool, np.bool_)):
        ok = False
    elif isinstance(value, numbers.Integral):
        ok = True
    elif hasattr(value, "dtype") and hasattr(value, "shape") and np.shape(value) == ():
        ok = np.issubdtype(np.dtype(value.dtype), np.integer)
    if not ok:
        rng = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{name} must be an integer{rng}, got {value!r} "
                         f"({type(value).__name__})")
    out = int(value)
    if minimum is not None and out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {out}")
    if maximum is not None and out > maximum:
        raise ValueError(f"{name} must be an integer <= {maximum}, got {out}")
    return out


def positive_int(name: str, value, minimum: int = 1) -> int:
    """An integer ``>= minimum`` (see :func:`integer`)."""
    return integer(name, value, minimum)


def seed_key(seed=0, key=None):
    """A JAX PRNG key from ``key`` if given, else from any Python/NumPy integer ``seed``.

    Seeds in ``[0, 2**32)`` give ``jax.random.PRNGKey(seed)`` (so results match earlier
    versions); other integers, negative or up to any size, are reduced the same way everywhere:
    the low 32 bits make the key and each further 32-bit word is folded in.
    """
    import jax

    if key is not None:
        return key
    s = integer("seed", seed)
    u = s % (2**64) if -(2**63) <= s < 2**64 else s
    if u < 0:
        u = -u  # beyond 64 bits: any fixed reduction is fine, keep it deterministic
    k = jax.random.PRNGKey(u & 0xFFFFFFFF)
    u >>= 32
    while u:
        k = jax.random.fold_in(k, u & 0xFFFFFFFF)
        u >>= 32
    return k


def real_array(name: str, value, ndim: int | None = None, allow_empty: bool = False) -> np.ndarray:
    """``value`` as a float64 array; refuses strings, complex, objects, NaN/inf, wrong rank, empty.

    Args:
        name: the argument's name, for the error message.
        value: array-like of real numbers (bools and integers are converted).
        ndim: required rank, or ``None``.
        allow_empty: accept arrays with a zero-length axis.
    """
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be an array of real numbers, got a string")
    try:
        raw = np.asarray(value)
    except Exception as exc:  # ragged nested lists etc.
        raise ValueError(f"{name} must be an array of real numbers ({exc})") from None
    if raw.dtype.kind == "c":
        raise ValueError(f"{name} must be real, got complex values (dtype {raw.dtype})")
    if raw.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be an array of real numbers, got dtype {raw.dtype}")
    arr = raw.astype(np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")
    if not allow_empty and arr.size == 0 and arr.ndim > 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def finite_array(name: str, value, ndim: int | None = None) -> np.ndarray:
    """A non-empty finite real float64 array (see :func:`real_array`)."""
    return real_array(name, value, ndim=ndim)


def unit_interval(name: str, arr: np.ndarray, tol: float = UNIT_TOL) -> np.ndarray:
    """Entries in [0, 1]; values within ``tol`` outside (rounding) are clipped onto the interval."""
    lo, hi = float(np.min(arr)), float(np.max(arr))
    if lo < -tol or hi > 1.0 + tol:
        raise ValueError(f"{name} must lie in [0, 1], got values in [{lo!r}, {hi!r}]")
    return np.clip(arr, 0.0, 1.0)


def probability_vector(name: str, value, size: int | None = None, atol: float = 1e-9) -> np.ndarray:
    """A 1-d array of non-negative entries that sum to one."""
    arr = finite_array(name, value, ndim=1)
    if size is not None and arr.shape[0] != size:
        raise ValueError(f"{name} must have length {size}, got {arr.shape[0]}")
    if np.any(arr < 0.0):
        raise ValueError(f"{name} must be non-negative")
    if abs(arr.sum() - 1.0) > atol:
        raise ValueError(f"{name} must sum to 1 (got {arr.sum():.12g})")
    return arr


def same_shape(name: str, arr: np.ndarray, shape: tuple[int, ...], other: str) -> None:
    if arr.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} to match {other}, got {arr.shape}")


def check_memory(route: str, n_bytes: float, alternative: str, limit: float | None = None) -> None:
    """Refuse a route whose estimated allocation exceeds ``limit`` (default 4 GiB).

    Args:
        route: what would allocate (named in the message).
        n_bytes: the estimated size in bytes.
        alternative: the route, chunk size or method that fits, for the message.
        limit: bytes allowed (default :data:`MEMORY_LIMIT`).
    """
    limit = MEMORY_LIMIT if limit is None else limit
    if n_bytes > limit:
        raise ValueError(f"{route} needs about {n_bytes / GiB:.3g} GiB (> {limit / GiB:.3g} GiB "
                         f"allowed); {alternative}")


def group_run(est, group_size, batch_size) -> tuple[int, int]:
    """Check G and B for an estimator: integers, B >= 1, G >= the estimator's minimum.

    Returns ``(group_size, batch_size)`` as Python ints.
    """
    B = integer("batch_size", batch_size, 1)
    G = integer("group_size", group_size, 1)
    if G < est.min_group_size:
        raise ValueError(
            f"group_size must be >= {est.min_group_size} for estimator {est.name!r} "
            f"(a leave-one-out or group baseline needs G >= 2), got {G}"
        )
    return G, B


def is_concrete(value) -> bool:
    """True unless ``value`` is a JAX tracer (inside ``jit``/``vmap``/``grad``): values can be read."""
    import jax

    return not isinstance(value, jax.core.Tracer)


def key_or_seed(value, name: str = "key"):
    """A JAX PRNG key from a key (returned as is) or from an integer seed (via :func:`seed_key`).

    Accepts new-style typed keys, raw ``uint32`` key data (1-d) and any Python/NumPy/0-d
    JAX integer; anything else is a ``ValueError`` naming ``name``.
    """
    import jax
    import jax.numpy as jnp

    dtype = getattr(value, "dtype", None)
    if dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key):
        return value
    if dtype is not None and np.ndim(value) == 1 and np.dtype(dtype) == np.uint32:
        return value  # raw key data of any implementation (threefry (2,), rbg (4,))
    try:
        return seed_key(value)
    except ValueError:
        raise ValueError(f"{name} must be a JAX PRNG key or an integer seed, got {value!r} "
                         f"({type(value).__name__})") from None


def random_key(seed=0, key=None):
    """The PRNG key of a public function that takes ``seed`` and ``key`` (the package's rule).

    ``key`` (a JAX key, or an integer converted by :func:`key_or_seed`) wins when given; else the
    integer ``seed`` gives :func:`seed_key` ``(seed)``, exactly as before ``key`` was added.
    """
    if key is not None:
        return key_or_seed(key, "key")
    return seed_key(seed)


def renamed_arguments(**old_to_new: str):
    """Decorator: keyword arguments renamed in this release keep working, with a warning.

    ``@renamed_arguments(G="group_size")`` maps a call's ``G=`` to ``group_size=`` and emits a
    ``DeprecationWarning`` naming the new argument; passing both names is a ``TypeError``. The
    wrapped function's signature (``inspect.signature``) is the new one; the map is kept in
    ``fn.__renamed_arguments__`` (old -> new).

    Args:
        **old_to_new: old keyword name -> new keyword name.

    Returns:
        The decorator.
    """
    for old, new in old_to_new.items():
        if not isinstance(new, str) or not new.isidentifier() or new == old:
            raise ValueError(f"renamed_arguments: the new name for {old!r} must be another "
                             f"identifier, got {new!r}")

    def decorate(fn):
        name = getattr(fn, "__name__", "function")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            for old, new in old_to_new.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{name}() got both {old!r} (deprecated) and {new!r}; "
                                        f"pass only {new!r}")
                    warnings.warn(f"{name}(): the argument {old!r} is deprecated and will be "
                                  f"removed in the next release; use {new!r}",
                                  DeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed_arguments__ = {**getattr(fn, "__renamed_arguments__", {}),
                                         **old_to_new}
        return wrapper

    return decorate


def boolean(name: str, value) -> bool:
    """A Python bool from ``True``/``False`` (Python or NumPy) or the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, numbers.Integral) and int(value) in (0, 1):
        return bool(value)
    raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")


def real_scalar(name: str, value, minimum: float | None = None, positive: bool = False) -> float:
    """A finite real number (Python/NumPy/0-d array; bools, complex and strings refused)."""
    ok = (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))) or (
        hasattr(value, "dtype") and np.shape(value) == () and np.dtype(value.dtype).kind in "iuf")
    if not ok:
        raise ValueError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    out = float(value)
    if not np.isfinite(out):
        raise ValueError(f"{name} must be finite, got {out!r}")
    if positive and out <= 0:
        raise ValueError(f"{name} must be > 0, got {out!r}")
    if minimum is not None and out < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {out!r}")
    return out


def token_array(name: str, value, ndim: int = 2, vocab_size: int | None = None,
                min_len: int = 1):
    """An integer token array of rank ``ndim`` with ids in ``[0, vocab_size)``.

    Works on tracers too: dtype and shape are checked always, the id range only when the values
    are concrete. Returns the input as a NumPy array when concrete (else the tracer unchanged).
    """
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be an integer token array, got a string")
    if is_concrete(value):
        try:
            value = np.asarray(value)
        except Exception as exc:  # ragged lists
            raise ValueError(f"{name} must be an integer token array ({exc})") from None
    dtype = np.dtype(value.dtype)
    if dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer token array, got dtype {dtype}")
    shape = tuple(value.shape)
    if len(shape) != ndim:
        raise ValueError(f"{name} must be a {ndim}-d token array, got shape {shape}")
    if ndim >= 1 and shape[0] == 0:
        raise ValueError(f"{name} must have at least one row, got shape {shape}")
    if ndim >= 2 and shape[-1] < min_len:
        raise ValueError(f"{name} must have at least {min_len} token(s) per row, got shape {shape}")
    if vocab_size is not None and isinstance(value, np.ndarray) and value.size:
        lo, hi = int(value.min()), int(value.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{name} must hold token ids in [0, {vocab_size}), got values in "
                             f"[{lo}, {hi}]")
    return value


def eos_ids(eos) -> tuple:
    """End-of-sequence ids as a non-empty tuple of ints >= 0 (an int or a sequence of ints)."""
    ids = (eos,) if np.ndim(eos) == 0 else tuple(eos)
    if not ids:
        raise ValueError(f"eos must be a token id or a non-empty sequence of ids, got {eos!r}")
    return tuple(integer("eos", i, 0) for i in ids)
