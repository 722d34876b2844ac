"""Offline streaming speech recognition with PocketSphinx and its bundled US English model.

Audio is resampled to 16 kHz, gated by the VAD (so silence costs no decoding) and decoded in a worker
thread: partial hypotheses while someone speaks, a final transcript with word timings at the end of
each utterance (after the VAD's hangover) and when the stream finishes.

Only a US English model ships with the package. German is heard through it with a grammar: German
words transcribed to the model's phones (:mod:`parley.voice.engines.lexicon`), so a German decoder
knows numbers, ja/nein and a few answer words, nothing else. Numbers and yes/no in English use the
same kind of small-lexicon decoder (tens of milliseconds to load); free English speech uses the full
dictionary and language model. Other languages need a model on disk:
``<data_dir>/models/pocketsphinx/<language>/`` with the acoustic model in ``hmm/``, a pronunciation
dictionary ``*.dict`` and a language model ``*.lm.bin`` or ``*.lm``. Without one, the language is
refused with a sentence saying what the engine can serve.

Creating a decoder holds the GIL (0.2 s for the full model on an idle machine, seconds under load), so
:func:`warm_pool` fills the pool at start-up, off the event loop, and finished streams hand their
decoders back. The decoders, their pool and one stream's decoding state are in
:mod:`parley.voice.engines.sphinx_decoder` (what a decoder process runs); this module is the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Protocol

from parley.voice.audio import Resampler
from parley.voice.engines import lexicon, sphinx_host
from parley.voice.engines.base import (
    EngineUnavailable,
    LanguageUnavailable,
    SttEngine,
    SttStream,
    Transcript,
)
from parley.voice.engines.sphinx_decoder import (
    BUNDLED,
    DECODE_EXECUTOR,
    RATE,
    DecoderSession,
    ModelFiles,
    phrase_grammar,
)
from parley.voice.engines.sphinx_decoder import DecoderKind as DecoderKind
from parley.voice.engines.sphinx_decoder import Lexicon as Lexicon
from parley.voice.engines.sphinx_decoder import find_model as find_model
from parley.voice.engines.sphinx_decoder import normalise_language as normalise_language
from parley.voice.engines.sphinx_decoder import pool as pool
from parley.voice.engines.sphinx_decoder import sphinx_installed as sphinx_installed
from parley.voice.engines.sphinx_decoder import warm_pool as warm_pool
from parley.voice.engines.vad import vad_installed


class SessionPort(Protocol):
    """What a stream drives: a :class:`DecoderSession` here, or one in a decoder process."""

    def process(self, audio: bytes, final: bool) -> list[Transcript]: ...

    def release(self) -> None: ...


class SphinxStream(SttStream):
    def __init__(self, session: SessionPort, sample_rate: int, executor: Executor) -> None:
        self._session: SessionPort | None = session
        self._executor = executor
        self._resampler = Resampler(sample_rate, RATE)
        self._audio: list[bytes] = []
        self._wake = asyncio.Event()
        self._finishing = False
        self._closed = False
        self._results: asyncio.Queue[Transcript | BaseException | None] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def feed(self, pcm16: bytes) -> None:
        if self._finishing or self._closed:
            raise RuntimeError("the stream is finished")
        if len(pcm16) % 2:
            raise ValueError("PCM16 audio must have an even number of bytes")
        converted = self._resampler.feed(pcm16)
        if converted:
            self._audio.append(converted)
            self._wake.set()

    async def finish(self) -> None:
        if not self._finishing:
            tail = self._resampler.flush()
            if tail:
                self._audio.append(tail)
            self._finishing = True
            self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        session = self._session
        assert session is not None
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                audio = b"".join(self._audio)
                self._audio.clear()
                final = self._finishing
                for item in await loop.run_in_executor(self._executor, session.process, audio, final):
                    self._results.put_nowait(item)
                if final:
                    break
        except Exception as exc:  # surfaced to the reader
            self._results.put_nowait(exc)
        finally:
            self._results.put_nowait(None)
            self._release()

    def _release(self) -> None:
        session, self._session = self._session, None
        if isinstance(session, DecoderSession):
            session.release()  # cheap here: the decoder goes back to this process's pool
        elif session is not None:
            # in a decoder process this is a round trip: never on the event loop's time
            self._executor.submit(session.release)

    async def __aiter__(self) -> AsyncIterator[Transcript]:
        while True:
            item = await self._results.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class PocketsphinxStt(SttEngine):
    name = "pocketsphinx"

    def __init__(self, language: str = BUNDLED, models_dir: Path | None = None, use_vad: bool = True) -> None:
        self.language = language
        self.models_dir = models_dir
        self.use_vad = use_vad and vad_installed()

    def _model(self, language: str) -> ModelFiles | None:
        model = find_model(self.models_dir, language)
        if model is None and language != BUNDLED and lexicon.base_language(language) not in lexicon.LEXICONS:
            raise LanguageUnavailable(unavailable_sentence(language, self.models_dir))
        return model

    def kind_for(self, language: str, phrases: Sequence[str] | None) -> tuple[DecoderKind, str | None]:
        """The decoder kind and grammar for a stream (public for tests and the benchmark)."""
        model = self._model(language)
        if model is not None:
            return model, None  # a grammar needs the decoder's dictionary: made in open_stream
        base = lexicon.base_language(language)
        if base == "en":
            # English keeps the full dictionary, with a loop over the node's words when it has any:
            # the structured English number grammar measured no better on digit strings
            return None, None
        return Lexicon(base), lexicon.grammar_for(phrases, base)

    grammar = staticmethod(phrase_grammar)

    async def open_stream(
        self, language: str | None, sample_rate: int, *, phrases: Sequence[str] | None = None
    ) -> SttStream:
        if not sphinx_installed():
            raise EngineUnavailable(
                "PocketSphinx is not installed on this server; install it with 'pip install pocketsphinx'."
            )
        chosen = normalise_language(language or self.language)
        kind, grammar = self.kind_for(chosen, phrases)
        loop = asyncio.get_running_loop()
        hosts = sphinx_host.hosts()
        if hosts is not None:  # decoders live in decoder processes: nothing here holds the GIL for long
            session: SessionPort = await loop.run_in_executor(
                sphinx_host.EXECUTOR, hosts.open, kind, grammar, phrases, self.use_vad
            )
            return SphinxStream(session, sample_rate, sphinx_host.EXECUTOR)
        phrase_list = list(phrases) if phrases else None
        session = await loop.run_in_executor(
            DECODE_EXECUTOR, DecoderSession, kind, grammar, phrase_list, self.use_vad
        )
        return SphinxStream(session, sample_rate, DECODE_EXECUTOR)


def languages(models_dir: Path | None) -> list[str]:
    """What PocketSphinx can hear on this server: the bundled model, German by grammar, models on disk."""
    served = ["en", "de"]
    if models_dir is not None and (models_dir / "pocketsphinx").is_dir():
        served += sorted(
            p.name for p in (models_dir / "pocketsphinx").iterdir() if find_model(models_dir, p.name)
        )
    return list(dict.fromkeys(served))


def serves(language: str, models_dir: Path | None) -> bool:
    chosen = normalise_language(language)
    return (
        chosen == BUNDLED
        or lexicon.base_language(chosen) in lexicon.LEXICONS
        or (find_model(models_dir, chosen) is not None)
    )


def unavailable_sentence(language: str, models_dir: Path | None) -> str:
    return (
        f"PocketSphinx on this server cannot hear {language!r}: it serves US English (en, en-US: free "
        "speech), German (de, de-DE: numbers, ja/nein and choices of known words, through a grammar on the "
        "bundled model)"
        + (
            f" and the models on disk ({', '.join(languages(models_dir)[2:])})"
            if languages(models_dir)[2:]
            else ""
        )
        + f". Put a model in <data dir>/models/pocketsphinx/{language}/ (hmm/, *.dict, *.lm.bin) or "
        "configure a vendor speech-to-text provider."
    )
