# CultureKAR: the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
KAR := $(VENV)/bin/kar
STAMP := $(VENV)/.installed
DEMO_KB ?= data/demo/culturebase

.PHONY: demo test install bench clean

$(STAMP): pyproject.toml package-lock.json
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install torch==2.13.0
	$(PIP) install -e ".[dev]" "transformers<5"
	if command -v npm >/dev/null 2>&1; then npm ci --no-audit --no-fund; else echo "npm not found: the browser test will skip"; fi
	touch $(STAMP)

install: $(STAMP)

DEMO_ENV := KAR_DATA_DIR=data/demo HF_HUB_OFFLINE=1
DEMO_QUERIES := "Zhuge Liang" "诸葛亮" "神烦狗" "never gonna give you up" "我从未见过如此厚颜无耻之人" "a shiba inu dog with comic sans text"

# The demo builds its own CultureBase (data/demo/culturebase), grounds six queries and explains the four
# example memes offline (no VLM, no internet), then prints the next commands to type.
demo: $(STAMP)
	rm -rf $(DEMO_KB)
	$(DEMO_ENV) $(KAR) kb import examples/culturebase_sample.jsonl --kb $(DEMO_KB)
	$(DEMO_ENV) $(KAR) kb stats --kb $(DEMO_KB)
	@for q in $(DEMO_QUERIES); do $(DEMO_ENV) $(KAR) kb search "$$q" --top-k 3 --kb $(DEMO_KB) || exit 1; done
	@for img in examples/images/*.png; do $(DEMO_ENV) $(KAR) explain "$$img" --kb $(DEMO_KB) || exit 1; done
	@echo
	@echo "Demo done: a CultureBase of the sample entities in $(DEMO_KB); the four memes above were grounded"
	@echo "and searched offline, without a VLM (so no explanation was written). Next:"
	@echo
	@echo "  source $(VENV)/bin/activate               # puts kar on PATH"
	@echo "  export KAR_KB_PATH=$(DEMO_KB)   # the KB the demo built (or pass --kb to each command)"
	@echo "  kar explain examples/images/doge_such_culture.png"
	@echo
	@echo "Then the quickstarts in README.md: a VLM, the API with curl, a crawl, an ablation."

test: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) bench/grounding.py

clean:
	rm -rf $(VENV) data/demo
