# The two commands: `make reproduce` and `make test`. Both create .venv when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv reproduce reproduce-full test bench docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,dask,hf,docs,torch]"
	touch $(STAMP)

venv: $(STAMP)

reproduce: $(STAMP)
	$(VENV)/bin/grpo-theory reproduce --quick --out results

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -n 2 -q --durations=30

# the full studies (hours on 2 cores; every sweep resumes cell by cell)
reproduce-full: $(STAMP)
	$(VENV)/bin/grpo-theory reproduce --full --out results

# the documentation site -> site/ (open site/index.html)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/bench_mc_gradients.py

clean:
	rm -rf $(VENV) results/.cache site
