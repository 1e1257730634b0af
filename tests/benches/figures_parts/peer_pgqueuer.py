"""The drain benchmark's peer: pgqueuer (from PyPI, in a virtual environment the bench makes under target/) on the
same PostgreSQL server as berth, one process per job.

usage: peer_pgqueuer.py DSN JOBS WORKERS
Installs pgqueuer's schema in DSN's (fresh) database, enqueues JOBS jobs one at a time (sequential, as
`kanban create` is timed) and then in one batch, and drains them with WORKERS worker processes (each its own
connection, pgqueuer's defaults: batches of 10), whose entrypoint starts `true` as a process per job. The drain is
timed from the moment every worker is connected and ready to the last worker's end. Prints one JSON line: enqueue
rates, the drain rate and the whole machine's CPU seconds during the drain (from /proc/stat, as the bench measures
berth's).

usage: peer_pgqueuer.py --worker DSN
One worker process: connects, says `ready`, waits for `go` on stdin, drains, prints how many jobs it ran.
"""

import asyncio
import json
import os
import sys
import time

import asyncpg
from pgqueuer.db import AsyncpgDriver
from pgqueuer.qm import QueueManager
from pgqueuer.queries import Queries
from pgqueuer.types import QueueExecutionMode


def busy_seconds() -> float:
    """The busy CPU time so far: the cgroup's named by BERTH_BENCH_CPUACCT (as the bench reads it), else the whole
    machine's (every state of /proc/stat's cpu line but idle and iowait)."""
    group = os.environ.get("BERTH_BENCH_CPUACCT")
    if group:
        with open(os.path.join(group, "cpuacct.usage")) as f:
            return int(f.read().strip()) / 1e9
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


async def worker(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    done = 0

    @qm.entrypoint("job")
    async def job(_job) -> None:
        nonlocal done
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
        done += 1

    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    # pgqueuer's defaults (batch_size 10, no cap past the batches), ending once the queue is empty.
    await qm.run(mode=QueueExecutionMode.drain)
    await conn.close()
    print(done, flush=True)


async def main(dsn: str, jobs: int, workers: int) -> None:
    conn = await asyncpg.connect(dsn)
    queries = Queries(AsyncpgDriver(conn))
    await queries.install()
    single = min(jobs, 500)
    t0 = time.monotonic()
    for _ in range(single):
        await queries.enqueue("job", None, 0)
    one_by_one = single / (time.monotonic() - t0)
    await queries.clear_queue("job")
    t0 = time.monotonic()
    await queries.enqueue(["job"] * jobs, [None] * jobs, [0] * jobs)
    batch = jobs / (time.monotonic() - t0)
    await conn.close()

    # The workers, each a process with a connection of its own; the clock starts once all are ready.
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--worker", dsn, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(workers)
    ]
    for p in procs:
        assert (await p.stdout.readline()).strip() == b"ready", "a worker did not start"
    t0, cpu0 = time.monotonic(), busy_seconds()
    for p in procs:
        p.stdin.write(b"go\n")
        await p.stdin.drain()
    done = 0
    for p in procs:
        done += int((await p.stdout.readline()).strip() or 0)
        await p.wait()
    drain, drain_cpu = time.monotonic() - t0, busy_seconds() - cpu0
    assert done == jobs, f"drained {done} of {jobs}"
    print(json.dumps({"enqueue_one_per_s": one_by_one, "enqueue_batch_per_s": batch, "drain_per_s": jobs / drain, "drain_cpu_s": drain_cpu}))


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        asyncio.run(worker(sys.argv[2]))
    else:
        asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
