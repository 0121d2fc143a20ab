# The two commands of the README: `make run` and `make test`.
# `make run` installs what the default run needs (the core dependencies); `make test`
# adds the extras the tests drive (torch, LiteRT, scikit-learn, Ray, Optuna, ...).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# PYTHONWARNINGS: setuptools' editable-install banner is noise on a first run
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -e .
	@# model=ppocr_cls / ppocr_rec: PaddleOCR's trained networks ship in this wheel; only its
	@# ONNX files are read (never imported), so its OpenCV / Shapely dependencies are skipped
	$(PY) -m pip install -q --no-deps 'rapidocr-onnxruntime==1.4.4'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[test]'
	touch $@

.PHONY: install install-test run test test-fast lint readme-figures clean
install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

run: $(VENV)/.installed   ## set up and run the default pipeline
	$(PY) -m pipeline $(ARGS)

lint: $(VENV)/.installed-test
	$(PY) -m ruff check .

# TEST_WORKERS: pytest-xdist processes; two, one per core of this project's machines and CI
# (the suite takes half the time of one process: most tests wait on one subprocess)
TEST_WORKERS ?= 2

test: $(VENV)/.installed-test lint   ## set up and pass the tests
	$(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS)

test-fast: $(VENV)/.installed-test   ## the in-process tier: no subprocesses, services or fits
	$(PY) -m pytest -q -n $(TEST_WORKERS) -m "not slow" $(PYTEST_ARGS)

readme-figures: $(VENV)/.installed-test   ## the README's example figures (ARGS=--write rewrites)
	$(PY) docs/readme_figures.py $(ARGS)

clean:
	rm -rf outputs multirun .npuflow-cache
