"""The CLI as a user meets it: every failure one line ``grpo-theory: error: ...`` with exit code
2 (GRPO_THEORY_DEBUG=1 re-raises), the memory / dtype / pad-id / chat-template options of
``advise`` and of the studies with ``--model``, and ``advise`` on a tiny Hugging Face
checkpoint with a chat template."""

import dataclasses
import json

import jax
import pytest

from support.hf_checkpoint import PAD, write_checkpoint

from grpo_theory.advisor import advise as A
from grpo_theory.experiments import cli
from grpo_theory.lm.checkpoints import from_pretrained, hf
from grpo_theory.lm.budget import memory as M
from grpo_theory.lm.model import ModelConfig, init_params
from grpo_theory.lm.warmup import save_checkpoint

TEMPLATE = ("{% for m in messages %}<|eot|>{{ m['role'] }} {{ m['content'] }}<|im_end|>"
            "{% endfor %}{% if add_generation_prompt %}<|eot|>assistant {% endif %}")
WORDS = ["a b c", "d e", "f g h i", "j", "k l"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Prompts, a tiny package checkpoint and a tiny Hugging Face checkpoint with a chat
    template."""
    d = tmp_path_factory.mktemp("cli")
    (d / "words.jsonl").write_text("".join(json.dumps({"question": w, "answer": 1}) + "\n"
                                           for w in WORDS))
    (d / "sums.jsonl").write_text("".join(json.dumps({"question": f"{a}+{a}", "answer": 2 * a})
                                          + "\n" for a in range(5)))
    cfg = dict(d_model=16, n_layers=1, n_heads=2)
    save_checkpoint(d / "tiny.npz", init_params(jax.random.PRNGKey(0), ModelConfig(**cfg)),
                    dict(config=cfg))
    cfgs, _ = write_checkpoint(d / "hf", shards=1)
    cfgs["num_hidden_layers"] = 1  # one layer: less to compile
    (d / "hf" / "config.json").write_text(json.dumps(cfgs))
    (d / "hf" / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return d


def _one_line_error(capsys, argv, *needles):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, (argv, err)
    assert len(err) == 1 and err[0].startswith("grpo-theory: error: "), err
    for n in needles:
        assert n in err[0], (n, err[0])
    return err[0]


def test_bad_model_path_and_memory_budget_are_one_line(files, tmp_path, capsys):
    advise = ["advise", "--prompts", str(files / "sums.jsonl"), "--out", str(tmp_path / "o"),
              "--no-progress"]
    _one_line_error(capsys, advise + ["--model", str(tmp_path / "nope")], "neither one of")
    _one_line_error(capsys, advise + ["--model", str(files / "tiny.npz"), "--memory-budget",
                                      "4XB"], "--memory-budget must be a number", "'4XB'")
    _one_line_error(capsys, advise + ["--model", str(files / "tiny.npz"), "--memory-budget",
                                      "1KB"], "--memory-budget", "even chunk 1 needs about")
    _one_line_error(capsys, advise + ["--model", str(files / "tiny.npz"), "--chunk", "0"],
                    "chunk must be an integer >= 1")
    _one_line_error(capsys, advise + ["--model", str(files / "tiny.npz"), "--dtype",
                                      "bfloat16"], "apply to Hugging Face checkpoint")
    # the studies
    _one_line_error(capsys, ["lm-mse", "--model", str(tmp_path / "nope"), "--out",
                             str(tmp_path / "r")], "is neither a directory nor a .gguf")
    _one_line_error(capsys, ["lm-rank", "--model", str(files / "hf"), "--memory-budget", "lots",
                             "--out", str(tmp_path / "r")], "--memory-budget must be a number")
    _one_line_error(capsys, ["lm-groupsize", "--dtype", "bfloat16", "--pad-id", "1", "--out",
                             str(tmp_path / "r")], "--dtype, --pad-id apply to a Hugging Face "
                                                   "model only")
    _one_line_error(capsys, ["lm-mse", "--model", str(files / "hf"), "--pad-id", "-1", "--out",
                             str(tmp_path / "r")], "--pad-id must be a token id >= 0")
    assert not (tmp_path / "o").exists() and not (tmp_path / "r").exists()


def test_every_exception_is_one_line_unless_debugging(monkeypatch, capsys):
    def fail(exc):
        def run(argv=None):
            raise exc
        monkeypatch.setattr(cli, "_main", run)

    fail(jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 8 bytes\n"
                                    "more\nlines"))
    _one_line_error(capsys, [], "out of memory (JaxRuntimeError)", "--memory-budget", "--chunk")
    fail(MemoryError())
    _one_line_error(capsys, [], "out of memory (MemoryError)")
    fail(FileNotFoundError(2, "No such file or directory", "/x/config.json"))
    _one_line_error(capsys, [], "No such file or directory: '/x/config.json'")
    fail(TypeError("reward must be callable"))
    _one_line_error(capsys, [], "reward must be callable")
    fail(RuntimeError("boom\n  at line 2"))
    _one_line_error(capsys, [], "RuntimeError: boom at line 2", "GRPO_THEORY_DEBUG=1")
    monkeypatch.setenv("GRPO_THEORY_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        cli.main([])
    fail(KeyboardInterrupt())
    assert cli.main([]) == 130


def test_help_states_the_options(capsys):
    for argv in (["advise", "--help"], ["lm-mse", "--help"], ["lm-rank", "--help"],
                 ["lm-groupsize", "--help"]):
        with pytest.raises(SystemExit) as e:
            cli.main(argv)
        assert e.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        for opt in ("--memory-budget", "--chunk", "--dtype", "--pad-id", "GRPO_THEORY_DEBUG=1",
                    "chat template"):
            assert opt in text, (argv, opt)
    with pytest.raises(SystemExit):
        cli.main(["advise", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-chat-template" in text and "raw question text" in text


def test_advise_hf_chat_template_memory_budget(files, tmp_path, monkeypatch, capsys):
    """advise on a checkpoint with a chat template: prompts rendered by it (and said so), the
    chunk from --memory-budget, --dtype and --pad-id reach the loader, progress lines for
    every phase; chat_template=False (--no-chat-template) or a checkpoint without a template:
    the raw text, said so."""
    seen = {}
    load, encode = A.load_policy, hf.HFPolicy.encode

    def spy_load(spec, options, **k):
        seen["load"] = options
        seen["policy"] = load(spec, options, **k)
        return seen["policy"]

    def spy_encode(self, texts):
        seen["texts"] = list(texts)
        return encode(self, texts)

    monkeypatch.setattr(A, "load_policy", spy_load)
    monkeypatch.setattr(hf.HFPolicy, "encode", spy_encode)
    d = sum(x.size for x in jax.tree_util.tree_leaves(from_pretrained(files / "hf").params))
    budget = M.chunk_bytes(d, 5, dtype_bytes=4)
    code = cli.main(["advise", "--prompts", str(files / "words.jsonl"), "--model",
                     str(files / "hf"), "--n-prompts", "3", "--n-samples", "3",
                     "--response-len", "2", "--budgets", "16", "--group-sizes", "2,4",
                     "--no-figures", "--reward", "grpo_theory.advisor.advise:exact_answer_reward",
                     "--out", str(tmp_path / "a"), "--memory-budget", str(budget),
                     "--dtype", "float32", "--pad-id", str(PAD)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert (seen["load"].dtype, seen["load"].pad_id) == ("float32", PAD)
    assert all(t.startswith("<|eot|>user ") and t.endswith("<|eot|>assistant ")
               for t in seen["texts"])
    assert {t[len("<|eot|>user "):].split("<|im_end|>")[0] for t in seen["texts"]} <= set(WORDS)
    assert "prompts: each question as a user message in the checkpoint's chat template" in cap.out
    # the budget of 5 per-sample scores holds all 9 sequences' activations on the ghost route
    assert "9 responses per block of the score pass" in cap.out
    # progress of every phase (plain lines: stderr is not a terminal)
    for phase in ("loading the model 1/1", "sampling responses 1/1", "per-sample scores 1/1",
                  "advise: pass 2 3/3 prompts"):
        assert phase in cap.err, (phase, cap.err)
    # the loaded policy again (its compiled functions): raw text, with and without a template
    pol = seen["policy"]
    kw = dict(n_prompts=3, n_samples=3, response_len=2, budgets=(16,), group_sizes=(2,),
              progress=False, chunk=2)
    for p, chat, said in [(pol, False, "raw question text (--no-chat-template)"),
                          (dataclasses.replace(pol, chat_template=None), True,
                           "raw question text (the checkpoint has no chat template)")]:
        res = A.advise(files / "words.jsonl", p, A.exact_answer_reward, chat_template=chat,
                       **kw)
        assert set(seen["texts"]) <= set(WORDS)
        assert res.prompt_format == said and res.chunk == 2
        assert f"prompts: {said}" in res.text() and "2 responses per block of the score pass" in res.text()


def test_study_model_options_reach_settings_and_cells(files):
    """--memory-budget / --chunk / --dtype / --pad-id of a study with --model: Settings fields
    and the model cells' configuration; bad Settings values are ValueErrors naming the field;
    lm-rank's chunk holds whole groups and refuses a budget below one group."""
    from grpo_theory.lm.budget.options import score_memory
    from grpo_theory.experiments.registry import experiments
    from grpo_theory.studies import lm_mse
    from grpo_theory.studies.lm_rank import study as lm_rank

    exps = experiments()
    args = cli._parser(exps).parse_args(["lm-mse", "--model", str(files / "hf"),
                                         "--memory-budget", "1.5GiB", "--chunk", "3",
                                         "--dtype", "bfloat16", "--pad-id", str(PAD)])
    over = cli._model_overrides(args)
    assert over == dict(model_memory_budget=3 * 2**29, model_chunk=3, model_dtype="bfloat16",
                        model_pad_id=PAD)
    s = cli._model_setting(exps, "lm-mse", "quick", args.model, over)
    (c,) = exps["lm-mse"].cell_list(s)
    assert {k: c.config[k] for k in ("memory_budget", "chunk", "dtype", "pad_id")} == dict(
        memory_budget=3 * 2**29, chunk=3, dtype="bfloat16", pad_id=PAD)
    # without the options: the default setting name (the budget's chunk is chosen in the cell)
    s = cli._model_setting(exps, "lm-rank", "quick", str(files / "hf"))
    assert s.model_chunk is None and s.model_dtype == "float32"
    for field, bad in [("model_chunk", 0), ("model_memory_budget", -1),
                       ("model_dtype", "float16"), ("model_pad_id", -2)]:
        with pytest.raises(ValueError, match=field):
            dataclasses.replace(lm_mse.SETTINGS["quick"], **{field: bad})
    pol = from_pretrained(files / "hf")
    d, b = score_memory(pol)
    cfg = dict(model_chunk=None, model_memory_budget=M.chunk_bytes(d, 6, dtype_bytes=b))
    assert lm_rank._model_chunk(pol, cfg, 4, 100) == 6
    assert lm_rank._model_chunk(pol, dict(cfg, model_chunk=2), 4, 100) == 4
    with pytest.raises(ValueError, match="--memory-budget: one group of 8 per-sample scores"):
        lm_rank._model_chunk(pol, cfg, 8, 100)


def test_phase_progress_bars_and_lines():
    """advise's phases: a tqdm bar each on a terminal, start and step lines otherwise, silent
    when disabled; unknown phases (the gradients, reported by __call__) are ignored."""
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, log, off = Tty(), io.StringIO(), io.StringIO()
    for stream, on in ((tty, True), (log, True), (off, False)):
        p = A._Progress(on, stream)
        for phase, total in (("loading", 1), ("sampling", 1), ("scores", 3), ("gradients", 2)):
            for i in range(total + 1):
                p.stage(phase, i, total)
    assert off.getvalue() == ""
    for desc in ("advise: loading the model", "advise: sampling responses",
                 "advise: per-sample scores"):
        assert desc in tty.getvalue() and f"{desc} ..." in log.getvalue()
    assert "3/3" in tty.getvalue() and "gradients" not in tty.getvalue() + log.getvalue()
    lines = log.getvalue().splitlines()
    assert [ln.split(" (")[0] for ln in lines if "per-sample" in ln] == [
        "advise: per-sample scores ...", "advise: per-sample scores 1/3",
        "advise: per-sample scores 2/3", "advise: per-sample scores 3/3"]
