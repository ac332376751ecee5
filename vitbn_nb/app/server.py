"""The digit app's server: which model, MNIST-style preprocessing, and the Flask routes (``GET /``, ``GET
/api/model``, ``POST /api/predict`` with the image as the body); a bad request gets a 4xx and ``{"error": ...}``.

It is served by waitress, a production WSGI server that reads each request whole, without a thread of its own, before
the app sees it: an upload takes a decode slot only once its body is in, so no slow client holds one. It sheds load
rather than queue it: at most :data:`MAX_DECODES` uploads are decoded at once (another gets a 503), at most
:data:`CONNECTIONS` connections are held (more wait in the listen backlog) and served by :data:`THREADS` threads, a
connection that sends nothing for :data:`READ_SECONDS` is dropped and so is a request not whole
:data:`REQUEST_SECONDS` after its first byte, progressive JPEGs are refused, and a decode is stopped after
:data:`DECODE_SECONDS`."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError
from torch import nn

from ..engines.training import train
from ..paths import runs_dir
from ..store import servable
from ..store.bundle import refuse_half_imported
from ..store.records import RunStoreError
from ..store.run_folder import Run, is_run_name
from ..store.servable import candidates, usable

STATIC = Path(__file__).with_name("static")
MAX_BODY_BYTES = 2 * 2**20
#: What is read of a body: one byte over the limit, so that a chunked body (werkzeug cuts one at its limit without a
#: word, having no Content-Length to refuse) longer than the limit is seen to be.
_READ_LIMIT = MAX_BODY_BYTES + 1
MIN_SIDE, MAX_SIDE = 28, 2048
SIZE_FIX = f"send one whose sides are between {MIN_SIDE} and {MAX_SIDE} pixels"
#: The only formats an upload is read as: each states its size in its header and decodes only when loaded (others
#: decode inside ``Image.open``, or hand the upload to an external program, as EPS does to Ghostscript).
FORMATS = ("PNG", "JPEG", "GIF", "BMP")
FORMAT_NAMES = "PNG, JPEG, GIF or BMP"
#: Uploads read and decoded at once (each costs up to its body and about 100 MB to decode a 2048x2048 RGBA image);
#: decoding is CPU-bound, so more at once would not answer sooner.
MAX_DECODES = 2
#: Seconds a connection may send nothing (its request line, headers or body) before it is dropped.
READ_SECONDS = 10
#: Seconds a request has from its first byte to arrive whole (its line, headers and body): a 2 MiB upload at 70 KiB/s
#: or faster; a slower one is dropped (waitress bounds the silence between reads, not a request's whole arrival).
REQUEST_SECONDS = 30
#: Connections held at once (more wait in the listen backlog until one closes), and the threads that answer them.
CONNECTIONS, THREADS = 100, 4
TOO_LARGE = f"body too large: send at most {MAX_BODY_BYTES // 2**20} MiB"
#: Seconds a decode may take; it is stopped at its next read of the upload (Pillow reads in 64 KiB pieces).
DECODE_SECONDS = 5.0
#: A pixel is ink when brighter than this (on [0, 1], after making the ink the bright side).
INK_THRESHOLD = 0.1
#: What a request to /api/predict must hold, for the messages that refuse one.
EXPECTED = (
    'send the image\'s bytes as the request body (curl --data-binary @digit.png -H "Content-Type: image/png"), '
    'or as a multipart upload in a file field named "image"'
)


class BadImage(ValueError):
    """A request the app cannot answer; ``status`` is the HTTP status to send."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def load_model(run_id: str | None = None, *, train_if_missing: bool = True, log=print) -> tuple[nn.Module, Run]:
    """The model to serve (eval mode, on the CPU) and its run; trains ``servable.FALLBACK`` if nothing servable is
    stored.
    A damaged run is passed over (named); one asked for stops the app with the reason. A store an import has not
    finished is never read as whole: the run it would serve may be missing."""
    store = runs_dir()  # a store that cannot be a folder is its own message
    try:
        refuse_half_imported(store, "the run the app would serve may be missing")
    except ValueError as error:
        raise SystemExit(str(error)) from None
    if run_id is not None:
        # A path would serve a run from outside the store, one nobody chose to publish.
        if not is_run_name(run_id):
            raise SystemExit(
                f"--run {run_id!r}: not a run folder name (no '/', no '..', not starting with '.'); give the "
                f"name of a run folder in {runs_dir()}"
            )
        if not (runs_dir() / run_id / "record.json").is_file():
            raise SystemExit(f"--run {run_id}: no such run in {runs_dir()}")
        try:
            run = Run(runs_dir() / run_id)
            run.config  # noqa: B018 -- refused here, with the reason, rather than as a traceback when logged
            if not usable(run):
                raise SystemExit(f"--run {run_id}: not a finished 28x28 ViT-family digit classifier")
            model, why = run.load_model("cpu"), "asked for with --run"
        except RunStoreError as error:
            raise SystemExit(f"--run {run_id}: cannot serve it: {error}") from None
    else:
        found, skipped = candidates()
        model = run = None
        for candidate in found:
            try:
                model, run, why = candidate.load_model("cpu"), candidate, "the best servable run in the store"
                break
            except RunStoreError as error:
                skipped.append(f"{candidate.run_id}: damaged ({error})")
        for note in skipped:
            log(f"Passed over {note}")
        if run is None:
            if not train_if_missing:
                raise SystemExit(
                    f"No servable ViT-family model in {runs_dir()} (smoke-scale and damaged runs are "
                    "passed over). Run `make book` (or `python -m vitbn_nb.app` without --no-train, "
                    "which trains a small one first)."
                )
            log(
                f"No servable ViT-family run in {runs_dir()}: training a small ViTBNFFN first "
                f"(depth 2, {servable.FALLBACK.epochs} epochs on {servable.FALLBACK.train_size:,} augmented MNIST "
                "images, about a minute on two CPU cores). `make book` trains the book's models, which the app then "
                "prefers."
            )
            run = train(servable.FALLBACK)
            model, why = run.load_model("cpu"), "the app's own fallback, trained now"
    config = run.config
    log(
        f"Serving run {run.run_id} ({why}): {config.model} depth {config.model_kwargs.get('depth')}, "
        f"{'augmented ' if config.dataset == 'mnist_aug' else ''}MNIST, {run.record.get('train_images', 0):,} "
        f"training images, final test accuracy {run.final_accuracy:.2f} %; loaded once."
    )
    return model, run


# -- The drawing, made like an MNIST digit ----------------------------------------------------------------------------
class _TooSlow(Exception):
    """A decode that ran past :data:`DECODE_SECONDS`."""


class _Timed(io.BytesIO):
    """The upload as Pillow reads it, piece by piece: a read after the deadline stops the decode."""

    def __init__(self, data: bytes, seconds: float):
        super().__init__(data)
        self.deadline = time.monotonic() + seconds

    def read(self, size=-1):
        if time.monotonic() > self.deadline:
            raise _TooSlow
        return super().read(size)


_TOO_SLOW = f"too slow to decode: it took more than {DECODE_SECONDS:g} s; send a smaller or simpler image (a PNG)"


def read_image(data: bytes) -> np.ndarray:
    """Image bytes -> float ``(H, W)`` in [0, 1] with the ink bright (as in MNIST); raises :class:`BadImage`. Only
    :data:`FORMATS` are tried, the size checked from the header before a pixel is decoded, progressive JPEGs refused
    and the decode stopped after :data:`DECODE_SECONDS`."""
    if not data:
        raise BadImage(f"empty body: {EXPECTED}")
    try:
        image = Image.open(_Timed(data, DECODE_SECONDS), formats=FORMATS)
    except _TooSlow:
        raise BadImage(_TOO_SLOW) from None
    except Image.DecompressionBombError:
        raise BadImage(f"wrong size: the image has more pixels than {MAX_SIDE}x{MAX_SIDE}; {SIZE_FIX}") from None
    except UnidentifiedImageError:
        raise BadImage(f"not an image the app reads: send a {FORMAT_NAMES} image; {EXPECTED}") from None
    except Exception as error:  # a header a plugin cannot parse: struct, index, value errors and more
        raise BadImage(f"not an image: its {FORMAT_NAMES} header cannot be read ({type(error).__name__})") from None
    width, height = image.size  # from the header: nothing is decoded yet
    if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE):
        raise BadImage(f"wrong size: the image is {width}x{height} pixels; {SIZE_FIX}")
    if image.format == "JPEG" and image.info.get("progressive"):  # each of its scans decodes the whole image again
        raise BadImage("a progressive JPEG, which the app does not decode: send a baseline JPEG or a PNG")
    try:
        image.load()
    except _TooSlow:
        raise BadImage(_TOO_SLOW) from None
    except Exception as error:  # a damaged payload: OSError, SyntaxError, ValueError, EOFError ... all the sender's
        raise BadImage(f"not an image: the {image.format} data cannot be decoded ({type(error).__name__})") from None
    try:
        return _ink(image)
    except ValueError as error:  # a mode that cannot be converted to grey or RGB
        raise BadImage(
            f"unreadable colours: an image in mode {image.mode} cannot be converted to grey levels ({error}); "
            "send a greyscale, RGB or RGBA image (PNG)"
        ) from None


def _ink(image: Image.Image) -> np.ndarray:
    if "A" in image.getbands() or (image.mode == "P" and "transparency" in image.info):
        rgba = np.asarray(image.convert("RGBA"), dtype=np.float32) / 255
        alpha, luminance = rgba[..., 3], rgba[..., :3].mean(axis=-1)
        drawn = alpha > 0.5
        # Strokes on a transparent canvas: dark strokes are ink by their opacity, light ones by their
        # light. An opaque image (a browser canvas's PNG has alpha 1 everywhere) is read by its grey levels.
        if alpha.min() < 0.99:
            return alpha if drawn.any() and luminance[drawn].mean() < 0.5 else alpha * luminance
    gray = np.asarray(image.convert("L"), dtype=np.float32) / 255
    border = np.concatenate([gray[0], gray[-1], gray[:, 0], gray[:, -1]])
    return 1.0 - gray if np.median(border) > 0.5 else gray  # dark ink on light paper: turn it round


def mnist_style(ink: np.ndarray) -> np.ndarray:
    """MNIST's normalisation: crop to the ink, longer side to 20 pixels (antialiased), mass centre at 28x28's centre."""
    mask = ink > INK_THRESHOLD
    if not mask.any():
        raise BadImage("the drawing is empty: no ink found (draw a digit first)")
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    crop = ink[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    h, w = crop.shape
    scale = 20 / max(h, w)
    size = (max(1, round(h * scale)), max(1, round(w * scale)))
    pixels = torch.from_numpy(np.ascontiguousarray(crop))[None, None]
    box = F.interpolate(pixels, size=size, mode="bilinear", antialias=True, align_corners=False)[0, 0].clamp(0, 1)
    box = box.numpy()
    h, w = box.shape
    cy, cx = (np.indices(box.shape) * box).sum(axis=(1, 2)) / box.sum()
    top = int(np.clip(round(14 - cy), 0, 28 - h))  # MNIST's centres of mass sit at about (14, 14)
    left = int(np.clip(round(14 - cx), 0, 28 - w))
    frame = np.zeros((28, 28), dtype=np.float32)
    frame[top : top + h, left : left + w] = box
    return frame


def preprocess(data: bytes) -> np.ndarray:
    """Request body -> the 28x28 float image the model sees."""
    return mnist_style(read_image(data))


@torch.inference_mode()
def predict(model: nn.Module, digit: np.ndarray) -> dict:
    """Class probabilities of one 28x28 image in [0, 1]."""
    probabilities = model(torch.from_numpy(digit)[None, None].float()).softmax(dim=1)[0]
    top = probabilities.topk(3)
    return {
        "digit": int(top.indices[0]),
        "confidence": float(top.values[0]),
        "top3": [{"digit": int(d), "probability": float(p)} for p, d in zip(top.values, top.indices)],
        "probabilities": [float(p) for p in probabilities],
    }


def _png_data_url(digit: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(np.round(digit * 255).astype(np.uint8), mode="L").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


# -- The Flask app ----------------------------------------------------------------------------------------------------
def _shedding(wsgi_app, slots: threading.BoundedSemaphore):
    """``wsgi_app`` for at most ``slots`` uploads at once: another is answered 503 with ``Retry-After`` at once, its
    body read and dropped in 64 KiB pieces (so that the client sees the answer, and no body is held)."""
    from werkzeug.exceptions import HTTPException
    from werkzeug.wrappers import Response
    from werkzeug.wsgi import get_input_stream

    def shed(environ, start_response):
        if environ.get("REQUEST_METHOD") != "POST":
            return wsgi_app(environ, start_response)
        if not slots.acquire(blocking=False):
            try:
                stream, left = get_input_stream(environ, max_content_length=_READ_LIMIT), _READ_LIMIT
                while left > 0 and (chunk := stream.read(min(2**16, left))):
                    left -= len(chunk)
            except (HTTPException, OSError):  # a body over the limit, or a client gone: the answer is the same
                pass
            busy = json.dumps({"error": f"busy: {MAX_DECODES} uploads are being decoded; send it again in a second"})
            answer = Response(busy + "\n", status=503, mimetype="application/json", headers={"Retry-After": "1"})
            return answer(environ, start_response)
        try:
            return wsgi_app(environ, start_response)  # answered whole here (a JSON body), so the slot is let go after
        finally:
            slots.release()

    return shed


def create_app(model: nn.Module | None = None, run: Run | None = None, *, train_if_missing: bool = True):
    """The Flask app around one loaded model (loaded here, once, when not given)."""
    from flask import Flask, jsonify, request
    from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

    if model is None:
        model, run = load_model(train_if_missing=train_if_missing)
    model = model.eval()
    Image.MAX_IMAGE_PIXELS = MAX_SIDE * MAX_SIDE  # Pillow's own bomb limit, behind read_image's check of the header
    app = Flask(__name__, static_folder=str(STATIC), static_url_path="/static")
    app.config["MAX_CONTENT_LENGTH"] = _READ_LIMIT
    app.wsgi_app = _shedding(app.wsgi_app, threading.BoundedSemaphore(MAX_DECODES))
    info = {"run_id": None, "model": type(model).__name__}
    if run is not None:
        config = run.config
        info = {
            "run_id": run.run_id,
            "model": config.model,
            "depth": config.model_kwargs.get("depth"),
            "dataset": config.dataset,
            "train_images": run.record.get("train_images"),
            "final_accuracy": round(run.final_accuracy, 2),
        }

    @app.get("/")
    def index():
        return app.send_static_file("index.html")

    @app.get("/api/model")
    def model_info():
        return jsonify(info)

    @app.post("/api/predict")
    def predict_route():
        if request.mimetype == "multipart/form-data":
            upload = request.files.get("image")
            if upload is None:
                raise BadImage(f'a multipart form without a file field named "image": {EXPECTED}')
            data = upload.read()
        else:
            # Raw bytes whatever the label: curl --data-binary without -H calls a PNG a url-encoded form.
            data = request.get_data(cache=False)
        if len(data) > MAX_BODY_BYTES:
            raise RequestEntityTooLarge
        try:
            digit = preprocess(data)
        except BadImage as error:
            if data and request.mimetype == "application/x-www-form-urlencoded" and str(error).startswith("not an"):
                raise BadImage(f"a url-encoded form, not an image: {EXPECTED}") from None
            raise
        return jsonify({**predict(model, digit), "input": _png_data_url(digit), "model": info["run_id"]})

    @app.errorhandler(HTTPException)
    def http_error(error):
        if error.code == 413:
            return jsonify(error=TOO_LARGE), 413
        return jsonify(error=f"{error.code} {error.name}: {error.description}"), error.code

    app.register_error_handler(BadImage, lambda error: (jsonify(error=str(error)), error.status))
    return app


def make_server(app, host: str = "127.0.0.1", port: int = 5000):
    """``app`` behind waitress with the limits of this module (port 0: a free one, ``.effective_port`` names it). The
    errors waitress answers itself (malformed framing, a body over the limit) are JSON, as the app's are."""
    from waitress.channel import HTTPChannel
    from waitress.server import create_server
    from waitress.task import ErrorTask

    class JsonError(ErrorTask):
        def execute(self):
            error = self.request.error
            text = TOO_LARGE if error.code == 413 else f"{error.code} {error.reason}: {error.body}"
            body = (json.dumps({"error": text}) + "\n").encode()
            self.status = f"{error.code} {error.reason}"
            self.response_headers += [("Content-Type", "application/json"), ("Connection", "close")]
            self.close_on_finish, self.content_length = True, len(body)
            self.write(body)

    class Channel(HTTPChannel):
        """waitress's connection, noting when each request's first byte came (for :data:`REQUEST_SECONDS`)."""

        error_task_class = JsonError
        begun = 0.0

        def received(self, data):
            if self.request is None:
                self.begun = time.monotonic()
            return super().received(data)

    httpd = create_server(
        app,
        host=host,
        port=port,
        threads=THREADS,
        connection_limit=CONNECTIONS,
        channel_timeout=READ_SECONDS,
        cleanup_interval=1,
        # a body up to 4x the limit is read whole (on disk past waitress's 512 KiB), so that its client, still
        # sending, gets the app's 413 rather than a reset; a larger one is refused from its headers
        max_request_body_size=4 * MAX_BODY_BYTES,
        ident="vitbn-app",
    )
    httpd.channel_class = Channel
    idle = httpd.maintenance

    def maintenance(now):  # waitress drops idle connections; a request past its deadline goes too
        idle(now)
        for channel in list(httpd.active_channels.values()):
            if getattr(channel, "request", None) is not None and time.monotonic() - channel.begun > REQUEST_SECONDS:
                channel.will_close = True

    httpd.maintenance = maintenance
    return httpd


@contextlib.contextmanager
def serving(app, host: str = "127.0.0.1", port: int = 0) -> Iterator:
    """``app`` served in a background thread (a notebook's, a test's) until the block ends; yields the server."""
    from waitress import wasyncore

    httpd = make_server(app, host, port)
    thread = threading.Thread(target=httpd.run, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        # closed from the server's own loop (a thunk its trigger runs there): the loop ends with nothing left to watch
        httpd.trigger.pull_trigger(lambda: wasyncore.close_all(httpd._map))
        thread.join(timeout=30)
        httpd.task_dispatcher.shutdown()


def serve(host: str = "127.0.0.1", port: int = 5000, run_id: str | None = None, train_if_missing: bool = True):
    model, run = load_model(run_id, train_if_missing=train_if_missing)
    app = create_app(model, run)
    httpd = make_server(app, host, port)
    print(f"Draw a digit at http://{host}:{httpd.effective_port}/ (Ctrl+C stops the server)", flush=True)
    httpd.run()
