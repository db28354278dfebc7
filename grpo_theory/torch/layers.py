r"""Per-sample gradients of one module's trainable parameters, from its recorded call: the
layers of the torch route's score pass (:mod:`grpo_theory.torch.estimate`).

A forward hook records, for each module that *handles* trainable parameters, its call (inputs)
and output; the backward pass of ``sum_i log pi(y_i|x)`` gives the output gradients ``b``
(sample i's only reach sample i's rows). Per module:

* ``nn.Linear`` (LoRA's ``lora_A`` and ``lora_B`` included): ``b_i^T a_i``, factored or formed
  (:func:`layer_route`); ``nn.Embedding``: the same with one-hot inputs.
* a PEFT LoRA embedding (``peft.tuners.lora.Embedding``, ``target_modules`` naming the embedding;
  DoRA included): its adapters ``lora_embedding_A``/``lora_embedding_B`` (and the DoRA
  magnitude) are parameter containers used inside the layer's own forward, so the layer itself
  handles them: ``torch.func`` per-sample gradients of ``<layer(x_i), b_i>`` with respect to
  them (its base embedding is handled by its own hook).
* any other module (RMSNorm weights, PEFT's DoRA magnitude ``DoraLinearLayer``, whose forward
  takes the input and keyword arguments): ``torch.func.vmap`` of ``grad`` of
  ``<module(*args_i, **kwargs_i), b_i>`` over its own trainable parameters, replaying the
  recorded call; an argument tensor is per sample when its leading shape is that of the first
  input (n, T), else shared.

PEFT setups outside these (other tuners, LoRA variants other than DoRA, prompt learning) are
refused before any pass by :func:`check_trainable_layers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.func import functional_call, grad, vmap

from grpo_theory.lm import ghost_route


@dataclass
class Factored:
    """Per-sample gradient ``sum_t L_t (x) R_t``: ``L`` (n, T, p) dense or (n, T) token ids of a
    one-hot row (``rows``: the number of rows), ``R`` (n, T, r)."""

    L: torch.Tensor
    R: torch.Tensor
    rows: int | None = None

    @property
    def ids(self) -> bool:
        return self.rows is not None


def _gram_left(u: Factored, v: Factored):
    if u.ids and v.ids:
        return (u.L[:, :, None] == v.L[:, None, :]).to(u.R.dtype)
    if u.ids:
        return torch.gather(v.L.transpose(1, 2), 1, u.L[:, :, None].expand(-1, -1, v.L.shape[1]))
    if v.ids:
        return _gram_left(v, u).transpose(1, 2)
    return torch.bmm(u.L, v.L.transpose(1, 2))


def explicit_grad(f: Factored):
    """The (n, p, r) per-sample gradients of a factored use."""
    if f.ids:
        out = f.R.new_zeros(f.R.shape[0], f.rows, f.R.shape[2])
        return out.scatter_add_(1, f.L[:, :, None].expand(-1, -1, f.R.shape[2]), f.R)
    return torch.bmm(f.L.transpose(1, 2), f.R)


def inner_products(u, v):
    """(n,) float64 per-sample inner products of two uses of one parameter."""
    if isinstance(u, Factored) and isinstance(v, Factored):
        g = _gram_left(u, v) * torch.bmm(u.R, v.R.transpose(1, 2))
        return g.double().sum(dim=(1, 2))
    if isinstance(u, Factored):
        u, v = v, u
    if isinstance(v, Factored):  # u explicit (n, p, r)
        if v.ids:
            rows = torch.gather(u, 1, v.L[:, :, None].expand(-1, -1, u.shape[2]))
        else:
            rows = torch.bmm(v.L, u)  # (n, T, r)
        return (rows * v.R).double().sum(dim=(1, 2))
    return (u * v).double().flatten(1).sum(dim=1)


def layer_route(positions: int, d_in: int, d_out: int, one_hot: bool = False,
                dtype=torch.float32) -> str:
    """The route of one layer's per-sample squared norm, by the rule both backends share
    (:func:`grpo_theory.lm.budget.ghost_rule.ghost_route`): "gram" keeps the factored form (Gram
    matrices of the T positions), "direct" forms the (n, d_out, d_in) per-sample gradient."""
    return ghost_route(int(positions), int(d_in), int(d_out), one_hot=one_hot,
                       dtype_bytes=torch.empty((), dtype=dtype).element_size())


def _linear_uses(mod, a, b, n):
    a = a.reshape(n, -1, a.shape[-1])
    b = b.reshape(n, -1, b.shape[-1])
    out = {}
    if mod.weight.requires_grad:
        f = Factored(b, a)
        route = layer_route(a.shape[1], a.shape[2], b.shape[2], dtype=b.dtype)
        out[mod.weight] = explicit_grad(f) if route == "direct" else f
    if mod.bias is not None and mod.bias.requires_grad:
        out[mod.bias] = b.sum(dim=1)
    return out


def _embedding_uses(mod, ids, b, n):
    ids = ids.reshape(n, -1)
    b = b.reshape(n, ids.shape[1], -1)
    if mod.padding_idx is not None:
        b = b * (ids != mod.padding_idx)[..., None].to(b.dtype)
    f = Factored(ids, b, rows=mod.num_embeddings)
    route = layer_route(ids.shape[1], mod.num_embeddings, b.shape[2], one_hot=True,
                        dtype=b.dtype)
    return {mod.weight: explicit_grad(f) if route == "direct" else f}


def _per_sample(v, lead):
    return isinstance(v, torch.Tensor) and tuple(v.shape[:len(lead)]) == tuple(lead)


def _generic_uses(mod, args, kwargs, b, n, params):
    """Per-sample gradients of ``params`` ({name relative to ``mod``: parameter}) by
    ``torch.func``: ``vmap`` of ``grad`` of ``<mod(*args_i, **kwargs_i), b_i>``."""
    lead = args[0].shape[:2]
    pos = [i for i, v in enumerate(args) if _per_sample(v, lead)]
    keys = [k for k, v in kwargs.items() if _per_sample(v, lead)]
    samples = [args[i] for i in pos] + [kwargs[k] for k in keys]

    def inner(pr, xs, g):
        a, kw = list(args), dict(kwargs)
        for i, v in zip(pos, xs):
            a[i] = v[None]
        for k, v in zip(keys, xs[len(pos):]):
            kw[k] = v[None]
        return (functional_call(mod, pr, tuple(a), kw) * g[None]).sum()

    detached = {k: p.detach() for k, p in params.items()}
    with torch.no_grad():  # the outer graph (shared modules' parameters) is not needed
        per = vmap(grad(inner), in_dims=(None, 0, 0))(detached, samples, b)
    return {params[k]: per[k].reshape(n, -1) for k in params}


def _plain_linear(mod):
    return type(mod) is torch.nn.Linear or (isinstance(mod, torch.nn.Linear)
                                            and type(mod).forward is torch.nn.Linear.forward)


def _plain_embedding(mod):
    return (isinstance(mod, torch.nn.Embedding) and type(mod).forward is torch.nn.Embedding.forward
            and mod.max_norm is None and not mod.scale_grad_by_freq)


def parameter_uses(mod, args, kwargs, b, n, params):
    """{parameter: per-sample gradient (explicit (n, ...) or :class:`Factored`)} of the
    trainable ``params`` a module handles, from its recorded call and output gradient ``b``."""
    a = args[0]
    if _plain_linear(mod) and not kwargs and len(args) == 1:
        return _linear_uses(mod, a, b, n)
    if _plain_embedding(mod) and not kwargs and len(args) == 1:
        return _embedding_uses(mod, a, b, n)
    return _generic_uses(mod, args, kwargs, b, n, params)


def _lora_types():
    """PEFT's LoRA layer classes (None without peft)."""
    try:
        from peft.tuners import lora
        from peft.tuners.lora import variants
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:  # pragma: no cover - peft is part of the torch extra
        return None
    return dict(base=BaseTunerLayer, layer=lora.LoraLayer, embedding=lora.Embedding,
                dora=(variants.DoraLinearVariant, variants.DoraEmbeddingVariant))


def handlers(model, named):
    """[(module, {name relative to it: parameter})]: the modules whose recorded calls give each
    trainable parameter's per-sample gradients (module docstring); a parameter used by several
    modules (tied input and output embeddings) is listed under each, its uses summed."""
    ids = {id(p) for p in named.values()}
    taken, out = set(), []
    types = _lora_types()
    if types is not None:
        for mod in model.modules():
            if isinstance(mod, types["embedding"]):
                base = {id(p) for p in mod.get_base_layer().parameters()}
                own = {k: p for k, p in mod.named_parameters()
                       if id(p) in ids and id(p) not in base and id(p) not in taken}
                if own:
                    out.append((mod, own))
                    taken |= {id(p) for p in own.values()}
    for mod in model.modules():  # a parameter several modules use (tied embeddings): each
        own = {k: p for k, p in mod.named_parameters(recurse=False)
               if id(p) in ids and id(p) not in taken}
        if own:
            out.append((mod, own))
    return out


def check_trainable_layers(model):
    """Refuse, before any pass, trainable parameters whose per-sample gradients the score pass
    cannot form: a PEFT prompt-learning model (virtual tokens change the sequence), a trainable
    PEFT layer that is not LoRA on a linear or embedding layer, a LoRA variant other than DoRA
    (``use_dora``), and a trainable parameter held in a ``ParameterDict``/``ParameterList`` that
    no supported layer handles (its container's forward never runs). One-line ``ValueError``."""
    types = _lora_types()
    if types is None:
        return
    for cfg in (getattr(model, "peft_config", None) or {}).values():
        if cfg.is_prompt_learning:
            raise ValueError(f"PEFT {cfg.peft_type} (prompt learning: virtual tokens) is not "
                             f"supported by the score pass; use LoRA (LoraConfig)")
    for name, mod in model.named_modules():
        if not isinstance(mod, types["base"]):
            continue
        base = {id(p) for p in mod.get_base_layer().parameters()}
        if not any(p.requires_grad and id(p) not in base for p in mod.parameters()):
            continue
        if not isinstance(mod, types["layer"]):
            raise ValueError(f"trainable PEFT layer {name!r} ({type(mod).__name__}) is not "
                             f"supported by the score pass: use LoRA (LoraConfig, use_dora "
                             f"allowed) on linear or embedding layers")
        linear = all(_plain_linear(m) for m in list(mod.lora_A.values())
                     + list(mod.lora_B.values()))
        if not (linear or isinstance(mod, types["embedding"])):
            raise ValueError(f"LoRA layer {name!r} ({type(mod).__name__}) is not supported by "
                             f"the score pass: LoraConfig target_modules must name linear or "
                             f"embedding layers")
        for adapter, variant in mod.lora_variant.items():
            if not isinstance(variant, types["dora"]):
                raise ValueError(f"LoRA layer {name!r} adapter {adapter!r} uses the variant "
                                 f"{type(variant).__name__}, not supported by the score pass "
                                 f"(LoraConfig: plain LoRA or use_dora=True)")
    names = {id(m): k for k, m in model.named_modules()}
    trainable = {k: p for k, p in model.named_parameters() if p.requires_grad}
    for mod, own in handlers(model, trainable):
        if isinstance(mod, (torch.nn.ParameterDict, torch.nn.ParameterList)):
            raise ValueError(f"trainable parameter {names[id(mod)]}.{next(iter(own))} sits in "
                             f"a {type(mod).__name__} that no supported layer handles (its "
                             f"forward never runs); freeze it (requires_grad=False)")


class Recorder:
    """Forward hooks on every module that handles a trainable parameter (:func:`handlers`):
    its call (detached inputs) and its output, while ``on``."""

    def __init__(self, model, names):
        self.calls, self.on, self.handles = [], False, []
        self.owned = {id(mod): own for mod, own in handlers(model, names)}
        for mod in model.modules():
            if id(mod) in self.owned:
                self.handles.append(mod.register_forward_hook(self._hook, with_kwargs=True))

    def _hook(self, mod, args, kwargs, out):
        if not self.on:
            return
        if not args and kwargs:  # the first keyword argument is the input
            k = next(iter(kwargs))
            args, kwargs = (kwargs[k],), {j: v for j, v in kwargs.items() if j != k}
        if not args or not isinstance(args[0], torch.Tensor) or \
                not isinstance(out, torch.Tensor):
            raise ValueError(f"module {type(mod).__name__} owns trainable parameters but its "
                             f"forward does not map a tensor to one tensor; the per-sample "
                             f"norms cannot be formed (freeze it: requires_grad=False)")

        def detach(v):
            return v.detach() if isinstance(v, torch.Tensor) else v

        self.calls.append((mod, tuple(detach(v) for v in args),
                           {k: detach(v) for k, v in kwargs.items()}, out))

    def remove(self):
        for h in self.handles:
            h.remove()
