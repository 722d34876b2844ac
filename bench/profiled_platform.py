"""Serve the platform as ``bench/runtime_bench.py`` does, under cProfile (``--profile``).

    python bench/profiled_platform.py OUT.prof PORT

Runs ``uvicorn parley.app:create_app_from_env`` in this process with the bench's options and a
profiler that is on only while ``POST /__profile/on`` ... ``/__profile/off`` bracket the burst (the
start-up and set-up requests stay out). On ``/__profile/off`` it writes the profile to OUT.prof and
prints the SQL statements the database ran in that window (counted at the cursor), so the bench can
divide both by its requests.
"""

from __future__ import annotations

import cProfile
import sys
import time
from typing import Any

import uvicorn
from sqlalchemy import event
from sqlalchemy.engine import Engine

OUT, PORT = sys.argv[1], int(sys.argv[2])
# CPU time of the event loop thread (wall time would count waits for the GIL and the database).
PROFILER = cProfile.Profile(time.thread_time)
STATEMENTS = [0]
COUNTING = [False]


@event.listens_for(Engine, "before_cursor_execute")
def _count(*_args: Any) -> None:
    if COUNTING[0]:
        STATEMENTS[0] += 1


def factory() -> Any:
    from parley.app import create_app_from_env

    app = create_app_from_env()

    async def switch(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] in ("/__profile/on", "/__profile/off"):
            body = b"ok"
            if scope["path"] == "/__profile/on":
                STATEMENTS[0], COUNTING[0] = 0, True
                PROFILER.enable()
            else:
                PROFILER.disable()
                COUNTING[0] = False
                PROFILER.dump_stats(OUT)
                body = str(STATEMENTS[0]).encode()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return switch


if __name__ == "__main__":
    uvicorn.run(
        factory,
        factory=True,
        port=PORT,
        access_log=False,
        log_level="warning",
        loop="uvloop",
        http="httptools",
        timeout_keep_alive=300,
    )
