# CultureKAR: the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
KAR := $(VENV)/bin/kar
STAMP := $(VENV)/.installed
DEMO_KB ?= data/demo/culturebase

.PHONY: demo test install bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[dev]" "transformers<5"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	rm -rf $(DEMO_KB)
	KAR_KB_PATH=$(DEMO_KB) HF_HUB_OFFLINE=1 $(KAR) kb import examples/culturebase_sample.jsonl
	KAR_KB_PATH=$(DEMO_KB) HF_HUB_OFFLINE=1 $(PY) -m services.demo

test: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/grounding.py

clean:
	rm -rf $(VENV) data/demo
