"""German on the offline default: the bundled US English model with a German grammar and lexicon,
and decoders loaded off the event loop (the pool)."""

from __future__ import annotations

import asyncio
import threading

from parley.flows.definition import FlowDefinition
from parley.runtime.numbers import spoken_digits
from parley.voice.engines import lexicon
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import Lexicon, PocketsphinxStt, pool, warm_pool
from parley.voice.session_call import phrases_for


async def speak(text: str, voice: str) -> bytes:
    return b"".join([chunk async for chunk in EspeakTts(voice).synthesize(text, sample_rate=16000)])


async def hear(audio: bytes, language: str, phrases: list[str] | None) -> str:
    stream = await PocketsphinxStt().open_stream(language, 16000, phrases=phrases)
    padded = bytes(8000) + audio + bytes(16000)
    for offset in range(0, len(padded), 640):
        stream.feed(padded[offset : offset + 640])
    await stream.finish()
    text = " ".join([t.text async for t in stream if t.is_final])
    await stream.aclose()
    return text


def test_the_german_lexicon_is_a_pocketsphinx_dictionary_in_the_models_phones() -> None:
    text = lexicon.dictionary_text("de")
    assert "vier F IY R\n" in text and "zwei T S V AY\n" in text and "neun N OY N\n" in text
    assert "ja Y AA\n" in text and "nein N AY N\n" in text
    phones = {"AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH",
              "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH",
              "UW", "V", "W", "Y", "Z", "ZH"}  # fmt: skip
    for line in text.splitlines():
        assert set(line.split()[1:]) <= phones, line


def test_collect_nodes_hand_their_words_to_the_recognizer_in_the_calls_language() -> None:
    definition = FlowDefinition.model_validate(
        {
            "language": "de",
            "start_node": "n",
            "nodes": [
                {"id": "n", "type": "collect", "variable": "n", "kind": "digits", "prompt": "?", "next": "y"},
                {"id": "y", "type": "collect", "variable": "y", "kind": "yes_no", "prompt": "?", "next": "e"},
                {"id": "e", "type": "end", "text": "."},
            ],
        }
    )
    german = phrases_for(definition, "n", "de")
    assert german is not None and "zwölf" in german and "hundert" in german
    assert lexicon.classify(german, "de") == "number"
    assert phrases_for(definition, "y", "de") == lexicon.yes_no_words("de")
    assert phrases_for(definition, "n", "en") == [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
    ]
    assert phrases_for(definition, "n", "fr") is None


async def test_german_streams_use_the_german_grammar_and_speak_german_words() -> None:
    engine = PocketsphinxStt()
    kind, grammar = engine.kind_for("de-de", lexicon.number_words("de"))
    assert kind == Lexicon("de") and grammar is not None and "<unit> und <tens>" in grammar
    text = await hear(await speak("vier", "de"), "de", lexicon.number_words("de"))
    words = text.split()
    assert words, "nothing was heard"
    assert set(words) <= {lexicon.display(w) for w in lexicon.GERMAN}  # German words only
    assert spoken_digits(text) is not None  # and they name digits


async def test_decoders_load_in_the_pool_off_the_event_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []
    built_before = pool().created

    def warm() -> int:
        seen.append(threading.get_ident())
        return warm_pool(1, [Lexicon("de")])

    await asyncio.to_thread(warm)
    assert seen and seen[0] != loop_thread
    assert pool().free(Lexicon("de")) >= 1
    created = pool().created
    assert created >= built_before
    # a stream takes a warmed decoder: nothing is built while the call is on
    stream = await PocketsphinxStt().open_stream("de", 16000, phrases=lexicon.yes_no_words("de"))
    assert pool().created == created
    await stream.finish()
    _ = [t async for t in stream]
    await stream.aclose()
    assert pool().free(Lexicon("de")) >= 1  # handed back
