# Two set-up commands: `make run` and `make test`. Both create .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PROFILE ?= local
# pytest workers for make test: a test file per worker. The suite mostly waits (servers starting, Ray actors,
# timeouts): one worker kept 2 cores about 55% busy.
TEST_WORKERS ?= 2

# The isaaclab backend's own environments (Python 3.12; the platform's is 3.11): Isaac Lab, and the MJCF -> USD
# converter, whose MuJoCo is newer than the one Newton pins (docs/isaaclab.md)
# a pyenv 3.12 where there is one (its python3.12 shim fails outside a folder that selects it), else PATH's
PYTHON312    ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
ISAACLAB_VENV := .venv-isaaclab
USD_VENV      := .venv-usd
ROBOT         ?= lightbot0_like

.PHONY: run test test-slow test-faults test-isaaclab isaaclab robot-usd lint bench bench-faults pictures clean-runs

$(STAMP): pyproject.toml constraints.txt setup.py llp/sim/_raycast.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the CPU build of torch first (a local wheel on the reference machine): with it in place,
	# no dependency can pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	# Debian's packages: EGL through Mesa for offscreen video (llp play), Chromium for the UI tests, PostgreSQL
	# for the MLflow backend-store test
	@need=""; ldconfig -p | grep -q libEGL_mesa || need="$$need libegl-mesa0 libegl1"; \
	command -v chromium >/dev/null || need="$$need chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$$need postgresql"; \
	if [ -n "$$need" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need; \
	  else echo "make: please install Debian's$$need (apt-get install$$need)"; exit 1; fi; \
	fi
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/llp run --profile $(PROFILE)

test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not isaaclab" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -n $(TEST_WORKERS) --dist loadfile --durations=10

test-faults: $(STAMP)
	$(BIN)/python -m pytest -q -m fault --ignore tests/test_cluster_profile.py -n $(TEST_WORKERS) --dist loadfile \
	  --no-loadscope-reorder \
	  --durations=15

# Isaac Lab 3 without Isaac Sim or Kit: Newton physics (about 7.8 GB, most of it the CUDA libraries of PyPI's torch)
$(ISAACLAB_VENV)/.installed:
	test -x $(ISAACLAB_VENV)/bin/python || $(PYTHON312) -m venv $(ISAACLAB_VENV)
	$(ISAACLAB_VENV)/bin/python -m pip install -q isaaclab==3.0.0
	touch $@

# the height-map ray caster (depth images) built in this checkout for Isaac Lab's Python too: the env server runs
# our task there
ISAACLAB_RAYCAST := build/.raycast-isaaclab
$(ISAACLAB_RAYCAST): $(ISAACLAB_VENV)/.installed llp/sim/_raycast.c
	$(ISAACLAB_VENV)/bin/python setup.py -q build_ext --inplace
	touch $@

isaaclab: $(ISAACLAB_VENV)/.installed $(ISAACLAB_RAYCAST)

test-isaaclab: $(STAMP) $(ISAACLAB_VENV)/.installed $(ISAACLAB_RAYCAST)
	$(BIN)/python -m pytest -q -m isaaclab

# re-make llp/sim/assets/usd/$(ROBOT).usdc from the robot's MJCF, checked against it
robot-usd:
	test -x $(USD_VENV)/bin/python || $(PYTHON312) -m venv $(USD_VENV)
	$(USD_VENV)/bin/python -m pip install -q mujoco-usd-converter==0.8.0
	PYTHONPATH=. $(USD_VENV)/bin/python -m llp.sim.isaaclab.robot_usd $(ROBOT)

lint: $(STAMP)
	$(BIN)/ruff check llp flows actors stages infra tests

bench: $(STAMP)
	$(BIN)/llp bench sim --json
	$(BIN)/llp bench learner --json
	$(BIN)/llp bench rllib --json
	$(BIN)/llp bench pipeline --json

bench-faults: $(STAMP)
	$(BIN)/llp bench faults --json

pictures: $(STAMP)
	$(BIN)/llp render terrain --out docs/terrain.png
	$(BIN)/llp render depth --tile-type climb --out docs/depth_climb.png
	$(BIN)/llp render depth-noise --tile-type climb --out docs/depth_noise_climb.png

clean-runs:
	rm -rf runs
