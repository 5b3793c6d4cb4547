#!/usr/bin/env python3
"""Raw put and get throughput of Mooncake's distributed KV store for 2 MiB pages.

The host's remote tier is Go without cgo and Mooncake's store has no client it
can link, so this measures the store from its own Python binding as a raw
baseline, beside the raw JetStream and Redis figures of `kvpilot-bench tiers`.

Topology, all on loopback with the TCP transport:

- `mooncake_master` with its embedded HTTP metadata server;
- `mooncake_client`, a standalone store process that holds the memory (the
  global segment), like a Redis or NATS server holds its values;
- this process, a client with no segment of its own, so every page crosses a
  TCP connection to the store process and back. (With TCP only, Mooncake
  serves a client's own segment by memcpy, which measures nothing remote.)

Each round runs every arm in turn: put all pages, then get all pages, each
pass timed; each page that comes back is checked against what was put. Keys
are fresh every round (Mooncake keeps the old value when a key is put again)
and the round's objects are removed, untimed, before the next arm.

Run it from a virtualenv that has Mooncake installed (see README.md).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import mmap
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

log = logging.getLogger("mooncake_bench")

PAGE_BYTES = 2 << 20
LOCAL_BUFFER_BYTES = 64 << 20  # the client's staging buffer for plain put/get
STARTUP_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0

# Ports. This script picks its own from PICK_PORTS; Mooncake's clients pick
# theirs from the two ranges it is told through the environment, so nothing
# collides and everything stays below the kernel's ephemeral range.
PICK_PORTS = (28000, 32767)
MOONCAKE_ENV = {
    "MC_STORE_CLIENT_MIN_PORT": "20000",
    "MC_STORE_CLIENT_MAX_PORT": "23999",
    "MC_MIN_RPC_PORT": "24000",  # transfer-engine RPC and TCP transport
    "MC_MAX_RPC_PORT": "27999",
    "MC_TCP_BIND_ADDRESS": "127.0.0.1",
}
LOOPBACK = "127.0.0.1"

INSTALL_HINT = (
    "install Mooncake into its own virtualenv and run this script with that "
    "interpreter, e.g. `make bench-mooncake`, or:\n"
    "  python3 -m venv .venv-mooncake\n"
    "  .venv-mooncake/bin/pip install --no-deps mooncake-transfer-engine-non-cuda==0.3.13.post1\n"
    "  .venv-mooncake/bin/python host/bench/mooncake/mooncake_bench.py"
)


class BenchError(Exception):
    """A failure the user can act on; the message says what to do."""


class Store(Protocol):
    """The part of mooncake.store.MooncakeDistributedStore this bench uses."""

    def setup(
        self,
        local_hostname: str,
        metadata_server: str,
        global_segment_size: int,
        local_buffer_size: int,
        protocol: str,
        rdma_devices: str,
        master_server_addr: str,
    ) -> int: ...
    def put(self, key: str, value: bytes) -> int: ...
    def get(self, key: str) -> bytes: ...
    def put_from(self, key: str, buffer_ptr: int, size: int) -> int: ...
    def get_into(self, key: str, buffer_ptr: int, size: int) -> int: ...
    def batch_put_from(
        self, keys: list[str], ptrs: list[int], sizes: list[int]
    ) -> list[int]: ...
    def batch_get_into(
        self, keys: list[str], ptrs: list[int], sizes: list[int]
    ) -> list[int]: ...
    def register_buffer(self, buffer_ptr: int, size: int) -> int: ...
    def unregister_buffer(self, buffer_ptr: int) -> int: ...
    def remove_all(self, force: bool) -> int: ...
    def close(self) -> int: ...


# --- installation ----------------------------------------------------------


def mooncake_dir() -> Path:
    """The installed mooncake package directory (holds the server binaries)."""
    spec = importlib.util.find_spec("mooncake")
    if spec is None or not spec.submodule_search_locations:
        raise BenchError(
            f"the mooncake package is not installed for {sys.executable}; {INSTALL_HINT}"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def mooncake_dist() -> str:
    """The distribution that installed mooncake, as name==version."""
    names = importlib.metadata.packages_distributions().get("mooncake", [])
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return f"{name}=={importlib.metadata.version(name)}"
    return "unknown"


def library_hint(msg: str) -> str | None:
    """What to install when a Mooncake binary or module cannot load a library."""
    if "libcuda" in msg or "libcudart" in msg:
        return (
            "this is the CUDA build of Mooncake, which needs the NVIDIA driver and the "
            "CUDA 12 runtime; on a machine without them install the CPU build, "
            "mooncake-transfer-engine-non-cuda==0.3.13.post1, in its place"
        )
    if "libibverbs" in msg or "libmlx5" in msg:
        return "install the verbs libraries: apt-get install -y libibverbs1 ibverbs-providers"
    if "libnuma" in msg:
        return "install libnuma: apt-get install -y libnuma1"
    if "libcurl" in msg:
        return "install libcurl: apt-get install -y libcurl4"
    return None


def load_store_class() -> Callable[[], Store]:
    """Import the store binding, turning a missing library into a hint."""
    try:
        # By name: the binding has no type information for a checker to read.
        module = importlib.import_module("mooncake.store")
    except ImportError as err:
        msg = str(err)
        hint = library_hint(msg) or INSTALL_HINT
        raise BenchError(f"cannot import mooncake.store: {msg}\nhint: {hint}") from err
    ctor: Callable[[], Store] = module.MooncakeDistributedStore
    return ctor


# --- subprocesses ----------------------------------------------------------


def free_port(taken: set[int]) -> int:
    """A loopback port in PICK_PORTS that nothing listens on now."""
    lo, hi = PICK_PORTS
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(lo, hi)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise BenchError(f"no free loopback port in {lo}..{hi} after 200 tries")


def die_with_parent(argv: list[str]) -> list[str]:
    """Argv that has the kernel stop the server if this script is SIGKILLed.

    setpriv (util-linux) sets the parent-death signal and execs the server,
    so the pid stays the server's; without setpriv only orderly exits (and
    Ctrl-C, SIGTERM, errors) stop the servers.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *argv] if setpriv else argv


@dataclass
class Server:
    """A Mooncake server process and the log file it writes."""

    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 12, width: int = 300) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError as err:
            return f"(no log: {err})"
        return "\n".join(line[:width] for line in text[-lines:])

    def wait_listening(self, port: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                hint = library_hint(self.log_tail())
                raise BenchError(
                    f"{self.name} exited with status {rc} while starting (its log is above)"
                    + (f"\nhint: {hint}" if hint else "")
                )
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.2)
                if s.connect_ex((LOOPBACK, port)) == 0:
                    return
            time.sleep(0.05)
        raise BenchError(
            f"{self.name} did not listen on {LOOPBACK}:{port} within {timeout_s:.0f}s "
            "(its log is above)"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s (pid %d) ignored SIGTERM; killing it", self.name, self.proc.pid
                )
                self.proc.kill()
                self.proc.wait()
        log.info(
            "%s (pid %d) stopped, status %s",
            self.name,
            self.proc.pid,
            self.proc.returncode,
        )


@contextlib.contextmanager
def server(
    name: str, argv: list[str], log_dir: Path, env: dict[str, str]
) -> Iterator[Server]:
    """Start a server process; stop it on the way out, whatever happened."""
    binary = Path(argv[0])
    if not os.access(binary, os.X_OK):
        raise BenchError(
            f"{binary} is missing or not executable; reinstall Mooncake ({INSTALL_HINT})"
        )
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            die_with_parent(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches only us; we stop it in order
        )
    srv = Server(name, proc, log_path)
    log.info("started %s (pid %d): %s", name, proc.pid, " ".join(argv))
    try:
        yield srv
    except Exception:  # not Ctrl-C or SIGTERM: those are no server's fault
        log.error("%s log ends:\n%s", name, srv.log_tail())
        raise
    finally:
        srv.stop()


@dataclass
class Cluster:
    """Addresses of a running master and store process."""

    master_addr: str
    metadata_url: str


@contextlib.contextmanager
def cluster(segment_bytes: int, log_dir: Path) -> Iterator[Cluster]:
    """Start the master (with its metadata server) and a store process."""
    pkg = mooncake_dir()
    env = dict(os.environ, **MOONCAKE_ENV)
    taken: set[int] = set()
    rpc, http, metrics, client_port = (free_port(taken) for _ in range(4))
    # Servers log to their files in log_dir; the tail is shown on failure.
    glog = ["--logtostderr=true"]
    master_argv = [
        str(pkg / "mooncake_master"),
        f"--rpc_port={rpc}",
        f"--rpc_address={LOOPBACK}",
        "--enable_http_metadata_server=true",
        f"--http_metadata_server_host={LOOPBACK}",
        f"--http_metadata_server_port={http}",
        f"--metrics_host={LOOPBACK}",
        f"--metrics_port={metrics}",
        *glog,
    ]
    metadata_url = f"http://{LOOPBACK}:{http}/metadata"
    store_argv = [
        str(pkg / "mooncake_client"),
        f"--host={LOOPBACK}",
        f"--port={client_port}",
        f"--global_segment_size={segment_bytes}",
        f"--master_server_address={LOOPBACK}:{rpc}",
        f"--metadata_server={metadata_url}",
        "--protocol=tcp",
        *glog,
    ]
    with server("mooncake_master", master_argv, log_dir, env) as master:
        master.wait_listening(rpc, STARTUP_TIMEOUT_S)
        master.wait_listening(http, STARTUP_TIMEOUT_S)
        with server("mooncake_store", store_argv, log_dir, env) as store:
            # The store mounts its segment before it opens this port.
            store.wait_listening(client_port, STARTUP_TIMEOUT_S)
            yield Cluster(f"{LOOPBACK}:{rpc}", metadata_url)


# --- pages and buffers -----------------------------------------------------


def make_pages(n: int) -> list[bytes]:
    """N deterministic, incompressible pages: SHAKE-256 of the page number."""
    return [
        hashlib.shake_256(f"kvpilot-page-{i}".encode()).digest(PAGE_BYTES)
        for i in range(n)
    ]


class Region:
    """An anonymous mmap with a stable address, registered with the store."""

    def __init__(self, store: Store, size: int) -> None:
        self._store = store
        self.mem = mmap.mmap(-1, size)
        self._view = (ctypes.c_char * size).from_buffer(self.mem)
        self.addr = ctypes.addressof(self._view)
        self.size = size
        self._registered = False
        rc = store.register_buffer(self.addr, size)
        if rc != 0:
            self.close()
            raise BenchError(f"register_buffer({size} bytes) failed with code {rc}")
        self._registered = True

    def close(self) -> None:
        if self._registered:
            rc = self._store.unregister_buffer(self.addr)
            if rc != 0:
                log.warning("unregister_buffer failed with code %d", rc)
            self._registered = False
        del self._view  # the ctypes view pins the mmap; drop it before closing
        self.mem.close()


# --- arms ------------------------------------------------------------------


@dataclass
class Arm:
    """One store API measured both ways: a put pass and a get pass."""

    name: str
    put_api: str
    get_api: str
    put: Callable[[list[str]], None]
    get: Callable[[list[str]], None]
    check: Callable[[], None]
    put_gbps: list[float] = field(default_factory=list)
    get_gbps: list[float] = field(default_factory=list)


def fail(what: str, detail: object) -> NoReturn:
    raise BenchError(f"{what}: {detail}")


def make_arms(store: Store, pages: list[bytes], src: Region, dst: Region) -> list[Arm]:
    """The arms, fastest API last: plain copy, zero-copy single, zero-copy batch."""
    n = len(pages)
    offsets = [i * PAGE_BYTES for i in range(n)]
    sizes = [PAGE_BYTES] * n
    got: list[bytes] = []

    def raw_put(keys: list[str]) -> None:
        for key, page in zip(keys, pages, strict=True):
            rc = store.put(key, page)
            if rc != 0:
                fail(f"put {key}", f"code {rc}")

    def raw_get(keys: list[str]) -> None:
        got.clear()
        got.extend(store.get(key) for key in keys)

    def raw_check() -> None:
        for i, (want, have) in enumerate(zip(pages, got, strict=True)):
            if have != want:
                fail(
                    f"get page {i}", f"{len(have)} bytes back, not the {len(want)} put"
                )
        got.clear()

    def from_put(keys: list[str]) -> None:
        for key, off in zip(keys, offsets, strict=True):
            rc = store.put_from(key, src.addr + off, PAGE_BYTES)
            if rc != 0:
                fail(f"put_from {key}", f"code {rc}")

    def into_get(keys: list[str]) -> None:
        for key, off in zip(keys, offsets, strict=True):
            rc = store.get_into(key, dst.addr + off, PAGE_BYTES)
            if rc != PAGE_BYTES:
                fail(f"get_into {key}", f"code {rc}")

    def batch_put(keys: list[str]) -> None:
        rcs = store.batch_put_from(keys, [src.addr + o for o in offsets], sizes)
        if any(rc != 0 for rc in rcs):
            fail("batch_put_from", f"codes {sorted(set(rcs))}")

    def batch_get(keys: list[str]) -> None:
        rcs = store.batch_get_into(keys, [dst.addr + o for o in offsets], sizes)
        if any(rc != PAGE_BYTES for rc in rcs):
            fail("batch_get_into", f"codes {sorted(set(rcs))}")

    def dst_check() -> None:
        for i, (want, off) in enumerate(zip(pages, offsets, strict=True)):
            if dst.mem[off : off + PAGE_BYTES] != want:
                fail(f"get page {i}", "the bytes differ from those put")

    return [
        Arm("raw", "put", "get", raw_put, raw_get, raw_check),
        Arm("zero_copy", "put_from", "get_into", from_put, into_get, dst_check),
        Arm(
            "batch_zero_copy",
            "batch_put_from",
            "batch_get_into",
            batch_put,
            batch_get,
            dst_check,
        ),
    ]


def run_round(
    store: Store, arms: Sequence[Arm], dst: Region, n: int, label: str
) -> None:
    """Every arm once: put pass, get pass, check, remove; GB/s kept unless warm-up."""
    for arm in arms:
        keys = [f"kvpilot-bench/{label}/{arm.name}/{i}" for i in range(n)]
        ctypes.memset(dst.addr, 0, dst.size)  # so a get that wrote nothing cannot pass
        t0 = time.perf_counter_ns()
        arm.put(keys)
        t1 = time.perf_counter_ns()
        arm.get(keys)
        t2 = time.perf_counter_ns()
        arm.check()
        removed = store.remove_all(True)
        if removed != n:
            fail(
                f"remove_all after {arm.name}",
                f"removed {removed} objects, expected {n}",
            )
        nbytes = n * PAGE_BYTES
        put_gbps, get_gbps = nbytes / (t1 - t0), nbytes / (t2 - t1)  # bytes/ns == GB/s
        log.info(
            "%s %s: put %.3f GB/s, get %.3f GB/s", label, arm.name, put_gbps, get_gbps
        )
        if label != "warmup":
            arm.put_gbps.append(put_gbps)
            arm.get_gbps.append(get_gbps)


# --- report ----------------------------------------------------------------


def summary(values: list[float]) -> dict[str, Any]:
    return {
        "median_gb_per_s": round(statistics.median(values), 4),
        "min_gb_per_s": round(min(values), 4),
        "max_gb_per_s": round(max(values), 4),
        "runs_gb_per_s": [round(v, 4) for v in values],
    }


def report(arms: Sequence[Arm], params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"scenario": "mooncake", "params": params, "arms": {}}
    for arm in arms:
        out["arms"][f"mooncake_{arm.name}_put"] = {
            "api": arm.put_api,
            **summary(arm.put_gbps),
        }
        out["arms"][f"mooncake_{arm.name}_get"] = {
            "api": arm.get_api,
            **summary(arm.get_gbps),
        }
    best_put = max(arms, key=lambda a: statistics.median(a.put_gbps))
    best_get = max(arms, key=lambda a: statistics.median(a.get_gbps))
    # Shaped like the candidates of `kvpilot-bench tiers --json`.
    out["candidate"] = {
        "store": "mooncake",
        "put_gb_per_s": round(statistics.median(best_put.put_gbps), 4),
        "get_gb_per_s": round(statistics.median(best_get.get_gbps), 4),
        "put_api": best_put.put_api,
        "get_api": best_get.get_api,
        "backend": False,
    }
    return out


def table(result: dict[str, Any]) -> str:
    p = result["params"]
    lines = [
        (
            f"mooncake ({p['package']}, {p['protocol']} on loopback): {p['pages']} pages "
            f"of {p['page_bytes']} bytes, {p['iters']} rounds"
        ),
        "",
        f"{'arm':<30} {'api':<16} {'min':>8} {'median':>8} {'max':>8}  GB/s",
    ]
    for name, arm in result["arms"].items():
        lines.append(
            f"{name:<30} {arm['api']:<16} {arm['min_gb_per_s']:>8.3f} "
            f"{arm['median_gb_per_s']:>8.3f} {arm['max_gb_per_s']:>8.3f}"
        )
    c = result["candidate"]
    lines += [
        "",
        (
            f"shared-tier store, raw (GB/s): mooncake put {c['put_gb_per_s']:.2f} "
            f"({c['put_api']}) get {c['get_gb_per_s']:.2f} ({c['get_api']}), no backend"
        ),
    ]
    return "\n".join(lines)


# --- main ------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    # Mooncake reads its port ranges from the environment, in the servers
    # and in this process's client alike.
    os.environ.update(MOONCAKE_ENV)
    package = mooncake_dist()
    load_at_start = os.getloadavg()[0]
    pages = make_pages(args.pages)
    nbytes = args.pages * PAGE_BYTES
    # Headroom: the master starts evicting at 90% full, and one round's pages
    # are resident at a time.
    segment_bytes = max(2 * nbytes, 64 << 20)

    with contextlib.ExitStack() as stack:
        log_dir = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="mooncake-bench-"))
        )
        c = stack.enter_context(cluster(segment_bytes, log_dir))
        # The client logs to our stderr; INFO lines only with --verbose. Set
        # after the servers start, so their log files keep everything.
        if not args.verbose:
            os.environ.setdefault("MC_LOG_LEVEL", "WARNING")
        store = load_store_class()()
        rc = store.setup(
            LOOPBACK, c.metadata_url, 0, LOCAL_BUFFER_BYTES, "tcp", "", c.master_addr
        )
        if rc != 0:
            raise BenchError(
                f"store setup against master {c.master_addr} failed with code {rc}"
            )
        stack.callback(store.close)
        src = Region(store, nbytes)
        stack.callback(src.close)
        dst = Region(store, nbytes)
        stack.callback(dst.close)
        for i, page in enumerate(pages):
            src.mem[i * PAGE_BYTES : (i + 1) * PAGE_BYTES] = page

        arms = make_arms(store, pages, src, dst)
        run_round(store, arms, dst, args.pages, "warmup")
        for r in range(args.iters):
            run_round(store, arms, dst, args.pages, f"round{r}")

    params = {
        "package": package,
        "protocol": "tcp",
        "topology": "client (no segment) -> mooncake_client store process, one replica",
        "pages": args.pages,
        "page_bytes": PAGE_BYTES,
        "iters": args.iters,
        "segment_bytes": segment_bytes,
        "local_buffer_bytes": LOCAL_BUFFER_BYTES,
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(load_at_start, 2),
    }
    return report(arms, params)


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Raw put/get GB/s of Mooncake's distributed KV store for 2 MiB pages, "
        "on loopback with the TCP transport. Starts its own master and store process.",
    )
    ap.add_argument(
        "--pages", type=positive, default=64, help="pages per pass (default 64)"
    )
    ap.add_argument(
        "--iters", type=positive, default=5, help="measured rounds (default 5)"
    )
    ap.add_argument(
        "--json", action="store_true", help="print one JSON object, not a table"
    )
    ap.add_argument(
        "--verbose", "-v", action="store_true", help="Mooncake's INFO logs too"
    )
    return ap.parse_args(argv)


def _on_sigterm(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through the cleanup like Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        result = run(args)
    except BenchError as err:
        log.error("%s", err)
        return 1
    except KeyboardInterrupt:
        log.error("interrupted; servers stopped")
        return 130
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
