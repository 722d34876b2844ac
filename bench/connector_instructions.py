"""Instructions per request of the whole server (uvicorn's httptools protocol + the ASGI app), under
callgrind: load-independent, side by side with the bare app and another checkout.

    .venv/bin/python bench/connector_instructions.py [--before-src OTHER/src] [--requests 2000]
        [--profile]

Each variant runs in a fresh interpreter under ``valgrind --tool=callgrind`` with uvicorn's own
``HttpToolsProtocol`` (the one ``--http httptools`` serves with, behind the proxy-headers middleware
``uvicorn`` adds by default) on a uvloop loop, fed the bytes wrk sends for ``GET /api/orders/<id>``
(``Host`` and ``X-API-Key``) over a socket-less transport; only the socket system calls and wrk are
left out. One interpreter warms up with the ids it will then serve (so SQLite lookups are cache
hits, as in the wrk benchmark after its warm-up), then serves ``K`` requests; it runs twice, with
``K = requests / 4`` and ``K = requests``, and the difference of the two instruction totals divided
by the difference of ``K`` is the cost of one request, start-up and imports cancelled out.
``--profile`` prints instead a cProfile of the measured requests per variant (calls per request).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from connector_inprocess import ORDERS, bench_env, prepare  # noqa: E402

CHILD = r"""
import asyncio, os, random, sys
import uvloop
from uvicorn.config import Config
from uvicorn.server import ServerState
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

target, warm, measured, key, orders, profile = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6] == "1"
if target == "bare":
    sys.path.insert(0, os.environ["BENCH_DIR"])
    from connector_bare import app
else:
    from parley.connector.app import create_connector_app
    from parley.connector.config import ConnectorSettings
    app = create_connector_app(ConnectorSettings())
rng = random.Random(1)
requests = [
    b"GET /api/orders/%d HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nX-API-Key: %s\r\n\r\n" % (rng.randint(1, orders), key.encode())
    for _ in range(warm)
]

class Transport:
    # What uvicorn asks of an asyncio transport, minus the socket.
    def __init__(self):
        self.out = 0
        self.closed = False
    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8000)}.get(name, default)
    def write(self, data):
        self.out += len(data)
    def is_closing(self):
        return False
    def close(self):
        self.closed = True
    def pause_reading(self): pass
    def resume_reading(self): pass

async def run():
    config = Config(app=app, http="httptools", loop="uvloop", access_log=False, log_level="warning", lifespan="off")
    config.load()
    loop = asyncio.get_running_loop()
    proto = HttpToolsProtocol(config=config, server_state=ServerState(), app_state={}, _loop=loop)
    transport = Transport()
    proto.connection_made(transport)
    done = None
    complete = proto.on_response_complete
    def on_complete():
        complete()
        done.set_result(None)
    proto.on_response_complete = on_complete
    async def serve(batch):
        nonlocal done
        for request in batch:
            done = loop.create_future()
            proto.data_received(request)
            await done
    await serve(requests)
    out = transport.out
    if profile:
        import cProfile, pstats
        prof = cProfile.Profile()
        prof.enable()
        await serve(requests[:measured])
        prof.disable()
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime")
        calls = sum(v[1] for v in stats.stats.values())
        print(f"{calls / measured:.1f} Python-level calls per request")
        for (fn, line, name), (cc, nc, tt, ct, _) in sorted(stats.stats.items(), key=lambda kv: -kv[1][0])[:40]:
            print(f"{nc / measured:6.2f} {tt / measured * 1e6:7.2f} us  {name}  {os.path.basename(fn)}:{line}")
    else:
        await serve(requests[:measured])
    assert transport.out > out and not transport.closed  # every request answered, kept alive
    proto.connection_lost(None)

uvloop.run(run())
"""


def counts(
    env: dict[str, str], target: str, warm: int, measured: int, key: str, cache_sim: bool
) -> dict[str, int]:
    """Callgrind's totals of one run: instructions (Ir), and with ``cache_sim`` data-cache misses."""
    with tempfile.TemporaryDirectory(prefix="callgrind-") as tmp:
        out_file = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--cache-sim={'yes' if cache_sim else 'no'}",
                f"--callgrind-out-file={out_file}",
                sys.executable,
                "-c",
                CHILD,
                target,
                str(warm),
                str(measured),
                key,
                str(ORDERS),
                "0",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        text = out_file.read_text()
    events = re.search(r"^events: (.+)$", text, re.MULTILINE)
    totals = re.search(r"^(?:summary|totals): (.+)$", text, re.MULTILINE)
    if events is None or totals is None:
        raise SystemExit("no totals in the callgrind output")
    values = dict(zip(events.group(1).split(), (int(v) for v in totals.group(1).split()), strict=True))
    if cache_sim:  # first-level and last-level data misses, reads and writes together
        values["D1 misses"] = values["D1mr"] + values["D1mw"]
        values["LL misses"] = values["DLmr"] + values["DLmw"]
    return values


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before-src", help="also run the connector of this src directory")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--profile", action="store_true", help="cProfile per variant instead of callgrind")
    parser.add_argument(
        "--cache-sim", action="store_true", help="also count data-cache misses (callgrind's cache model)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="connector-instructions-") as tmp:
        body = Path(tmp) / "body.json"
        env = {**bench_env(tmp), "CONNECTOR_BENCH_BODY": str(body), "BENCH_DIR": str(ROOT / "bench")}
        key = prepare(env)
        body.write_bytes(first_body(env, key))
        variants: dict[str, tuple[str, dict[str, str]]] = {
            "bare ASGI": ("bare", env),
            "connector": ("connector", env),
        }
        if args.before_src:
            before_env = {**env, "PYTHONPATH": str(Path(args.before_src).resolve())}
            variants["connector before"] = ("connector", before_env)
        small, large = args.requests // 4, args.requests
        columns = ["Ir", "D1 misses", "LL misses"] if args.cache_sim else ["Ir"]
        per_request: dict[str, dict[str, float]] = {}
        for name, (target, variant_env) in variants.items():
            if args.profile:
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, target, str(large), str(large), key, str(ORDERS), "1"],
                    env=variant_env,
                    check=True,
                    stdout=subprocess.PIPE,
                    text=True,
                ).stdout
                print(f"== {name}\n{out}", flush=True)
                continue
            low = counts(variant_env, target, large, small, key, args.cache_sim)
            high = counts(variant_env, target, large, large, key, args.cache_sim)
            per_request[name] = {c: (high[c] - low[c]) / (large - small) for c in columns}
            figures = ", ".join(f"{c} {v:,.1f}" for c, v in per_request[name].items())
            print(f"{name:>18}: per request {figures}", flush=True)
    if per_request:
        bare = per_request["bare ASGI"]["Ir"]
        print(f"\n{large - small} requests counted per variant, random ids 1..{ORDERS}, warm cache")
        print(
            "| server | instructions per request | minus the bare app | bare / server |"
            + "".join(f" {c} per request |" for c in columns[1:])
        )
        print("|---|---|---|---|" + "---|" * (len(columns) - 1))
        for name, value in per_request.items():
            ir = value["Ir"]
            extra = "".join(f" {value[c]:,.1f} |" for c in columns[1:])
            print(f"| {name} | {ir:,.0f} | {ir - bare:,.0f} | {bare / ir:.2f} |{extra}")


def first_body(env: dict[str, str], key: str) -> bytes:
    """The connector's body for order 1: what the bare app sends (as in connector_bench.py)."""
    code = (
        "import asyncio\n"
        "from parley.connector.app import create_connector_app\n"
        "from parley.connector.config import ConnectorSettings\n"
        "app = create_connector_app(ConnectorSettings())\n"
        "print(asyncio.run(app.gate.order_body(1)).decode())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().encode()


if __name__ == "__main__":
    main()
