"""Waiting for the bench's own processes to go idle before an arm is timed.

An arm's request is timed on a machine of a few cores. Work that an
earlier arm left behind (a connector process's save thread copying and
committing pages, the kvpilot host writing them to its tiers or reloading
its disk tier after a restart) would run inside the next arm's window and
be charged to that arm, whichever arm it is: with the misses taking turns,
the save of the connector's miss landed in the plain process's miss. So
each timed request starts once every process of the bench has been nearly
idle for a short window.
"""

from __future__ import annotations

import logging
import time

import psutil

log = logging.getLogger("kvbench.vllm")


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of the processes and their descendants
    (all their threads): a tensor-parallel engine's ranks are worker
    processes of its own.
    """
    total = 0.0
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system
    return total


def wait_idle(
    pids: list[int], window: float = 0.3, busy: float = 0.05, timeout: float = 30.0
) -> float:
    """Waits until the processes together used less than ``busy`` of one core
    over ``window`` seconds; returns the seconds waited. Past ``timeout`` it
    logs and returns, so a process that never idles slows the bench but does
    not hang it.
    """
    t0 = time.monotonic()
    before = cpu_seconds(pids)
    while True:
        time.sleep(window)
        now = cpu_seconds(pids)
        waited = time.monotonic() - t0
        if now - before < busy * window:
            return waited
        if waited > timeout:
            log.warning("bench processes still busy after %.0f s; timing anyway", waited)
            return waited
        before = now
