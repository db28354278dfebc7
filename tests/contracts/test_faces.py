"""The public faces: each subpackage's ``__init__`` lists its public names in ``__all__``, every
name resolves and carries a docstring, the reference page of the subpackage renders that face,
no face name hides a submodule, each layer names its reward contract, the previous release's
names warn with the new name, and no library file cites a tracker number."""

import importlib
import importlib.util
import pkgutil
import re
import warnings
from pathlib import Path

import griffe
import pytest

import grpo_theory as gt

ROOT = Path(__file__).resolve().parents[2]
FACES = ["core", "optim", "companions", "lm", "advisor", "torch", "experiments", "allocation"]
HAS_TORCH = all(importlib.util.find_spec(p) is not None for p in ("torch", "transformers"))
#: each layer's reward contract, named in its face
REWARDS = {"core": "RewardTable", "lm": "TokenReward", "advisor": "TextReward",
           "torch": "CompletionReward"}


def _face(name):
    if name == "torch" and not HAS_TORCH:
        pytest.fail("grpo_theory.torch needs the torch extra (pip install -e '.[torch]')")
    return importlib.import_module(f"grpo_theory.{name}")


@pytest.mark.parametrize("name", FACES)
def test_every_face_name_resolves_once(name):
    face = _face(name)
    names = face.__all__
    assert len(names) == len(set(names)), [n for n in names if names.count(n) > 1]
    assert len(names) >= 10
    for n in names:
        obj = getattr(face, n)
        assert not isinstance(obj, type(gt)), f"grpo_theory.{name}.{n} is a module"


@pytest.mark.parametrize("name", FACES)
def test_no_face_name_hides_a_submodule(name):
    """``from grpo_theory.optim import train as T`` stays the module (``grpo_theory.train`` is
    the function)."""
    face = _face(name)
    for m in pkgutil.iter_modules(face.__path__):
        sub = importlib.import_module(f"grpo_theory.{name}.{m.name}")
        assert getattr(face, m.name) is sub, f"grpo_theory.{name}.{m.name} is not the module"
        assert m.name not in face.__all__


@pytest.fixture(scope="module")
def griffe_faces():
    return {n: griffe.load(f"grpo_theory.{n}", search_paths=[str(ROOT)]) for n in FACES}


@pytest.mark.parametrize("name", FACES)
def test_every_face_name_is_documented(name, griffe_faces):
    """The reference page renders the face, and mkdocstrings shows a member only when it has a
    docstring: each name of ``__all__`` needs one (statically, as griffe reads it)."""
    face = _face(name)
    pkg = griffe_faces[name]
    assert set(pkg.exports) == set(face.__all__)
    missing = [n for n in face.__all__ if not pkg.members[n].final_target.docstring]
    assert not missing, f"grpo_theory.{name}: no docstring for {missing}"
    page = (ROOT / "docs" / "reference" / f"{name}.md").read_text()
    assert f"::: grpo_theory.{name}\n" in page


def test_the_extra_reference_sections_are_named_ones():
    """Only the names a face cannot hold are rendered beside it: ``advise`` (its module's name)
    and the command line, the study entry points' shared command line, the registry and the
    figures of the experiments."""
    extras = {}
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        extras[page.stem] = re.findall(r"^::: (\S+)$", page.read_text(), re.M)
    assert extras["advisor"] == ["grpo_theory.advisor", "grpo_theory.advisor.advise.advise"]
    assert extras["experiments"] == [
        "grpo_theory.experiments", "grpo_theory.experiments.cli.main",
        "grpo_theory.experiments.cli.write_report", "grpo_theory.experiments.study_cli",
        "grpo_theory.experiments.registry",
        "grpo_theory.plotting"]
    assert all(extras[n] == [f"grpo_theory.{n}"] for n in FACES
               if n not in ("advisor", "experiments"))


@pytest.mark.parametrize("name", sorted(REWARDS))
def test_each_layer_names_its_reward_contract(name):
    face = _face(name)
    proto = REWARDS[name]
    assert proto in face.__all__ and proto in face.__doc__
    assert "The reward of this layer" in face.__doc__ or name == "core" and "reward" in (
        face.__doc__)


def test_the_top_level_face_resolves():
    for n in gt.__all__:
        assert getattr(gt, n) is not None
    assert gt.train is importlib.import_module("grpo_theory.optim.train").train


@pytest.mark.parametrize("old, new", [("policies", "core.policies"), ("training", "optim.train"),
                                      ("ustat", "core.ustat"), ("dppo", "companions.dppo")])
def test_flat_module_names_warn_with_their_new_place(old, new):
    with pytest.warns(DeprecationWarning, match=rf"grpo_theory\.{re.escape(new)}\b"):
        mod = getattr(gt, old)
    assert mod is importlib.import_module(f"grpo_theory.{new}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gt.core, gt.optim  # the subpackages themselves do not warn


@pytest.mark.parametrize("old, new", [("estimate_from_model", "estimate_from_torch_rollouts"),
                                      ("estimate_scaling_constants",
                                       "estimate_from_torch_model")])
def test_previous_torch_names_warn_and_forward(old, new):
    t = _face("torch")
    fn = getattr(t, old)
    assert old not in t.__all__ and fn.__wrapped__ is getattr(t, new)
    with pytest.warns(DeprecationWarning, match=rf"use grpo_theory\.torch\.{new}$"):
        with pytest.raises((TypeError, ValueError)):  # forwarded: the new function's own check
            fn("not a model", None, None, None)


def test_no_tracker_numbers_in_the_library():
    """The package, its benchmarks and its studies' drivers name no tracker entry."""
    pat = re.compile(r"\b(issue|round|follow-up)\s+#?\d+|#\d{2,}\b", re.I)
    files = [p for d in ("grpo_theory", "benchmarks", "simulations")
             for p in sorted((ROOT / d).rglob("*.py"))]
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in files
            for i, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert not hits, hits
    assert pat.search("see issue 13 A") and pat.search("(round 2)")  # the check can fail


#: the faces of subpackages below a layer's face (no reference page of their own)
SUBFACES = ["lm.families", "lm.budget", "lm.checkpoints", "lm.training",
            "experiments.lm_support"]


@pytest.mark.parametrize("name", SUBFACES)
def test_every_subpackage_face_resolves_and_hides_no_submodule(name):
    face = importlib.import_module(f"grpo_theory.{name}")
    names = face.__all__
    assert len(names) == len(set(names)) and len(names) >= 5
    for n in names:
        assert not isinstance(getattr(face, n), type(gt)), f"grpo_theory.{name}.{n} is a module"
    for m in pkgutil.iter_modules(face.__path__):
        sub = importlib.import_module(f"grpo_theory.{name}.{m.name}")
        assert getattr(face, m.name) is sub and m.name not in names


@pytest.mark.parametrize("face, name", [("lm", "gradient_mse_study"), ("lm", "mixture_constants"),
                                        ("advisor", "advised_group_size")])
def test_study_names_that_left_a_face_name_their_new_home(face, name):
    """The LM studies' library left the library's faces: the old name fails in one line naming
    ``grpo_theory.experiments.lm_support``, where the name resolves; an unknown name still gets
    Python's own error (rival: a ``__getattr__`` that swallows every name)."""
    mod = importlib.import_module(f"grpo_theory.{face}")
    with pytest.raises(AttributeError, match=r"moved to grpo_theory\.experiments\.lm_support"):
        getattr(mod, name)
    assert name not in mod.__all__
    support = importlib.import_module("grpo_theory.experiments.lm_support")
    assert name in support.__all__ and callable(getattr(support, name))
    with pytest.raises(AttributeError, match=r"has no attribute 'no_such_name'"):
        getattr(mod, "no_such_name")
