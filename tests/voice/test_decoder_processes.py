"""The offline recognizer in decoder processes: decoders load and decode outside this process, the
transcripts are the ones in-process decoding gives, and a dead process is replaced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from parley.voice.engines import lexicon, sphinx_host
from parley.voice.engines.base import EngineUnavailable
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt, SphinxStream, pool


async def speak(text: str, voice: str) -> bytes:
    return b"".join([chunk async for chunk in EspeakTts(voice).synthesize(text, sample_rate=16000)])


async def hear(audio: bytes, language: str, phrases: list[str] | None) -> list[str]:
    stream = await PocketsphinxStt().open_stream(language, 16000, phrases=phrases)
    padded = bytes(8000) + audio + bytes(16000)
    for offset in range(0, len(padded), 640):
        stream.feed(padded[offset : offset + 640])
    await stream.finish()
    texts = [t.text async for t in stream if t.is_final]
    await stream.aclose()
    return texts


@pytest.fixture
async def hosts() -> AsyncIterator[sphinx_host.DecoderHosts]:
    assert sphinx_host.hosts() is None  # the suite decodes in-process unless a test says otherwise
    started = await asyncio.to_thread(sphinx_host.start, 1, 0)
    assert started is not None
    try:
        yield started
    finally:
        await asyncio.to_thread(sphinx_host.stop)


@pytest.mark.slow  # starts the decoder processes: 10 to 17 s
async def test_a_decoder_process_hears_what_this_process_hears(hosts: sphinx_host.DecoderHosts) -> None:
    audio = await speak("vier zwei", "de")
    phrases = lexicon.number_words("de")
    built_here = pool().created
    remote = await hear(audio, "de", phrases)
    assert pool().created == built_here  # nothing was built in this process
    assert (await asyncio.to_thread(hosts.ping))[0] >= 1  # the decoder process built it
    sphinx_host.stop()
    local = await hear(audio, "de", phrases)
    assert remote and remote == local  # same decoder, same audio, same words


async def test_english_free_speech_and_phrases_decode_in_the_process(hosts: sphinx_host.DecoderHosts) -> None:
    audio = await speak("one two three", "en-us")
    texts = await hear(audio, "en", ["one", "two", "three", "four"])
    assert texts and set(" ".join(texts).split()) <= {"one", "two", "three", "four"}


async def test_a_dead_decoder_process_ends_its_streams_and_is_replaced(
    hosts: sphinx_host.DecoderHosts,
) -> None:
    stream = await PocketsphinxStt().open_stream("de", 16000, phrases=lexicon.yes_no_words("de"))
    assert isinstance(stream, SphinxStream)
    await asyncio.to_thread(hosts.kill)
    stream.feed(bytes(640) * 10)
    await stream.finish()
    with pytest.raises(EngineUnavailable):
        _ = [t async for t in stream]
    await stream.aclose()
    # the next stream gets a new process and is heard again
    texts = await hear(await speak("ja", "de"), "de", lexicon.yes_no_words("de"))
    assert texts
    assert all(h.alive() for h in hosts.processes)
