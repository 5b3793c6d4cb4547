// Package control is the host's control plane: the ways routers, harnesses
// and operators deliver directives and watch the cache.
//
//   - grpcserver serves kvpilot.v1.Control on the private Unix socket
//     (host/uds enforces the directory and socket modes and the SO_PEERCRED
//     allow-list; the server records each caller's uid as its source);
//   - natscmd subscribes to kv-control-<worker_id> and kv-control-broadcast
//     and answers the AgenticCommand JSON and the router's
//     cache_control JSON, optionally through a durable JetStream consumer;
//   - publish turns the index's events into Dynamo RouterEvents, publishes
//     them on NATS in order and fans them out to WatchEvents streams;
//   - plane assembles the three over one ingress for the daemon and the
//     benchmarks.
//
// grpcserver and natscmd are doors: adapters over host/ingress, which
// rate-limits, audits, counts and applies whatever they hand it, so a
// directive means the same thing whichever way it arrives.
package control
