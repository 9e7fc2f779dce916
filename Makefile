# Two entry points for a fresh machine: `make train` (the default run, end to end) and `make test`.
# Both create .venv and install the project (torch, transformers, prefect, mlflow, dvc, ...) first.
PYTHON ?= python3
VENV ?= .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

.PHONY: setup train test
setup: $(STAMP)

train: $(STAMP)
	$(VENV)/bin/coevo train

test: $(STAMP)
	$(VENV)/bin/python -m pytest
