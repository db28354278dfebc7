"""A checkpoint's chat template (Jinja), compiled the way Hugging Face renders it.

:func:`renderer` compiles a template in Hugging Face's environment (sandboxed, ``trim_blocks``,
``lstrip_blocks``, ``raise_exception``); :func:`check_template` compiles one at load time so
that a broken template is refused with one line naming the file and the field, not the template
engine's own exception; :func:`render` wraps the engine's errors at render time the same way.
``jinja2`` is imported on first use (skipped by :func:`check_template` when absent).
"""

from __future__ import annotations

import functools
import importlib

from ..families.spec import need_extra


def _raise_exception(msg):
    raise ValueError(f"chat template: {msg}")


@functools.lru_cache(maxsize=16)
def renderer(template: str):
    """The compiled template (``jinja2``'s ``Template``) in Hugging Face's environment (the
    last few compiled are kept)."""
    sandbox = need_extra("jinja2.sandbox", "rendering chat templates")
    env = sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = _raise_exception
    return env.from_string(template)


def _one_line(e: Exception) -> str:
    msg = (str(e).splitlines() or [""])[0] or type(e).__name__
    line = getattr(e, "lineno", None)
    return f"{type(e).__name__}{f' at line {line}' if line else ''}: {msg}"


def check_template(template: str | None, where: str) -> str | None:
    """``template`` unchanged once it compiles (None passes).

    Args:
        template: the Jinja source or None.
        where: the file and field, for the message (``"tokenizer_config.json of '/ckpt':
            chat_template"``).

    Raises:
        ValueError: the template does not compile, in one line naming ``where``.
    """
    if template is None:
        return None
    try:
        importlib.import_module("jinja2.sandbox")
    except ImportError:
        return template
    try:
        renderer(template)
    except Exception as e:  # jinja2's TemplateSyntaxError and friends
        raise ValueError(f"{where} is not a valid Jinja chat template ({_one_line(e)})") from None
    return template


def render(template: str, where: str, **context) -> str:
    """``template`` rendered with ``context``; the template's own ``raise_exception`` passes
    through, any other engine error becomes one line naming ``where``."""
    tmpl = renderer(template)
    try:
        return tmpl.render(**context)
    except ValueError as e:
        if str(e).startswith("chat template: "):
            raise
        raise ValueError(f"{where} failed to render ({_one_line(e)})") from None
    except Exception as e:  # UndefinedError, TypeError, SecurityError ...
        raise ValueError(f"{where} failed to render ({_one_line(e)})") from None
