"""One ``order_lookup`` tool call, client side only: function calls and CPU per call.

A stub order connector runs in a child process on loopback (plain asyncio, a fixed order envelope,
keep-alive), so its work is not in the figures; this process runs the tool's call as the conversation
runtime does (``tools.executor._run_order_lookup``: policy, secrets, URL and headers, the guarded HTTP
call over a kept connection, the JSON answer) one call after another.

    PYTHONPATH=src .venv/bin/python bench/tool_call_bench.py [--calls 3000]

It prints the function calls per tool call (cProfile, a figure that does not move with the load) and
the CPU time per call without the profiler (best of five rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import SecretStr

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.runtime_bench import free_port

STUB = r"""
import asyncio, sys
BODY = (b'{"success":true,"data":{"order_id":"1001","status":"shipped","customer":"Ada",'
        b'"items":[{"sku":"A-1","name":"Kettle","qty":1}],"total":"49.90"}}')
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(BODY)

async def answer(reader, writer):
    try:
        while True:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + BODY)
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()

async def main():
    server = await asyncio.start_server(answer, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


async def run(port: int, calls: int) -> None:
    from parley.config import Settings
    from parley.tools import executor
    from parley.tools.models import Tool
    from parley.tools.schemas import OrderLookupConfig

    with tempfile.TemporaryDirectory(prefix="parley-tool-call-") as tmp:
        settings = Settings(
            data_dir=Path(tmp),
            connector_url=f"http://127.0.0.1:{port}",
            secret_key=SecretStr("a" * 43),
            log_json=False,
        )
        tool = Tool(
            id="tool_bench", organization_id="org_bench", name="orders", type="order_lookup", config={}
        )
        tool.secrets = {"api_key": executor.tool_secrets(settings, tool).seal("api_key", "k" * 32)}
        config = OrderLookupConfig()

        async def call() -> None:
            result = await executor._run_order_lookup(settings, tool, config, {"order_id": "1001"})
            assert result.status == "ok", result

        for _ in range(200):
            await call()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(calls):
            await call()
        profile.disable()
        per_call = pstats.Stats(profile).total_calls / calls  # type: ignore[attr-defined]
        rounds = []
        for _ in range(5):
            started = time.process_time()
            for _ in range(calls):
                await call()
            rounds.append((time.process_time() - started) / calls * 1e3)
        print(f"function calls per tool call: {per_call:,.0f}")
        print(
            f"CPU per tool call: {min(rounds):.3f} ms (best of 5 rounds of {calls}; all: "
            + ", ".join(f"{r:.3f}" for r in rounds)
            + ")"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    port = free_port()
    stub = subprocess.Popen([sys.executable, "-c", STUB, str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None and stub.stdout.readline().strip() == "ready"
        asyncio.run(run(port, args.calls))
    finally:
        stub.terminate()
        stub.wait()


if __name__ == "__main__":
    main()
