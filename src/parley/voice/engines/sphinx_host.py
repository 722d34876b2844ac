"""Offline recognition in decoder processes, so a loading or decoding recognizer never stalls a call.

Building a PocketSphinx decoder holds the GIL for 0.2 s (idle machine) to seconds (loaded), and a
thread does not help: every coroutine of the process waits, and a call's 20 ms frames come late. So
the server decodes in ``PARLEY_VOICE_DECODER_PROCESSES`` helper processes (started with *spawn*, each
with its own decoder pool warmed to ``PARLEY_VOICE_DECODER_POOL`` per kind). A stream is pinned to one
process: its audio goes there in the chunks the stream collects, its transcripts come back; the
blocking pipe round trips run on worker threads, which wait without holding the GIL.

A process serves one request at a time (a lock per process), so a decoder being built delays the
transcripts of the other streams of *that* process, never the event loop; a new stream goes to the
process with the fewest open streams. A process answers once its start-up warm is done, so the first
streams after start-up wait for it (their transcripts, not the loop). A process that dies is replaced on the next stream; its open
streams end with :class:`EngineUnavailable`.

``PARLEY_VOICE_DECODER_PROCESSES=0`` (the tests) decodes in this process, as a library user would.
As with any *spawn* child, a script that starts these processes must keep its top-level work under
``if __name__ == "__main__":`` (the ``parley`` and ``uvicorn`` entry points and ``python -m parley`` do).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from parley.voice.engines.base import EngineUnavailable, Transcript

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from parley.voice.engines.sphinx_decoder import DecoderKind, DecoderSession

# Threads that wait on the processes' pipes (waiting holds no GIL): enough for several streams at once.
EXECUTOR = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sphinx-host")

NICE = 5  # how much lower the decoder processes run than the server

_STOPPED = "the offline recognizer's process stopped; the next stream starts a new one"


def _serve(conn: Connection, warm: int) -> None:
    """The decoder process: open/process/release sessions by id until the pipe closes."""
    from parley.voice.engines import sphinx_decoder

    # Below the server in the scheduler: on a busy machine a decoder loading here must not take the
    # CPU from the process that paces the calls' frames.
    with contextlib.suppress(OSError):
        os.nice(NICE)
    sessions: dict[int, DecoderSession] = {}
    if warm:
        sphinx_decoder.warm_pool(warm)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        op, sid, args = message
        try:
            if op == "open":
                kind, grammar, phrases, use_vad = args
                sessions[sid] = sphinx_decoder.DecoderSession(kind, grammar, phrases, use_vad)
                reply: Any = None
            elif op == "process":
                reply = sessions[sid].process(*args)
            elif op == "release":
                session = sessions.pop(sid, None)
                if session is not None:
                    session.release()
                reply = None
            elif op == "ping":
                reply = sphinx_decoder.pool().created
            else:
                raise ValueError(f"unknown operation {op!r}")
            conn.send(("ok", reply))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


class DecoderProcess:
    """One helper process and the pipe to it; one request at a time."""

    def __init__(self, warm: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe(duplex=True)
        self._process: BaseProcess = context.Process(
            target=_serve, args=(child, warm), name="parley-sphinx", daemon=True
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self.streams = 0  # open streams pinned here
        self.dead = False

    def count(self, change: int) -> None:
        with self._count:
            self.streams += change

    def alive(self) -> bool:
        return not self.dead and self._process.is_alive()

    def call(self, op: str, sid: int, args: tuple[Any, ...] = ()) -> Any:
        """A blocking round trip (run it on :data:`EXECUTOR`, never on the event loop)."""
        with self._lock:
            if self.dead:
                raise EngineUnavailable(_STOPPED)
            try:
                self._conn.send((op, sid, args))
                status, reply = self._conn.recv()
            except (EOFError, OSError, BrokenPipeError) as exc:
                self.dead = True
                raise EngineUnavailable(_STOPPED) from exc
        if status == "error":
            raise RuntimeError(f"offline recognizer: {reply}")
        return reply

    def kill(self) -> None:
        self._process.kill()
        self._process.join(5)

    def stop(self) -> None:
        with self._lock:
            self.dead = True
            self._conn.close()
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)


class RemoteSession:
    """A stream's session inside a decoder process (the same calls as a local ``DecoderSession``)."""

    def __init__(self, host: DecoderProcess, sid: int) -> None:
        self._host = host
        self._sid = sid
        self._released = False

    def process(self, audio: bytes, final: bool) -> list[Transcript]:
        result: list[Transcript] = self._host.call("process", self._sid, (audio, final))
        return result

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        self._host.count(-1)
        if self._host.alive():
            with contextlib.suppress(EngineUnavailable, RuntimeError):  # gone, and its decoders with it
                self._host.call("release", self._sid)


class DecoderHosts:
    """The decoder processes of this server."""

    def __init__(self, count: int, warm: int) -> None:
        self._warm = warm
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._hosts = [DecoderProcess(warm) for _ in range(count)]

    def _pick(self) -> DecoderProcess:
        with self._lock:
            for index, host in enumerate(self._hosts):
                if not host.alive():
                    host.stop()
                    self._hosts[index] = DecoderProcess(self._warm)
            host = min(self._hosts, key=lambda h: h.streams)
            host.count(+1)
            return host

    def open(
        self, kind: DecoderKind, grammar: str | None, phrases: Sequence[str] | None, use_vad: bool
    ) -> RemoteSession:
        """Open a session in the least busy process (blocking: run it on :data:`EXECUTOR`)."""
        host = self._pick()
        sid = next(self._ids)
        try:
            host.call("open", sid, (kind, grammar, list(phrases) if phrases else None, use_vad))
        except BaseException:
            host.count(-1)
            raise
        return RemoteSession(host, sid)

    def ping(self) -> list[int]:
        """Decoders each process has built (blocking; waits for the processes to be up and warm)."""
        return [host.call("ping", 0) for host in self._hosts]

    @property
    def processes(self) -> list[DecoderProcess]:
        return list(self._hosts)

    def kill(self) -> None:
        """Kill the processes at once (the tests' way of a crash)."""
        for host in self._hosts:
            host.kill()

    def stop(self) -> None:
        for host in self._hosts:
            host.stop()


_HOSTS: DecoderHosts | None = None
_HOSTS_LOCK = threading.Lock()


def hosts() -> DecoderHosts | None:
    """The decoder processes, or None when decoding runs in this process."""
    return _HOSTS


def start(count: int, warm: int) -> DecoderHosts | None:
    """Start ``count`` decoder processes (0: decode in this process), each warming ``warm`` per kind."""
    global _HOSTS
    with _HOSTS_LOCK:
        if _HOSTS is None and count > 0:
            _HOSTS = DecoderHosts(count, warm)
        return _HOSTS


def stop() -> None:
    global _HOSTS
    with _HOSTS_LOCK:
        current, _HOSTS = _HOSTS, None
    if current is not None:
        current.stop()
