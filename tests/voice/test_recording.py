"""The stereo recorder: caller left, agent right, one timeline, barge-in cuts, a cap, temp files."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from parley.voice.recording import StereoRecorder

RATE = 8000
MS20 = RATE // 50  # samples in 20 ms


def tone(samples: int, value: int) -> bytes:
    return np.full(samples, value, dtype="<i2").tobytes()


def read(path: Path) -> tuple[wave._wave_params, np.ndarray]:
    with wave.open(str(path), "rb") as reader:
        params = reader.getparams()
        data = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2").reshape(-1, 2)
    return params, data


def test_both_sides_share_one_timeline(tmp_path: Path) -> None:
    recorder = StereoRecorder(RATE, 60, tmp_path)
    recorder.add_caller(tone(MS20 * 5, 1000))  # 100 ms of the caller
    recorder.add_agent(tone(MS20 * 3, 2000))  # the agent answers: placed at the caller's position
    recorder.add_caller(tone(MS20 * 5, 0))  # 100 ms of silence while the agent speaks
    path = recorder.finish()
    assert path is not None and path.parent == tmp_path
    params, data = read(path)
    assert (params.nchannels, params.sampwidth, params.framerate) == (2, 2, RATE)
    assert len(data) == MS20 * 10
    assert (data[: MS20 * 5, 0] == 1000).all() and (data[: MS20 * 5, 1] == 0).all()
    assert (data[MS20 * 5 : MS20 * 8, 1] == 2000).all() and (data[MS20 * 5 :, 0] == 0).all()
    assert (data[MS20 * 8 :, 1] == 0).all()


def test_agent_audio_follows_the_agent_audio_before_it(tmp_path: Path) -> None:
    recorder = StereoRecorder(RATE, 60, tmp_path)
    recorder.add_agent(tone(MS20, 1))  # sent ahead of real time: queued on the timeline
    recorder.add_agent(tone(MS20, 2))
    recorder.add_caller(tone(MS20 * 3, 5))
    path = recorder.finish()
    assert path is not None
    _, data = read(path)
    assert list(data[::MS20, 1]) == [1, 2, 0] and (data[:, 0] == 5).all()


def test_barge_in_drops_the_agent_audio_not_heard_yet(tmp_path: Path) -> None:
    recorder = StereoRecorder(RATE, 60, tmp_path)
    recorder.add_caller(tone(MS20, 0))
    recorder.add_agent(tone(MS20 * 10, 3000))  # 200 ms handed to the transport at once
    recorder.add_caller(tone(MS20 * 2, 900))  # the caller speaks over the first 40 ms
    recorder.interrupt()  # the transport's buffer is cleared: the other 160 ms were never heard
    recorder.add_caller(tone(MS20 * 2, 0))
    path = recorder.finish()
    assert path is not None
    _, data = read(path)
    assert len(data) == MS20 * 5
    assert np.count_nonzero(data[:, 1]) == MS20 * 2 and (data[MS20 : MS20 * 3, 1] == 3000).all()


def test_the_agent_speaking_last_is_kept_and_the_cap_holds(tmp_path: Path) -> None:
    recorder = StereoRecorder(RATE, 1, tmp_path)  # one second at most
    recorder.add_caller(tone(MS20 * 10, 7))
    recorder.add_agent(tone(MS20 * 10, 8))  # the goodbye, after the caller's last audio
    path = recorder.finish()
    assert path is not None
    _, data = read(path)
    assert len(data) == MS20 * 20 and (data[MS20 * 10 :, 1] == 8).all()
    capped = StereoRecorder(RATE, 1, tmp_path)
    capped.add_caller(tone(RATE * 3, 7))
    assert capped.truncated
    path = capped.finish()
    assert path is not None
    params, _ = read(path)
    assert params.nframes == RATE


def test_nothing_said_leaves_no_file_and_discard_removes_it(tmp_path: Path) -> None:
    silent = StereoRecorder(RATE, 60, tmp_path)
    assert silent.finish() is None
    dropped = StereoRecorder(RATE, 60, tmp_path)
    dropped.add_caller(tone(MS20, 1))
    dropped.discard()
    assert list(tmp_path.iterdir()) == []


def test_memory_holds_only_the_agent_audio_not_heard_yet(tmp_path: Path) -> None:
    recorder = StereoRecorder(RATE, 600, tmp_path)
    for _ in range(500):  # ten seconds of both sides
        recorder.add_caller(tone(MS20, 1))
        recorder.add_agent(tone(MS20, 2))
    # only the agent's last frame is ahead of the caller, the rest is on disk
    assert len(recorder._agent) == MS20 * 2 and recorder.written == MS20 * 500
    recorder.add_agent(tone(RATE * 40, 2))  # 40 s ahead of the caller: written out past 30 s
    assert len(recorder._agent) == 0 and recorder.written == MS20 * 501 + RATE * 40
    assert recorder.finish() is not None
