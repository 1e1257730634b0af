"""The drain benchmark's peer: pgqueuer (from PyPI, in a virtual environment the bench makes under target/) on the
same PostgreSQL server as berth, one process per job.

usage: peer_pgqueuer.py DSN JOBS CONCURRENCY
Installs pgqueuer's schema in DSN's (fresh) database, enqueues JOBS jobs one at a time (sequential, as
`kanban create` is timed) and then in one batch, and drains them with one consumer whose entrypoint starts `true`
as a process per job, at most CONCURRENCY at once. Prints one JSON line: enqueue rates, the drain rate and the whole
machine's CPU seconds during the drain (from /proc/stat, as the bench measures berth's).
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
    """The whole machine's busy CPU time so far (every state of /proc/stat's cpu line but idle and iowait)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


async def main(dsn: str, jobs: int, concurrency: int) -> None:
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
    # The consumer on a connection of its own, as a separate worker process would have.
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    done = 0

    @qm.entrypoint("job")
    async def job(_job) -> None:
        nonlocal done
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
        done += 1

    batch_size = max(1, concurrency // 2)
    t0, cpu0 = time.monotonic(), busy_seconds()
    await qm.run(mode=QueueExecutionMode.drain, batch_size=batch_size, max_concurrent_tasks=2 * batch_size)
    drain, drain_cpu = time.monotonic() - t0, busy_seconds() - cpu0
    await conn.close()
    assert done == jobs, f"drained {done} of {jobs}"
    print(json.dumps({"enqueue_one_per_s": one_by_one, "enqueue_batch_per_s": batch, "drain_per_s": jobs / drain, "drain_cpu_s": drain_cpu}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
