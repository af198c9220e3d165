"""Where a sweep's candidates run: they are independent tasks (palettize one package, validate it), so any pool of
workers gives the same packages and reports; only timings differ.

- "local" (default): worker processes on this machine (spawned, so no worker inherits a half-initialised state).
- "ray": Ray tasks (the optional `ray` extra), one CPU each. A Ray runtime already initialised by the caller is
  used as it is -- a cluster, or `ray.init(local_mode=True)` in tests -- otherwise a local one with `workers` CPUs
  is started for the sweep and shut down after it. Workers import the harness from the driver's PYTHONPATH.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context

from ..core import stop
from ..core.errors import HarnessError

EXECUTORS = ("local", "ray")


class ExecutorError(HarnessError):
    pass


def run_tasks(function, jobs: list[dict], executor: str, workers: int, on_result=None) -> list[dict]:
    """function(job) for every job, results in the order of `jobs`; `on_result(done, result)` as each finishes."""
    if executor not in EXECUTORS:
        raise ExecutorError(f"--executor must be one of {EXECUTORS}, got {executor!r}")
    report = on_result or (lambda done, result: None)
    results: list = [None] * len(jobs)
    if not jobs:
        return results
    if executor == "local":
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 # a stop reaches workers once, from core/stop.py
                                 initializer=stop.ignore_interrupts) as pool:
            futures = {pool.submit(function, job): i for i, job in enumerate(jobs)}
            for done, future in enumerate(as_completed(futures), start=1):
                results[futures[future]] = future.result()
                report(done, results[futures[future]])
        return results
    return _run_on_ray(function, jobs, workers, report, results)


def _run_on_ray(function, jobs, workers, report, results):
    try:
        import ray
    except ImportError as error:
        raise ExecutorError("--executor ray needs Ray: pip install 'ane-engineering[ray]' (or ray>=2.9)") from error
    import os

    started_here = not ray.is_initialized()
    if started_here:
        env = {k: os.environ[k] for k in ("PYTHONPATH", "ANE_ENGINEERING_CACHE") if k in os.environ}
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": env} if env else None)
    try:
        task = ray.remote(num_cpus=1, max_retries=0)(function)
        pending = {task.remote(job): i for i, job in enumerate(jobs)}
        done = 0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                i = pending.pop(ref)
                results[i] = ray.get(ref)
                done += 1
                report(done, results[i])
    finally:
        if started_here:
            ray.shutdown()
    return results
