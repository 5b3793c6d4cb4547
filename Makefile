# kvpilot developer targets. `make run` and `make test` work on a fresh
# machine with Go installed; everything else they need comes from the Go
# module proxy.

GO        ?= go
PKGS      ?= ./...
BIN       := bin/kvpilot
FUZZTIME  ?= 30s
BENCHTIME ?= 1s

.PHONY: all build run test bench lint verify proto ptx ptx-check fuzz clean demo

all: build

## build: compile the kvpilot command (no cgo) into bin/
build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./host/cmd/kvpilot

## run: start the host on embedded defaults (Ctrl-C stops it)
run: build
	./$(BIN) serve

## demo: the host with the four built-in policies, real agent traces replayed
## through the reference engine, and a table of what the directives saved
demo: build
	CGO_ENABLED=0 $(GO) build -o bin/refengine ./examples/refengine/cmd/refengine
	$(GO) run ./examples/demo --kvpilot ./$(BIN) --config examples/demo/kvpilot.yaml

## test: the whole suite with the race detector and invariant checks on
test:
	$(GO) test -race -tags invariants -timeout 20m $(PKGS)

## bench: Go benchmarks for every package (one round each)
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## lint: formatting and vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags invariants $(PKGS)

## verify: lint, plus generated code and go.mod up to date
verify: lint
	$(GO) mod tidy -diff
	@if [ -x sdk/proto/gen.sh ] && command -v protoc >/dev/null; then sdk/proto/gen.sh && git diff --exit-code -- sdk/proto; fi

## proto: regenerate the gRPC code under sdk/proto
proto:
	sdk/proto/gen.sh

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
	rm -rf bin
