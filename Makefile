# Two commands on a fresh machine: `make demo` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
# The CPU build of torch lies on disk for pip; name it exactly so pip never pulls a CUDA build.
TORCH_PIN ?= torch==2.13.0
PACKAGES := -e ".[dev,torch]" -e "services/kernel-service[ray]" $(foreach r,$(wildcard runners/*-runner),-e $(r))
STAMP  := $(VENV)/.installed
# The RL environments (environments/*): verifiers is heavy (~565 MB), so only install-rl brings it in.
ENVS   := $(wildcard environments/*/pyproject.toml)
RL_STAMP := $(VENV)/.installed-rl

DOCKER ?= docker
TAG    ?= latest
# Extra arguments to every `$(DOCKER) build` here and in each runner (e.g. --pull=never, --network=host,
# --build-arg TORCH_PIP_ARGS="torch==X.Y.Z --index-url URL"), exported to the runners' sub-makes.
DOCKER_BUILD_ARGS ?=
export DOCKER_BUILD_ARGS
# The GPU service image (services/kernel-service/Dockerfile) and its build context: wheels of our two
# packages built from this checkout, and their public requirements.
SERVICE_IMAGE   ?= kernel-service
SERVICE_CONTEXT := services/kernel-service/build/docker

.PHONY: install install-rl test test-rl test-gpu lint typecheck demo bench clean \
	docker-context-service docker-build-service docker-build-runners test-images

install: $(STAMP)

$(STAMP): pyproject.toml services/kernel-service/pyproject.toml $(wildcard runners/*-runner/pyproject.toml)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PIN)
	@# Our packages' former names (benchmark-runner, kernel-service) and their metadata in the tree: a
	@# venv made before the rename would still list them, and the first one is a stranger's on the index.
	$(PY) -m pip uninstall -q -y benchmark-runner kernel-service 2>/dev/null || true
	rm -rf src/benchmark_runner.egg-info services/kernel-service/src/kernel_service.egg-info
	$(PY) -m pip install -q $(PACKAGES)
	touch $(STAMP)

install-rl: $(RL_STAMP)

$(RL_STAMP): $(STAMP) $(ENVS)
	$(PY) -m pip install -q $(TORCH_PIN) $(foreach e,$(ENVS),-e $(dir $(e)))
	touch $(RL_STAMP)

# The root suite, then each runner's own suite from its own directory (as in its generated repo).
test: install
	$(BIN)/pytest -m "not gpu" -q --durations=25
	set -e; for r in $(wildcard runners/*-runner); do (cd $$r && $(abspath $(BIN))/pytest -m "not gpu" -q -p no:cacheprovider); done
	$(MAKE) test-rl

# The RL environments' suites (vf-eval against the fake model, the embedded CPU kernel service).
test-rl: install-rl
	$(BIN)/pytest -q -p no:cacheprovider $(foreach e,$(ENVS),$(dir $(e))tests)

test-gpu: install
	$(BIN)/pytest -m gpu -q

lint: install
	$(BIN)/ruff check src services runners tests bench environments
	$(BIN)/ruff format --check src services runners tests bench environments

typecheck: install
	$(BIN)/mypy src services/kernel-service/src
	$(BIN)/mypy $(patsubst %/__init__.py,%,$(wildcard environments/*/*/__init__.py))

demo: install
	$(PY) -m benchmark_runner.demo

docker-context-service: install
	$(PY) -m benchmark_runner.docker_context --out $(SERVICE_CONTEXT) -- . services/kernel-service

docker-build-service: docker-context-service
	$(DOCKER) build $(DOCKER_BUILD_ARGS) -t $(SERVICE_IMAGE):$(TAG) services/kernel-service

# Each committed runner's image (`make docker-build` in its directory, with this checkout's venv).
docker-build-runners: install
	set -e; for r in $(wildcard runners/*-runner); do $(MAKE) -C $$r docker-build VENV=$(abspath $(VENV)) TAG=$(TAG) DOCKER="$(DOCKER)"; done

# The images really built and run with podman (no daemon): bases pulled or made with debootstrap, a CPU job
# in each runner image, `serve` in the service image with its isolation checked (scripts/test-images.sh).
test-images: install
	scripts/test-images.sh

bench: install
	$(PY) bench/framework_overhead.py

clean:
	rm -rf $(VENV) runs build services/kernel-service/build $(wildcard runners/*-runner/build)
