"""One public surface, kept by an AST scan of the sources (no imports run):

* only the faces (the packages' ``__init__`` modules) of ``grpo_theory/`` declare ``__all__``;
* no module of ``grpo_theory/`` or ``simulations/`` imports a private name (one leading
  underscore) from another module; a private *module* (``_validation``, ``torch._checks``) is
  fine, its names are public;
* a module of ``grpo_theory/`` imports another subpackage's names from a face (a package's
  ``__init__``), never from its implementation modules;
* a name imported from an implementation module is defined there (its home): no module
  re-exports another's names for an old import path;
* the private members of TRL that the torch layer uses are reached through
  ``grpo_theory/torch/_trl.py`` alone.

Each rule is checked on a synthetic source that breaks it (the scanner can fail).
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: the installed name of each scanned source folder
SOURCES = {"grpo_theory": "grpo_theory", "simulations": "grpo_theory.studies"}
#: the one module of the torch layer that touches TRL's private members
TRL_MODULE = "grpo_theory.torch._trl"
#: (module, name) imported from outside a face: ``advise`` names its own module, so the advisor's
#: face cannot hold the function (``from grpo_theory.advisor.advise import advise``)
OFF_FACE = {("grpo_theory.advisor.advise", "advise")}


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def _module_table():
    """``{dotted name: (path, is_package, names it imports from grpo_theory and does not
    define)}`` of every module of the scanned folders."""
    table = {}
    for folder, dotted in SOURCES.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            parts = list(p.relative_to(ROOT / folder).with_suffix("").parts)
            pkg = parts[-1] == "__init__"
            name = ".".join([dotted] + (parts[:-1] if pkg else parts))
            tree = ast.parse(p.read_text())
            table[name] = (p, pkg, _reexported(tree, name, pkg) - _defined(tree))
    return table


def _resolve(node, module, is_pkg):
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_pkg else module.split(".")[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _reexported(tree, module, is_pkg):
    """The names a module imports from ``grpo_theory`` at its top level (re-exportable)."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and _internal(_resolve(node, module, is_pkg)):
            out |= {a.asname or a.name for a in node.names}
    return out


def _defined(tree):
    """The names a module defines at its top level (``def``, ``class``, assignments, also under
    ``if``/``try``), not those it imports."""
    out, stack = set(), list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            stack += [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]
            stack += [n for h in getattr(node, "handlers", []) for n in h.body]
    return out


def _imports(tree, module, is_pkg, modules):
    """``(line, target module, imported name or None, bound alias, is a module)`` of every import
    of the tree, inside functions too."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_pkg)
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.append((node.lineno, target, a.name, a.asname or a.name, sub in modules))
        elif isinstance(node, ast.Import):
            for a in node.names:
                out.append((node.lineno, a.name, None, a.asname or a.name.split(".")[0], True))
    return out


def _internal(target):
    return target == "grpo_theory" or target.startswith("grpo_theory.")


def all_violations(source, module, is_pkg, modules):
    """Every rule's findings in one module's source, as ``"rule: line: what"`` lines."""
    tree = ast.parse(source)
    out = []
    if not is_pkg and not module.startswith("grpo_theory.studies"):
        for node in ast.walk(tree):
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                out.append(f"all: {node.lineno}: __all__ outside a face")
    imports = _imports(tree, module, is_pkg, modules)
    aliases = {}
    for line, target, name, alias, is_module in imports:
        if not _internal(target):
            continue
        if name is not None and _private(name) and not is_module and target != module:
            out.append(f"private: {line}: {name} from {target}")
        if is_module:
            aliases[alias] = target if name is None else f"{target}.{name}"
    for line, target, name, alias, is_module in imports:
        if (name is not None and not is_module and target in modules and not modules[target][1]
                and name in modules[target][2]):
            out.append(f"home: {line}: {name} is not defined in {target}, which imports it")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in aliases and _private(node.attr)
                and f"{aliases[node.value.id]}.{node.attr}" not in modules):
            out.append(f"private: {node.lineno}: {node.attr} of {aliases[node.value.id]}")
    if module.startswith("grpo_theory.") and not module.startswith("grpo_theory.studies"):
        own = module.split(".")[1]
        for line, target, name, alias, is_module in imports:
            parts = target.split(".")
            if (not _internal(target) or len(parts) < 2 or parts[1] == own
                    or not modules.get(".".join(parts[:2]), (None, False))[1]):
                continue  # the same subpackage, or a module at the top (_validation, problems)
            if (target, name) in OFF_FACE:
                continue
            if target not in modules or not modules[target][1]:
                out.append(f"face: {line}: {target} is not a face")
            elif name is not None and is_module:
                out.append(f"face: {line}: module {target}.{name} instead of the face")
    if module.startswith("grpo_theory.torch.") and module != TRL_MODULE:
        out += [f"trl: {line}" for line in _trl_private_uses(tree, imports)]
    return out


def _trl_private_uses(tree, imports):
    """Lines that reach a private member of another object: ``obj._x`` (not ``self``/``cls``),
    ``_x`` imported from ``trl``, or ``"_x"`` named in a tuple or a ``getattr``-like call."""
    lines = [line for line, target, name, *_ in imports
             if target.split(".")[0] == "trl" and (name is not None and _private(name)
                                                   or any(map(_private, target.split("."))))]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr")):
            items = node.elts if not isinstance(node, ast.Call) else node.args
            lines += [e.lineno for e in items if isinstance(e, ast.Constant)
                      and isinstance(e.value, str) and _private(e.value)
                      and e.value.isidentifier()]
    return lines


@pytest.fixture(scope="module")
def modules():
    return _module_table()


def _scan(modules):
    found = []
    for name, (path, pkg, _) in modules.items():
        for v in all_violations(path.read_text(), name, pkg, modules):
            found.append(f"{path.relative_to(ROOT)}: {v}")
    return found


def _rule(found, rule):
    return [f for f in found if f.split(": ")[1] == rule]


@pytest.fixture(scope="module")
def found(modules):
    return _scan(modules)


@pytest.mark.parametrize("rule", ["all", "private", "face", "home", "trl"])
def test_the_surface_rules_hold(found, rule):
    hits = _rule(found, rule)
    assert not hits, "\n".join(hits)


def test_the_trl_module_names_its_version(modules):
    path = modules[TRL_MODULE][0]
    assert "TRL 1.16.0" in ast.get_docstring(ast.parse(path.read_text()))


# --- each rule can fail: synthetic sources that break it ----------------------------------------

#: module -> (is a package, the names it imports from grpo_theory without defining them)
SYNTHETIC = {
    "grpo_theory.core.ustat": (False, {"as_structure"}),
    "grpo_theory.core": (True, set()), "grpo_theory.optim": (True, set()),
    "grpo_theory.optim.train": (False, {"exact_objective", "maximise"}),
    "grpo_theory.optim.schedules": (False, set()),
    "grpo_theory._validation": (False, set()),
    "grpo_theory.torch": (True, set()), "grpo_theory.torch.callback": (False, set()),
    "grpo_theory.torch._trl": (False, set()), "grpo_theory.torch._checks": (False, set()),
}


def _flagged(source, module, rule):
    mods = {k: (None, pkg, defs) for k, (pkg, defs) in SYNTHETIC.items()}
    return [v for v in all_violations(source, module, mods[module][1], mods)
            if not rule or v.startswith(rule + ":")]


@pytest.mark.parametrize("module, source, rule", [
    # __all__ in an implementation module (the rival: every module keeps a public list)
    ("grpo_theory.core.ustat", "__all__ = ['u_statistic']\n", "all"),
    ("grpo_theory.core.ustat", "__all__ += ['u_statistic']\n", "all"),
    # a private name imported across modules: relative, absolute, through a module alias
    ("grpo_theory.optim.train", "from ..core.ustat import _minibatch\n", "private"),
    ("grpo_theory.optim.train", "from grpo_theory.core.ustat import _dot as d\n", "private"),
    ("grpo_theory.optim.train", "from ..core import ustat as U\nU._dot(1, 2)\n", "private"),
    ("grpo_theory.optim.train", "import grpo_theory.core.ustat as U\nU._dot\n", "private"),
    ("grpo_theory.core", "def f():\n    from .ustat import _closed_forms\n", "private"),
    # another subpackage's implementation module instead of its face
    ("grpo_theory.optim.train", "from ..core.ustat import u_statistic\n", "face"),
    ("grpo_theory.optim.train", "from grpo_theory.core import ustat\n", "face"),
    ("grpo_theory.optim.train", "import grpo_theory.core.ustat\n", "face"),
    # a name imported from a module that only re-exports it (its home is elsewhere)
    ("grpo_theory.optim.schedules", "from .train import maximise\n", "home"),
    ("grpo_theory.core", "from .ustat import as_structure\n", "home"),
    # a private TRL member outside the one module
    ("grpo_theory.torch.callback", "trainer._metrics['train']\n", "trl"),
    ("grpo_theory.torch.callback", "for n in ('_calculate_rewards', 'args'):\n    pass\n", "trl"),
    ("grpo_theory.torch.callback", "hasattr(t, '_metrics')\n", "trl"),
    ("grpo_theory.torch.callback", "from trl.trainer.utils import _x\n", "trl"),
])
def test_a_broken_rule_is_flagged(module, source, rule):
    assert _flagged(source, module, rule), (module, source)


@pytest.mark.parametrize("module, source", [
    ("grpo_theory.optim.train", "from .. import _validation as V\nV.integer\n"),
    ("grpo_theory.optim.train", "from .._validation import integer\n"),
    ("grpo_theory.optim.train", "from ..core import u_statistic\nfrom .schedules import x\n"),
    ("grpo_theory.core", "from .ustat import u_statistic\n__all__ = ['u_statistic']\n"),
    ("grpo_theory.torch.callback", "self._pending = []\nfrom ._checks import ALLOCATOR_MARK\n"
                                   "from ._trl import train_metrics\n"),
    ("grpo_theory.torch._trl", "trainer._metrics['train']\n"),
])
def test_what_the_rules_allow_is_not_flagged(module, source):
    """The rival the rules exclude is not "flag everything": private modules, public names,
    siblings, a face's ``__all__``, ``self._x`` and the TRL module itself pass."""
    assert not _flagged(source, module, ""), (module, source)
