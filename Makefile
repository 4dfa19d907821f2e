# The two commands of the README: `make demo` and `make test`. Both create .venv with the
# interpreter named by PYTHON (Python 3.11 or newer); `make test` also builds .venv-compiled.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# kgpu as users install it, its scheduling core compiled (setup.py): the suite runs on it
# too, and the benchmarks' figures are taken on it. .venv holds an editable, plain build.
CVENV := .venv-compiled
CBIN := $(CVENV)/bin
SOURCES := setup.py pyproject.toml $(shell find kgpu -name '*.py' -o -name '*.yaml')

.PHONY: demo test test-compiled compiled lint typecheck podresources-api clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

$(CBIN)/python:
	$(PYTHON) -m venv $(CVENV)
	$(CBIN)/python -m pip install --quiet --upgrade pip

$(CVENV)/.deps: pyproject.toml | $(CBIN)/python
	KGPU_COMPILE=0 $(CBIN)/python -m pip install --quiet '.[dev]'
	touch $@

$(CVENV)/.installed: $(SOURCES) $(CVENV)/.deps
	$(CBIN)/python -m pip install --quiet --no-deps --force-reinstall .
	touch $@

compiled: $(CVENV)/.installed
	@$(CBIN)/kgpu --version

demo: $(VENV)/.installed
	$(BIN)/kgpu demo --out out/demo

lint: $(VENV)/.dev-installed
	$(BIN)/ruff check kgpu tests bench
	$(BIN)/ruff format --check kgpu tests bench
	$(BIN)/lint-imports

typecheck: $(VENV)/.dev-installed
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/python -m pytest
	$(MAKE) --no-print-directory test-compiled

# pytest from the compiled venv's own script, with the tests appended to sys.path: the
# installed (compiled) kgpu is imported, not the source tree's. The whole suite, the
# end-to-end tests included (KGPU_E2E_KUBECONFIG comes from the environment; the tests
# start `kgpu run` with `python -P`, so it too is the compiled one). Without a C compiler
# the install is plain Python: this says so and, under CI=true, fails; with one, a plain
# install means compiling failed, which fails the target.
test-compiled: $(CVENV)/.installed
	@if $(CBIN)/python -P -c 'import kgpu, sys; sys.exit(not kgpu.core_compiled())'; then \
		KGPU_EXPECT_COMPILED=1 $(CBIN)/pytest --import-mode=append -p no:cacheprovider; \
	elif command -v cc >/dev/null 2>&1; then \
		echo "compiled core: compiling failed although a C compiler is here; see why with" \
			"$(CBIN)/python -m pip install -v --no-deps --force-reinstall ." >&2; \
		exit 1; \
	elif [ "$$CI" = true ]; then \
		echo "compiled core: CI=true and no C compiler (cc) is here, so the compiled build" \
			"was not built and its tests cannot run; install one (apt-get install gcc)" >&2; \
		exit 1; \
	else \
		echo "compiled core: not built here (no C compiler, cc); its tests are skipped" \
			"(under CI=true this fails)"; \
	fi

# The Python modules of the kubelet's pod-resources API (kgpu/agent/podresources/*/api_pb2*.py),
# generated from the .proto files beside them. grpcio-tools is needed only here, so it is
# installed into .venv for this and is no dependency of kgpu. The proto paths are given from
# the repository root, so the generated gRPC stubs import their messages through the package
# (kgpu.agent.podresources.v1.api_pb2) and work installed.
PODRESOURCES_PROTOS := kgpu/agent/podresources/v1/api.proto kgpu/agent/podresources/v1alpha1/api.proto

podresources-api: $(VENV)/.dev-installed
	$(BIN)/python -m pip install --quiet grpcio-tools
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --grpc_python_out=. $(PODRESOURCES_PROTOS)

clean:
	rm -rf $(VENV) $(CVENV) out .mypy_cache .pytest_cache .ruff_cache
