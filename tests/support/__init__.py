"""Builders shared by the test folders (importable as ``support`` from every one of them).

``tests/`` is on ``sys.path`` through the ``pythonpath`` entry of ``[tool.pytest.ini_options]``,
so a test imports what it needs from here, never from another test module:

* :mod:`support.hf_checkpoint`: tiny Hugging Face checkpoints (``write_checkpoint``) and the
  independent float64 NumPy forward (``reference_logits``, ``reference_log_prob``);
* :mod:`support.gguf_checkpoint`: tiny GGUF files and their Hugging Face folders
  (``config``, ``write_gguf``, ``write_folder``);
* :mod:`support.objectives`: the objective after one hand-computed training step;
* :mod:`support.toy_experiment`: the test-only experiments ``toy`` and ``toy-slow`` of the runner,
  store and executor tests (workers import it by name);
* :mod:`support.train_reference`: the training-loop cases pinned in
  ``tests/optim/results/train_reference.npz``.

Pytest fixtures live in ``conftest.py`` files instead (``tests/conftest.py`` for every test).
"""
