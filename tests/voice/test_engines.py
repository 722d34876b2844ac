"""The offline engines for real: eSpeak NG speaks, PocketSphinx listens, WebRTC's VAD gates."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parley.voice.engines.base import LanguageUnavailable, Transcript
from parley.voice.engines.espeak import EspeakTts
from parley.voice.engines.sphinx import PocketsphinxStt, find_model
from parley.voice.engines.vad import SpeechSegmenter, WebRtcVad

DIGITS = ["zero one two three four five six seven eight nine"]
WORDS = ["one", "two", "three", "four"]


async def speak(text: str, voice: str = "en-us", rate: int = 16000) -> bytes:
    return b"".join([chunk async for chunk in EspeakTts(voice).synthesize(text, sample_rate=rate)])


async def recognise(
    audio: bytes, rate: int = 16000, phrases: list[str] | None = None, use_vad: bool = True
) -> list[Transcript]:
    stream = await PocketsphinxStt(use_vad=use_vad).open_stream("en", rate, phrases=phrases)
    step = rate // 50 * 2  # 20 ms pieces, as a live call delivers them
    for offset in range(0, len(audio), step):
        stream.feed(audio[offset : offset + step])
    await stream.finish()
    results = [t async for t in stream]
    await stream.aclose()
    return results


async def test_espeak_speaks_english_and_german_at_the_asked_rate() -> None:
    english = await speak("Your car is ready.", "en-us", 16000)
    german = await speak("Ihr Auto ist fertig.", "de", 8000)
    for audio, rate in ((english, 16000), (german, 8000)):
        seconds = len(audio) / 2 / rate
        assert 0.5 < seconds < 4
        assert np.abs(np.frombuffer(audio, dtype="<i2")).max() > 1000


async def test_espeak_refuses_a_voice_it_does_not_have() -> None:
    with pytest.raises(LanguageUnavailable, match="no voice 'xx-nope'"):
        await speak("hello", "xx-nope")


async def test_closing_the_speech_iterator_stops_synthesis_early() -> None:
    engine = EspeakTts("en-us")
    long_text = "one two three four five six seven eight nine ten. " * 40
    stream = engine.synthesize(long_text, sample_rate=16000)
    first = await anext(stream)
    assert first
    await stream.aclose()
    await engine.idle()
    cancelled = engine.last_run
    assert cancelled is not None and cancelled.cancelled and not cancelled.finished

    complete = EspeakTts("en-us")
    audio = b"".join([c async for c in complete.synthesize(long_text, sample_rate=16000)])
    assert complete.last_run is not None and complete.last_run.finished
    # The closed run produced (at 22.05 kHz) much less than the whole text needs.
    assert cancelled.samples < complete.last_run.samples / 2
    assert len(audio) / 2 / 16000 > 60


async def test_round_trip_digits_from_espeak_through_pocketsphinx() -> None:
    audio = await speak("one two three four")
    results = await recognise(audio, phrases=DIGITS)
    finals = [t for t in results if t.is_final]
    assert len(finals) == 1
    words = finals[0].text.split()
    assert sum(1 for w in WORDS if w in words) >= 3, finals[0].text
    assert finals[0].words and finals[0].start_ms < finals[0].end_ms
    assert any(not t.is_final for t in results)  # partial hypotheses came first


async def test_open_vocabulary_recognition_runs_at_8khz_input_with_timings() -> None:
    audio = await speak("one two three four", rate=8000)
    padded = b"\0" * 8000 + audio + b"\0" * 16000  # half a second of silence before, a second after
    results = await recognise(padded, rate=8000)
    finals = [t for t in results if t.is_final]
    assert len(finals) == 1 and finals[0].text
    # The VAD put the utterance after the leading silence.
    assert 250 <= finals[0].start_ms <= 1000
    assert finals[0].confidence is not None and 0 <= finals[0].confidence <= 1


async def test_silence_gives_no_transcript() -> None:
    assert await recognise(b"\0" * 32000) == []


async def test_a_cough_heard_with_a_grammar_gives_no_transcript_and_no_error() -> None:
    # A grammar search that matches nothing used to fail the utterance (no segments at all), so the
    # agent said "Sorry, I did not catch that" over a cough instead of going on.
    from parley.evaluations.voice import noise_burst

    cough = b"\0" * 9600 + b"".join(noise_burst(250)) + b"\0" * 6400
    assert await recognise(cough, phrases=["yes", "no", "yeah", "nope"]) == []


async def test_other_languages_need_a_model_on_disk(tmp_path: Path) -> None:
    with pytest.raises(LanguageUnavailable, match=r"cannot hear 'fr'.*German"):
        await PocketsphinxStt(models_dir=tmp_path).open_stream("fr", 16000)
    model = tmp_path / "pocketsphinx" / "de"
    (model / "hmm").mkdir(parents=True)
    (model / "de.dict").write_text("hallo h a l o\n")
    (model / "de.lm.bin").write_bytes(b"")
    found = find_model(tmp_path, "de")
    assert found is not None and found.hmm.endswith("hmm") and found.lm.endswith("de.lm.bin")


async def test_vad_finds_speech_in_speech_and_none_in_silence() -> None:
    vad = WebRtcVad(16000, 2)
    audio = await speak("Where is my car? It should be ready today.")
    frame = vad.frame_bytes(20)
    frames = [audio[i : i + frame] for i in range(0, len(audio) - frame + 1, frame)]
    voiced = sum(vad.is_speech(f) for f in frames)
    assert voiced > len(frames) * 0.4
    quiet = WebRtcVad(16000, 2)  # a fresh detector: WebRTC's VAD keeps a hangover of its own
    assert not any(quiet.is_speech(b"\0" * frame) for _ in range(50))
    # Faint hiss is not speech for the strictest setting.
    strict = WebRtcVad(16000, 3)
    hiss = np.random.default_rng(1).normal(0, 30, 50 * frame // 2).astype("<i2").tobytes()
    assert not any(strict.is_speech(hiss[i : i + frame]) for i in range(0, len(hiss), frame))
    with pytest.raises(ValueError, match="10, 20 or 30 ms"):
        vad.is_speech(b"\0" * 100)


async def test_segmenter_endpoints_two_utterances() -> None:
    vad = WebRtcVad(8000, 2)
    audio = await speak("one two three", rate=8000)
    gap = b"\0" * 8000 * 2  # a second of silence
    stream = gap + audio + gap + audio + gap
    segmenter = SpeechSegmenter(vad, frame_ms=20, frame_bytes=vad.frame_bytes(20), stop_ms=400)
    frame = vad.frame_bytes(20)
    events = [segmenter.process(stream[i : i + frame]) for i in range(0, len(stream) - frame + 1, frame)]
    kinds = [(e.kind, e.at_ms) for e in events if e is not None]
    assert [k for k, _ in kinds] == ["start", "end", "start", "end"]
    assert 700 <= kinds[0][1] <= 1300  # speech began after the first second of silence
    assert kinds[1][1] - kinds[0][1] > 500
