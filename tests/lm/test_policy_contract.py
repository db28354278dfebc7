"""The policy contract (LMPolicy's derived capabilities and HFPolicy's overrides, as the class
docstrings list them), the model options and the one statistics record that every route of the
advisor's statistics returns and estimate_from_rollouts reads."""

import dataclasses
import inspect
import re

import jax
import numpy as np
import pytest

from grpo_theory.advisor import estimate_from_rollouts
from grpo_theory.core.rollouts import RolloutStatistics
from grpo_theory.lm import task
from grpo_theory.lm.checkpoints import hf
from grpo_theory.lm.budget import statistics as S
from grpo_theory.lm.checkpoints.load import checkpoint_format, from_pretrained, load_policy
from grpo_theory.lm.budget.memory import ghost_row_bytes
from grpo_theory.lm.model import ModelConfig, init_params, make_apply
from grpo_theory.lm.budget.options import ModelOptions, resolve_chunk, score_memory
from grpo_theory.lm.policy import LMPolicy


class Minimal(LMPolicy):
    """A policy that overrides nothing: every capability is LMPolicy's default."""


@pytest.fixture(scope="module")
def minimal():
    cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2)
    return Minimal(init_params(jax.random.PRNGKey(0), cfg), make_apply(cfg))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from support.hf_checkpoint import write_checkpoint

    path = tmp_path_factory.mktemp("contract_qwen2")
    write_checkpoint(path, "qwen2", tied=False, bias=True, theta=100.0)
    return from_pretrained(path)


def _listed(doc: str, heading: str) -> set:
    """The ``name``s of the paragraph of ``doc`` that starts with ``heading``."""
    para = doc.split(heading, 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"``([a-z_]+)``", para))


def _derived(doc: str) -> list:
    """The capabilities of the "Derived" bullet list of LMPolicy's docstring."""
    para = doc.split("Derived, with defaults", 1)[1].split("\n\n", 2)[1]
    return re.findall(r"^\s*\* (?::meth:`|``)([a-z_]+)", para, flags=re.M)


def _public_methods(cls) -> set:
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k for k, v in vars(cls).items() if not k.startswith("_") and k not in fields
            and (callable(v) or isinstance(v, (int, type(None))))}


def test_the_docstring_lists_the_contract_and_hf_overrides_exactly_it():
    doc = inspect.getdoc(LMPolicy)
    derived = _derived(doc)
    assert derived[:3] == ["prompt_pad", "pad_prompts", "encode"] and "score_statistics" in derived
    for name in derived:
        assert hasattr(LMPolicy, name), name
    core = {"sample", "log_probs", "score_contractions", "weighted_score"}
    overrides = _listed(doc, "(a Hugging Face checkpoint) overrides:")
    # HFPolicy overrides exactly the documented methods, each one of the contract's
    own = _public_methods(hf.HFPolicy)
    assert {k for k in own if hasattr(LMPolicy, k)} == overrides
    assert overrides <= set(derived) | core
    # and documents its own extensions, which are exactly its other public methods
    hdoc = inspect.getdoc(hf.HFPolicy)
    assert _listed(hdoc, "Overrides of the policy contract") == overrides
    assert _listed(hdoc, "Extensions of a checkpoint:") == {k for k in own
                                                           if not hasattr(LMPolicy, k)}


def test_a_policy_that_overrides_nothing_gets_every_default(minimal):
    for name in _derived(inspect.getdoc(LMPolicy)):
        assert getattr(Minimal, name) is getattr(LMPolicy, name), name
    pol = minimal
    assert pol.prompt_pad is None
    x = pol.encode(["1+2=", "12-3="])
    assert x.shape == (2, task.PROMPT_LEN) and x.dtype == np.int32
    assert task.decode(x[0]) == "1+2=" and np.all(x[0, :-4] == task.PAD)
    np.testing.assert_array_equal(pol.pad_prompts([task.encode("7")]), x[:1] * 0 + np.r_[
        [task.PAD] * (task.PROMPT_LEN - 1), task.encode("7")][None])
    prompts, said = pol.question_prompts(["1+2", "3*4:"], fmt="trace")
    np.testing.assert_array_equal(prompts, pol.encode(["1+2:", "3*4:"]))
    assert said == "the package's character tokenizer (trace format)"
    y = np.array([task.encode("42") + [task.EOS, 5], task.encode("-7") + [task.PAD] * 2])
    assert pol.decode(y) == ["42", "-7"] == pol.response_texts(y)
    assert pol.default_response_len() == task.RESPONSE_LEN["answer"]
    assert pol.default_response_len("trace") == task.RESPONSE_LEN["trace"]
    assert pol.default_reward() is task.reward_text
    assert pol.row_bytes(20, 4) is None
    # the default statistics route is the per-sample one
    rng = np.random.default_rng(0)
    xr = rng.integers(3, 12, size=(3, 4)).astype(np.int32)
    yr = rng.integers(3, 12, size=(3, 3, 2)).astype(np.int32)
    z = rng.normal(size=(3, 3))
    st = pol.score_statistics(xr, yr, z, chunk=4)
    ref = S.per_sample_statistics(pol, xr, yr, z, 4)
    assert type(st) is RolloutStatistics and st.chunk == 4 and st.n_params == pol.dim
    for k in ("rewards", "sq_norms", "mean_sq", "mean_dot"):
        np.testing.assert_array_equal(getattr(st, k), getattr(ref, k))
    with pytest.raises(ValueError, match="fmt must be one of"):
        pol.question_prompts(["1+2"], fmt="essay")
    with pytest.raises(ValueError, match="texts must be a string"):
        pol.encode([])


def test_a_checkpoint_overrides_them(checkpoint):
    pol = checkpoint
    x, said = pol.question_prompts(["a b", "c"], chat_template=True)
    np.testing.assert_array_equal(x, pol.encode(["a b", "c"]))  # this one has no template
    assert said == "raw question text (the checkpoint has no chat template)"
    assert pol.default_response_len("trace") == 32
    assert pol.default_reward() is task.reward_answer_text
    assert pol.row_bytes(20, 4) == ghost_row_bytes(pol.config, 20, 4, 4)
    y = pol.encode(["a b", "c d"])
    assert pol.response_texts(y) == ["a b", "c d"]
    # the ghost route when a block holds a whole group, the per-sample route otherwise
    rng = np.random.default_rng(1)
    xr = pol.encode(["a b c", "d", "e f"])
    yr = rng.integers(4, 40, size=(3, 3, 2)).astype(np.int32)
    z = rng.normal(size=(3, 3))
    ghost = pol.score_statistics(xr, yr, z, chunk=7)
    plain = pol.score_statistics(xr, yr, z, chunk=2)
    assert (ghost.chunk, plain.chunk) == (6, 2)
    for k in ("sq_norms", "mean_sq", "mean_dot"):
        a, b = getattr(ghost, k), getattr(plain, k)
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * np.abs(b).max(), err_msg=k)


def test_load_policy_and_checkpoint_format(checkpoint, minimal, tmp_path):
    """One function decides "directory or .gguf" (the loader, ``--model`` and the studies ask
    it); rival: the file's suffix alone (a missing ``.gguf`` or a directory named ``*.gguf``)."""
    assert load_policy(minimal) is minimal
    assert checkpoint_format(checkpoint.path) == "directory"
    (tmp_path / "m.GGUF").write_bytes(b"")
    (tmp_path / "d.gguf").mkdir()
    assert checkpoint_format(tmp_path / "m.GGUF") == "gguf"
    assert checkpoint_format(tmp_path / "d.gguf") == "directory"
    assert checkpoint_format(tmp_path / "absent.gguf") is None
    assert checkpoint_format(tmp_path / "x.npz") is None and checkpoint_format(3) is None
    pol = load_policy(checkpoint.path, ModelOptions(dtype="bfloat16", pad_id=0))
    assert type(pol) is hf.HFPolicy and pol.pad_id == 0
    assert jax.tree_util.tree_leaves(pol.params)[0].dtype == np.dtype("bfloat16")
    with pytest.raises(ValueError, match="apply to Hugging Face checkpoints"):
        load_policy("instruct", ModelOptions(pad_id=3))
    with pytest.raises(ValueError, match="pad_embedding='trained'"):
        load_policy("instruct", ModelOptions(pad_embedding="trained"))
    assert load_policy(checkpoint.path, ModelOptions(pad_embedding="trained")).config[
        "frozen_row"] is None
    with pytest.raises(ValueError, match="options must be a ModelOptions"):
        load_policy("instruct", dict(chunk=2))
    with pytest.raises(ValueError, match="neither one of base, instruct, icl"):
        load_policy(tmp_path / "nothing")


# --- the options ------------------------------------------------------------------------------

@pytest.mark.parametrize("field,bad,message", [
    ("chunk", 0, "chunk must be an integer >= 1"),
    ("chunk", 2.0, "chunk must be an integer"),
    ("memory_budget", -1, "memory_budget must be an integer >= 1"),
    ("memory_budget", True, "memory_budget must be an integer"),
    ("memory_budget", "lots", "--memory-budget must be a number"),
    ("dtype", "float16", "dtype must be one of float32, bfloat16"),
    ("pad_id", -1, "pad_id must be an integer >= 0"),
    ("pad_embedding", "zero", "pad_embedding must be one of frozen, trained"),
])
def test_options_errors_name_the_field(field, bad, message):
    with pytest.raises(ValueError, match=message):
        ModelOptions(**{field: bad})


def test_options_are_frozen_and_parse_sizes(minimal):
    o = ModelOptions(memory_budget="0.5 GiB", chunk=np.int64(3), dtype="bfloat16", pad_id=2)
    assert (o.memory_budget, o.chunk, type(o.chunk)) == (2**29, 3, int)
    assert o.checkpoint_only == dict(dtype="bfloat16", pad_id=2)
    assert ModelOptions(dtype="float32").checkpoint_only == {}
    assert ModelOptions(pad_embedding="frozen").checkpoint_only == dict(pad_embedding="frozen")
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.chunk = 4
    # the chunk: given, or once from the budget (the function is the same rule)
    assert o.resolve_chunk(minimal, 100) == 3
    from grpo_theory.lm.budget import memory as M

    d, b = score_memory(minimal)
    budget = M.chunk_bytes(d, 5, dtype_bytes=b)
    assert ModelOptions(memory_budget=budget).resolve_chunk(minimal, 100) == 5
    assert resolve_chunk(minimal, None, 100, budget) == 5


def test_the_command_line_builds_the_options_once():
    from grpo_theory.experiments import cli

    args = cli._parser(cli._experiments()).parse_args(
        ["advise", "--prompts", "p.jsonl", "--memory-budget", "1.5GiB", "--chunk", "4",
         "--dtype", "bfloat16", "--pad-id", "0"])
    assert cli._advise_options(args) == ModelOptions(3 * 2**29, 4, "bfloat16", 0)
    args = cli._parser(cli._experiments()).parse_args(
        ["advise", "--prompts", "p.jsonl", "--pad-embedding", "trained"])
    assert cli._advise_options(args) == ModelOptions(pad_embedding="trained")
    for opt, bad, msg in [("--chunk", "0", "--chunk must be an integer >= 1"),
                          ("--pad-id", "-2", "--pad-id must be an integer >= 0")]:
        args = cli._parser(cli._experiments()).parse_args(
            ["advise", "--prompts", "p.jsonl", opt, bad])
        with pytest.raises(ValueError, match=msg):
            cli._advise_options(args)


# --- the record -------------------------------------------------------------------------------

def _record(seed=0, m=5, n=4, d=3):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 3, size=(m, n)).astype(float)
    s = rng.normal(size=(m, n, d))
    ghat = np.einsum("ai,aid->ad", z, s) / n
    return RolloutStatistics(z, np.sum(s * s, 2), np.sum(ghat**2, 1), ghat @ ghat.sum(0),
                             n_params=d), s


def test_estimate_from_a_record_equals_from_its_arrays_exactly():
    rec, s = _record()
    a = estimate_from_rollouts(rec)
    b = estimate_from_rollouts(rec.rewards, sq_norms=rec.sq_norms, mean_sq=rec.mean_sq,
                               mean_dot=rec.mean_dot)
    np.testing.assert_array_equal(a.theta, b.theta)
    np.testing.assert_array_equal(a.cov, b.cov)
    np.testing.assert_allclose(a.theta, estimate_from_rollouts(rec.rewards, s).theta,
                               rtol=1e-10, atol=1e-12)
    assert (rec.n_prompts, rec.n_samples) == (5, 4)
    with pytest.raises(ValueError, match="RolloutStatistics record: give no scores"):
        estimate_from_rollouts(rec, sq_norms=rec.sq_norms)
    with pytest.raises(ValueError, match="mean_sq must have shape"):
        estimate_from_rollouts(dataclasses.replace(rec, mean_sq=rec.mean_sq[:3]))


def test_the_record_is_a_pytree_with_static_sizes():
    rec, _ = _record()
    leaves, tree = jax.tree_util.tree_flatten(rec)
    assert len(leaves) == 4  # responses None: no leaf
    twice = jax.tree_util.tree_map(lambda v: 2 * v, rec)
    assert type(twice) is RolloutStatistics and twice.n_params == 3
    np.testing.assert_array_equal(twice.rewards, 2 * rec.rewards)
    assert set(rec.as_dict()) == {"rewards", "sq_norms", "mean_sq", "mean_dot", "n_params"}


def test_the_jax_route_returns_the_record(minimal):
    x = minimal.encode(["1+2=", "3+4=", "5-1="])

    def reward(rows, y):
        return (np.asarray(y)[:, 0] % 2 == 0) + 0.5 * np.asarray(rows)

    st = S.lm_rollout_statistics(minimal, x, reward, 3, 0, 2, chunk=4)
    assert type(st) is RolloutStatistics and st.responses.shape == (3, 3, 2)
    assert st.chunk == 4 and st.n_params == minimal.dim
    a = estimate_from_rollouts(st)
    b = estimate_from_rollouts(st.rewards, sq_norms=st.sq_norms, mean_sq=st.mean_sq,
                               mean_dot=st.mean_dot)
    np.testing.assert_array_equal(a.theta, b.theta)
    with pytest.raises(ValueError, match="give options or"):
        S.lm_rollout_statistics(minimal, x, reward, 3, 0, 2, chunk=4,
                                options=ModelOptions(chunk=4))
