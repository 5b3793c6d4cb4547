# kvpilot developer targets. `make run` and `make test` work on a fresh
# machine with Go and Python 3.11 installed; everything else they need comes
# from the Go module proxy and, for the Python side, from pip into .venv.

GO        ?= go
PKGS      ?= ./...
BIN       := bin/kvpilot
BENCH_BIN := bin/kvpilot-bench
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
PYTHON    ?= python3
VENV      := .venv
PY        := $(VENV)/bin/python
PYREQS    := sdk/python/requirements.txt
COMMIT    := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
VERSION   := $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: all build run test test-go test-py test-dynamo py-env bench lint verify proto ptx ptx-check fuzz clean demo

all: build

## build: compile the kvpilot command and kvpilot-bench, the benchmark
## scenarios `kvpilot bench` runs from beside it (no cgo), into bin/
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN) ./host/cmd/kvpilot
	CGO_ENABLED=0 $(GO) build -o $(BENCH_BIN) ./host/cmd/kvpilot-bench

## run: start the host on embedded defaults (Ctrl-C stops it)
run: build
	./$(BIN) serve

## demo: real agent traces resent in full through the front door to the
## reference engine's HTTP server: a prefix cache, a prefix cache given the
## same edits, and kvpilot with its four built-in policies, with a table of
## what the edits cost each and what the directives saved
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/refengine ./examples/refengine/cmd/refengine
	$(GO) run ./examples/demo --kvpilot ./$(BIN) --config examples/demo/kvpilot.yaml

## test: the whole suite: Go (race detector and invariant checks on), then
## the Python SDK, the vLLM connector and the real-model engine under pytest
test: test-go test-py

test-go:
	$(GO) test -race -tags invariants -timeout 20m $(PKGS)

## test-py: pytest against a real host built from this tree
test-py: py-env build
	KVPILOT_BIN=$(CURDIR)/$(BIN) $(PY) -m pytest -q -rs sdk/python/tests

## test-dynamo: only the Dynamo interop tests (sdk/python/tests/test_dynamo_*.py,
## against ai-dynamo-runtime from the lock; make test runs them too)
test-dynamo: py-env build
	KVPILOT_BIN=$(CURDIR)/$(BIN) $(PY) -m pytest -q -rs sdk/python/tests/test_dynamo_*.py

## py-env: the Python environment in .venv: every package pinned in
## sdk/python/requirements.txt (a full lock, installed without resolving),
## then the kvpilot package itself, editable
py-env: $(VENV)/.installed

$(VENV)/.installed: $(PYREQS) sdk/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r $(PYREQS)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e sdk/python
	touch $@

## bench: Go benchmarks for every package (one round each)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## lint: formatting and vet (Go), ruff (Python)
lint: py-env
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags invariants $(PKGS)
	$(VENV)/bin/ruff check sdk/python
	$(VENV)/bin/ruff format --check sdk/python

## verify: lint, plus generated code and go.mod up to date
verify: lint
	$(GO) mod tidy -diff
	@if [ -x sdk/proto/gen.sh ] && command -v protoc >/dev/null; then sdk/proto/gen.sh && git diff --exit-code -- sdk/proto; fi
	$(GO) generate ./sdk/errcode && git diff --exit-code -- sdk/errcode sdk/python/kvpilot/_errcodes.py

## proto: regenerate the gRPC code: Go under sdk/proto, Python under
## sdk/python/kvpilot/v1 (both committed)
proto: py-env
	sdk/proto/gen.sh
	PYTHON=$(CURDIR)/$(PY) sdk/python/gen_proto.sh

## ptx: regenerate the committed PTX from kernels/cuda/*.cu (needs nvcc)
ptx:
	kernels/cuda/gen-ptx.sh

## ptx-check: validate the committed PTX for sm_90 (needs ptxas)
ptx-check:
	kernels/cuda/check-ptx.sh

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin $(VENV)
