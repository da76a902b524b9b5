"""Video and audio inputs: PyAV frames (uniform + scene changes), audio as WAV, transcription."""

from agents.media.audio import Transcriber, extract_wav
from agents.media.frames import Frame, FrameSample, MediaError, sample_frames
from agents.media.prepare import AUDIO_MODES, MediaBundle, prepare_video

__all__ = ["AUDIO_MODES", "Frame", "FrameSample", "MediaBundle", "MediaError", "Transcriber", "extract_wav", "prepare_video", "sample_frames"]
