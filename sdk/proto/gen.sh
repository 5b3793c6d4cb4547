#!/usr/bin/env bash
# Regenerates the Go code for kvpilot's protos: the host's services
# (sdk/proto/kvpilot/v1) and the policy plugin protocol
# (sdk/proto/kvpilot/plugin/v1). Each package is generated on its own.
#
# The plugin versions are pinned here, and the generated files name them in
# their headers, so `make verify` can tell stale code from a version bump.
# Plugins are installed with `go install` into a per-version directory outside
# the work tree (KVPILOT_TOOLS_BIN overrides it); protoc itself comes from the
# system package (apt-get install -y protobuf-compiler).
set -euo pipefail

PROTOC_GEN_GO_VERSION=v1.36.12
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${KVPILOT_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/kvpilot/bin}"
gobin_go="$bin/protoc-gen-go-$PROTOC_GEN_GO_VERSION"
gobin_grpc="$bin/protoc-gen-go-grpc-$PROTOC_GEN_GO_GRPC_VERSION"

if ! command -v protoc >/dev/null 2>&1; then
	echo "gen.sh: protoc not found; install it with: apt-get install -y protobuf-compiler" >&2
	exit 1
fi

install_plugin() { # dir module@version
	if [[ ! -x "$1/$(basename "${2%@*}")" ]]; then
		mkdir -p "$1"
		GOBIN="$1" go install "$2"
	fi
}
install_plugin "$gobin_go" "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
install_plugin "$gobin_grpc" "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"

cd "$here"
for pkg in kvpilot/v1 kvpilot/plugin/v1; do
	rm -f "$pkg"/*.pb.go
	protoc \
		--plugin=protoc-gen-go="$gobin_go/protoc-gen-go" \
		--plugin=protoc-gen-go-grpc="$gobin_grpc/protoc-gen-go-grpc" \
		--proto_path=. \
		--go_out=. --go_opt=paths=source_relative \
		--go-grpc_out=. --go-grpc_opt=paths=source_relative \
		"$pkg"/*.proto
	echo "gen.sh: regenerated $(ls "$pkg"/*.pb.go | wc -l) files in $pkg with protoc $(protoc --version | cut -d' ' -f2)"
done
