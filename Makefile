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

.PHONY: all build run test test-go test-py test-dynamo test-sglang py-env sglang-env bench lint verify proto ptx ptx-check fuzz clean demo gpu-check

all: build

## build: compile the kvpilot command and kvpilot-bench, the benchmark
## scenarios `kvpilot bench` runs from beside it (no cgo), into bin/
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)" -o $(BIN) ./host/cmd/kvpilot
	CGO_ENABLED=0 $(GO) build -o $(BENCH_BIN) ./host/cmd/kvpilot-bench

## run: start the host on embedded defaults (Ctrl-C stops it)
run: build
	./$(BIN) serve

## demo: real agent traces resent in full through the front door to vLLM's
## CPU build serving SmolLM2-135M-Instruct (from .venv): a prefix cache, a
## prefix cache given the same edits, and kvpilot with its four built-in
## policies, with a table of what the edits cost each, what the directives
## saved, and how often the splice's greedy answer is the re-prefill's
## (--engine refengine: the reference engine, longer sessions in seconds)
demo: build py-env
	$(GO) run ./examples/demo --kvpilot ./$(BIN) --config examples/demo/kvpilot.yaml --python $(PY)

## test: the whole suite: Go (race detector and invariant checks on), then
## the Python SDK, the vLLM connector and the real-model engine under pytest,
## then the SGLang backend on SGLang's own cache code. The Python environment
## comes first: Go tests run the demo on vLLM and the README's real-model
## benchmark with it
test: py-env test-go test-py test-sglang

test-go:
	$(GO) test -race -tags invariants -timeout 20m $(PKGS)
	# The tests the race detector's and the invariant checker's allocations
	# and slowness would make meaningless (they skip under those flags).
	$(GO) test -count=1 -run 'TestRotateAllocatesNothing|TestMatchReusesBuffers|TestBenchIndexHasTargets|^TestRun$$' ./kernels ./host/cache ./host/cmd/kvpilot-bench ./host/bench/cachebench

## test-py: pytest against a real host built from this tree (the SGLang
## tests are test-sglang's)
test-py: py-env build
	KVPILOT_BIN=$(CURDIR)/$(BIN) $(PY) -m pytest -q -rs sdk/python/tests --ignore-glob='*/test_sglang_*'

## test-sglang: the SGLang backend (kvpilot.sglang) on SGLang 0.5.23's own
## radix cache and HiCache controller on CPU, workers in processes of their
## own, then Dynamo's RadixTree fed the events of the pages an SGLang worker
## wrote. SGLang's cache code is in .venv (requirements.txt); SGLANG_PY=
## .venv-sglang/bin/python runs them on SGLang's full stack (make sglang-env,
## examples/sglang/gpu-check.sh on a GPU)
SGLANG_PY ?= $(PY)

test-sglang: py-env build
	KVPILOT_BIN=$(CURDIR)/$(BIN) $(SGLANG_PY) -m pytest -q -rs sdk/python/tests/test_sglang_units.py sdk/python/tests/test_sglang_cache.py sdk/python/tests/test_sglang_pin.py sdk/python/tests/test_sglang_splice.py sdk/python/tests/test_sglang_nats.py sdk/python/tests/test_sglang_tp.py
	KVPILOT_BIN=$(CURDIR)/$(BIN) KVPILOT_SGLANG_PYTHON=$(CURDIR)/$(SGLANG_PY) $(PY) -m pytest -q -rs sdk/python/tests/test_sglang_dynamo.py

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

## sglang-env: SGLang's full serving stack in .venv-sglang (its kernels,
## flashinfer, its own torch 2.14.1, about 11 GB): every package pinned in
## sdk/python/requirements-sglang.txt, installed without resolving, then the
## kvpilot package, editable. Only for a GPU (examples/sglang/gpu-check.sh):
## make test runs SGLang's cache code from .venv
SGLANG_VENV := .venv-sglang
SGLANG_REQS := sdk/python/requirements-sglang.txt

sglang-env: $(SGLANG_VENV)/.installed

$(SGLANG_VENV)/.installed: $(SGLANG_REQS) sdk/python/pyproject.toml
	$(PYTHON) -m venv $(SGLANG_VENV)
	$(SGLANG_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -r $(SGLANG_REQS)
	$(SGLANG_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e sdk/python
	touch $@

## bench: Go benchmarks for every package (one round each)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-mooncake: Mooncake's distributed KV store, raw put/get of 2 MiB pages
## on loopback TCP (host/bench/mooncake), one JSON object; measured from
## Python in its own .venv-mooncake, as the store has no client a cgo-free
## host can link. MOONCAKE_PKG is the CPU build (the default CUDA build needs
## the NVIDIA driver); rm -rf .venv-mooncake after changing it
MOONCAKE_VENV ?= .venv-mooncake
MOONCAKE_PKG  ?= mooncake-transfer-engine-non-cuda==0.3.13.post1

.PHONY: bench-mooncake
bench-mooncake: $(MOONCAKE_VENV)/.installed
	$(MOONCAKE_VENV)/bin/python host/bench/mooncake/mooncake_bench.py --json

# --no-deps: the store binding imports nothing else, and this keeps the venv
# to the one pinned package.
$(MOONCAKE_VENV)/.installed:
	$(PYTHON) -m venv $(MOONCAKE_VENV)
	$(MOONCAKE_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps $(MOONCAKE_PKG)
	touch $@

## bench-stores: the shared-tier candidates in one run: bench tiers (JetStream,
## Redis when redis-server is installed, S3 on a SeaweedFS server built into
## .tools/ from the Go module proxy the first time, a few minutes), then
## bench-mooncake
SEAWEEDFS_VERSION ?= v0.0.0-20261109003541-7506e5f91cd6
TOOLS ?= .tools

.PHONY: bench-stores
bench-stores: build $(TOOLS)/weed
	PATH="$(CURDIR)/$(TOOLS):$$PATH" bin/kvpilot-bench tiers --json
	$(MAKE) -s bench-mooncake

# SeaweedFS's module has replace directives, which go install refuses: its
# source is downloaded and built in place.
$(TOOLS)/weed:
	mkdir -p $(TOOLS)
	src=$$(cd $$(mktemp -d) && $(GO) mod download -json github.com/seaweedfs/seaweedfs@$(SEAWEEDFS_VERSION) | sed -n 's/^.*"Dir": "\(.*\)",$$/\1/p'); \
	  rm -rf $(TOOLS)/seaweedfs && cp -r "$$src" $(TOOLS)/seaweedfs && chmod -R u+w $(TOOLS)/seaweedfs && \
	  cd $(TOOLS)/seaweedfs && CGO_ENABLED=0 $(GO) build -o $(CURDIR)/$(TOOLS)/weed ./weed

## lint: formatting and vet (Go), ruff and mypy (Python; mypy's settings
## are sdk/python/pyproject.toml's [tool.mypy])
lint: py-env
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags invariants $(PKGS)
	$(VENV)/bin/ruff check sdk/python host/bench/mooncake host/bench/python
	$(VENV)/bin/ruff format --check sdk/python host/bench/mooncake host/bench/python
	$(VENV)/bin/mypy --config-file sdk/python/pyproject.toml sdk/python/kvpilot host/bench/python/kvbench

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

## gpu-check: build, here, the CUDA paths' test binaries (no cgo, stripped)
## and kernels/cuda/gpu-check.sh into bin/gpu-check/, and pack them as
## bin/gpu-check.tar.gz (at most 64 MiB) for a GPU machine without network:
## there, unpack and run gpu-check/run.sh, which prints one JSON summary
## (the kernels against the CPU kernels bit for bit and against a
## device-to-device copy, the CUDA arena, its IPC handle and its page copies
## against pinned memory, and kvpilot bench rotate --device cuda). Run here,
## it reports that no GPU was found.
GPU_CHECK_PKGS := kernels/cudadrv kernels/cuda host/pool/cuda host/pool/tiers
gpu-check:
	rm -rf bin/gpu-check bin/gpu-check.tar.gz
	mkdir -p bin/gpu-check
	for p in $(GPU_CHECK_PKGS); do \
	  CGO_ENABLED=0 $(GO) test -c -ldflags "-s -w" -o bin/gpu-check/$$(echo $$p | tr / -).test ./$$p || exit 1; \
	done
	CGO_ENABLED=0 $(GO) build -ldflags "-s -w" -o bin/gpu-check/kvpilot-bench ./host/cmd/kvpilot-bench
	cp kernels/cuda/gpu-check.sh bin/gpu-check/run.sh
	tar -C bin -czf bin/gpu-check.tar.gz gpu-check
	@size=$$(du -b bin/gpu-check.tar.gz | cut -f1); echo "bin/gpu-check.tar.gz: $$size bytes"; \
	  test $$size -le 67108864 || { echo "gpu-check bundle over 64 MiB"; exit 1; }
	bin/gpu-check/run.sh; test $$? -ne 1

## fuzz: run every fuzz target for FUZZTIME each
fuzz:
	@for pkg in $$($(GO) list $(PKGS)); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

clean:
	rm -rf bin $(VENV) $(SGLANG_VENV) $(SGLANG_VENV).lock
