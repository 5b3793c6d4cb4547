"""Generated protobuf and gRPC stubs of kvpilot.v1 (sdk/proto/kvpilot/v1).

Regenerate with sdk/python/gen_proto.sh; do not edit the *_pb2* files.
"""
