#!/usr/bin/env bash
# Regenerates the Python stubs of kvpilot.v1 (sdk/proto/kvpilot/v1/*.proto)
# into sdk/python/kvpilot/v1: messages (*_pb2.py), their type stubs (*.pyi)
# and the gRPC service stubs (*_pb2_grpc.py).
#
# The generator is grpcio-tools at the version pinned below (it bundles its
# own protoc, so the output does not depend on the system's). PYTHON names
# the interpreter that has it (default: the repository's .venv):
#
#   .venv/bin/pip install grpcio-tools==1.85.1
#   sdk/python/gen_proto.sh
#
# tests/test_stubs.py regenerates into a temporary directory and fails when
# the committed stubs differ.
set -euo pipefail

GRPCIO_TOOLS_VERSION=1.85.1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-$repo/.venv/bin/python}"
out="${1:-$here}"

have="$("$python" -c 'import importlib.metadata as m; print(m.version("grpcio-tools"))' 2>/dev/null || true)"
if [[ "$have" != "$GRPCIO_TOOLS_VERSION" ]]; then
	echo "gen_proto.sh: need grpcio-tools==$GRPCIO_TOOLS_VERSION in $python (have '${have:-none}'):" >&2
	echo "  $python -m pip install grpcio-tools==$GRPCIO_TOOLS_VERSION" >&2
	exit 1
fi

mkdir -p "$out/kvpilot/v1"
rm -f "$out"/kvpilot/v1/*_pb2.py "$out"/kvpilot/v1/*_pb2.pyi "$out"/kvpilot/v1/*_pb2_grpc.py
cd "$repo/sdk/proto"
"$python" -m grpc_tools.protoc \
	--proto_path=. \
	--python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
	kvpilot/v1/*.proto
echo "gen_proto.sh: regenerated $(ls "$out"/kvpilot/v1/*.py* | wc -l) files in $out/kvpilot/v1 with grpcio-tools $GRPCIO_TOOLS_VERSION" >&2
