"""The digit-drawing app: model choice, MNIST-style preprocessing, the HTTP API, and the page in Chromium."""

import http.client
import io
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from vitbn_nb.app import BadImage, create_app, load_model, mnist_style, model_choice, predict, preprocess, server
from vitbn_nb.app import __main__ as app_main
from vitbn_nb.data import load_mnist
from vitbn_nb.engines import training
from vitbn_nb.models import build_model
from vitbn_nb.store import records, runs, servable

ROOT = Path(__file__).resolve().parent.parent

#: A few seconds of CPU: good enough to classify clear MNIST digits.
TINY = runs.RunConfig(
    model="ViTBNFFN", model_kwargs={"depth": 1}, dataset="mnist", epochs=2, lr=1e-3, train_size=3000, test_size=500
)


def png(array: np.ndarray, mode: str = "L") -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, mode=mode).save(buffer, format="PNG")
    return buffer.getvalue()


def post(url: str, body: bytes, content_type: str = "image/png"):
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory, mnist_ready):
    """A tiny model trained in a private run store, served on a free port in a thread."""
    store = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VITBN_RUNS_DIR", str(store))
        run = training.train(TINY, progress=False)
        model = run.load_model("cpu")
        with server.serving(create_app(model, run)) as http:
            yield SimpleNamespace(url=f"http://127.0.0.1:{http.effective_port}", model=model, run=run, store=store)


@pytest.fixture(scope="module")
def confident_digit(served):
    """The first MNIST test digit the model classifies correctly with probability > 0.9."""
    images, labels = load_mnist(train=False)
    with torch.inference_mode():
        probabilities = served.model(images[:200].float().div(255)).softmax(dim=1)
    confidence, guess = probabilities.max(dim=1)
    index = int(torch.nonzero((guess == labels[:200]) & (confidence > 0.9))[0])
    return images[index, 0].numpy(), int(labels[index]), int(guess[index])


# -- which model ------------------------------------------------------------------------------


def fake_run(
    store,
    name,
    *,
    model="ViT",
    dataset="mnist",
    acc=95.0,
    status="finished",
    image_size=28,
    images=60000,
    weights=False,
    extra=None,
):
    """A run record in ``store``; its model.pt is empty unless ``weights`` (an untrained model's, which loads)."""
    folder = store / name
    folder.mkdir(parents=True)
    if weights:
        shape = {"image_size": image_size, "channels": 1, "num_classes": 10, "depth": 1}
        torch.save(build_model(model, **shape).state_dict(), folder / "model.pt")
    else:
        (folder / "model.pt").write_bytes(b"")
    epoch = {"epoch": 1, "test_acc": acc, "train_loss": 0.1, "diverged": status == "diverged"}
    record = {
        "run_id": name,
        "status": status,
        "train_images": images,
        "epochs": [{**epoch, "train_seconds": 1.0, "test_seconds": 0.1}],
        "hardware": {"device": "cpu", "cpu": "test", "cpu_cores": 2},
        "checksums": {"model.pt": records.sha256(folder / "model.pt")} if status != "running" else {},
        "config": {
            "model": model,
            "dataset": dataset,
            "epochs": 1,
            "model_kwargs": {
                "image_size": image_size,
                "channels": 1,
                "num_classes": 10,
                **({"depth": 1} if weights else {}),
            },
            **(extra or {}),
        },
    }
    records.write_record(folder / "record.json", record)
    return folder


def test_model_choice_prefers_a_good_augmented_run_then_the_most_accurate(tmp_path):
    assert model_choice(tmp_path) is None
    fake_run(tmp_path, "clean", acc=98.0)
    fake_run(tmp_path, "aug-poor", dataset="mnist_aug", acc=60.0)
    fake_run(tmp_path, "dnn", model="DNN_d3", acc=99.5)
    fake_run(tmp_path, "at-56", image_size=56, acc=99.6)
    fake_run(tmp_path, "unfinished", status="running", acc=99.7)
    fake_run(tmp_path, "diverged", status="diverged", acc=99.8)
    assert model_choice(tmp_path).run_id == "clean"  # no augmented run is good enough: the best accuracy wins
    fake_run(tmp_path, "aug-good", model="ViTBNFFN", dataset="mnist_aug", acc=93.0)
    assert model_choice(tmp_path).run_id == "aug-good"
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "record.json").write_text("{not json")
    assert model_choice(tmp_path).run_id == "aug-good"


def test_empty_store_refuses_with_a_clear_message_or_trains_the_fallback(run_store, mnist_ready, monkeypatch):
    with pytest.raises(SystemExit, match="make book"):
        load_model(train_if_missing=False, log=lambda message: None)
    monkeypatch.setattr(servable, "FALLBACK", runs.RunConfig(**{**TINY.to_dict(), "epochs": 1, "train_size": 300}))
    lines = []
    model, run = load_model(log=lines.append)
    assert "training a small ViTBNFFN" in lines[0] and run.run_id in lines[-1]
    assert run.status == "finished" and (run_store / run.run_id / "model.pt").is_file()
    assert not model.training
    _, run_again = load_model(log=lines.append)  # now the store has it: nothing is trained twice
    assert run_again.run_id == run.run_id and len(lines) == 3


def test_a_run_whose_configuration_the_code_refuses_is_passed_over_or_refused_by_name(run_store):
    fake_run(run_store, "plain", acc=95.0, weights=True)
    fake_run(run_store, "odd-config", acc=99.0, weights=True, extra={"foo": 1})  # more accurate: it would win
    lines = []
    _, run = load_model(train_if_missing=False, log=lines.append)
    assert run.run_id == "plain"
    assert any(line.startswith("Passed over odd-config") and "configuration" in line for line in lines)
    with pytest.raises(SystemExit, match="--run odd-config: cannot serve it: .*configuration"):
        load_model("odd-config", log=lines.append)


@pytest.mark.parametrize("name", ["../elsewhere/plain", "{outside}", ".", "..", ".hidden", "plain/", "a\\b"])
def test_run_must_name_a_run_folder_in_the_store(run_store, tmp_path, name):
    fake_run(run_store, "plain", weights=True)
    outside = fake_run(tmp_path / "elsewhere", "plain", weights=True)  # a servable run outside the store
    with pytest.raises(SystemExit, match="not a run folder name"):
        load_model(name.format(outside=outside), log=lambda message: None)


@pytest.mark.parametrize("port", ["0", "-1", "65536", "99999"])
def test_a_port_outside_1_to_65535_is_refused_in_one_line(port, capsys, monkeypatch):
    monkeypatch.setattr(app_main, "serve", lambda **kwargs: pytest.fail("the app started"))
    assert app_main.main(["--port", port]) == 2
    error = capsys.readouterr().err
    assert f"--port {port}" in error and "1 to 65535" in error and len(error.strip().splitlines()) == 1


def test_a_store_the_app_cannot_use_is_one_line_not_a_traceback(tmp_path, monkeypatch, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("VITBN_RUNS_DIR", str(afile))
    assert app_main.main(["--no-train"]) == 1
    error = capsys.readouterr().err
    assert "VITBN_RUNS_DIR=" in error and "is a file" in error and len(error.strip().splitlines()) == 1
    store = tmp_path / "store"
    store.mkdir()
    (store / ".locks").write_text("")  # no run can be written here: the fallback the app trains cannot be either
    monkeypatch.setenv("VITBN_RUNS_DIR", str(store))
    assert app_main.main([]) == 1
    error = capsys.readouterr().err
    assert ".locks is a file" in error and "fix: delete" in error and len(error.strip().splitlines()) == 1


# -- preprocessing -----------------------------------------------------------------------------


def test_an_mnist_digit_comes_back_almost_unchanged(mnist_ready):
    images, _ = load_mnist(train=False)
    correlations = []
    for image in images[:50, 0].numpy():
        seen = preprocess(png(image))
        assert seen.shape == (28, 28) and seen.dtype == np.float32 and seen.min() >= 0 and seen.max() <= 1
        correlations.append(np.corrcoef(image.ravel() / 255, seen.ravel())[0, 1])
    assert np.median(correlations) > 0.99 and min(correlations) > 0.7


def test_a_large_off_centre_dark_on_light_drawing_is_normalised_like_mnist(mnist_ready):
    image = load_mnist(train=False)[0][0, 0].numpy()
    digit = Image.fromarray(255 - image).resize((200, 200), Image.BILINEAR)
    paper = Image.new("L", (500, 360), 255)
    paper.paste(digit, (260, 20))  # far from the centre, black ink on white paper
    seen = preprocess(png(np.asarray(paper)))
    assert np.corrcoef(image.ravel() / 255, seen.ravel())[0, 1] > 0.9
    ink = np.argwhere(seen > 0.1)
    height, width = ink.max(axis=0) - ink.min(axis=0) + 1
    assert max(height, width) <= 21 and max(height, width) >= 18  # the longer side scaled to MNIST's 20 pixels
    rows, cols = np.indices(seen.shape)
    centre = (rows * seen).sum() / seen.sum(), (cols * seen).sum() / seen.sum()
    assert abs(centre[0] - 14) <= 1 and abs(centre[1] - 14) <= 1


def test_aspect_ratio_is_kept_and_transparent_canvases_work():
    canvas = np.zeros((300, 300, 4), dtype=np.uint8)  # transparent, with black strokes: a "1" 200 tall, 20 wide
    canvas[50:250, 140:160] = (0, 0, 0, 255)
    seen = preprocess(png(canvas, mode="RGBA"))
    ink = np.argwhere(seen > 0.5)
    height, width = ink.max(axis=0) - ink.min(axis=0) + 1
    assert height == 20 and width == 2
    opaque = np.zeros((280, 280, 4), dtype=np.uint8)  # what a browser canvas sends: opaque black, white ink
    opaque[..., 3] = 255
    opaque[40:240, 130:150, :3] = 255
    assert np.array_equal(preprocess(png(opaque, mode="RGBA")), seen)


# -- the HTTP API ------------------------------------------------------------------------------


def test_a_real_mnist_digit_gets_its_label(served, confident_digit):
    image, label, direct = confident_digit
    status, answer = post(f"{served.url}/api/predict", png(image))
    assert status == 200
    assert answer["digit"] == direct == label
    assert answer["model"] == served.run.run_id
    assert answer["top3"][0]["digit"] == label and 0.5 < answer["confidence"] <= 1
    assert answer["top3"] == sorted(answer["top3"], key=lambda t: -t["probability"])
    assert sum(answer["probabilities"]) == pytest.approx(1, abs=1e-4)
    # exactly what the model says of the preprocessed image, and the image it saw comes back
    assert answer["probabilities"] == pytest.approx(predict(served.model, preprocess(png(image)))["probabilities"])
    assert answer["input"].startswith("data:image/png;base64,")


def test_model_info_and_page(served):
    with urllib.request.urlopen(f"{served.url}/api/model", timeout=30) as response:
        info = json.loads(response.read())
    assert info["run_id"] == served.run.run_id and info["model"] == "ViTBNFFN"
    with urllib.request.urlopen(f"{served.url}/", timeout=30) as response:
        page = response.read().decode()
    assert '<canvas id="pad"' in page and "/static/app.js" in page


@pytest.mark.parametrize(
    "body, status, message",
    [
        (b"", 400, "empty body"),
        (b"this is not an image", 400, "not an image"),
        (png(np.full((10, 10), 255, dtype=np.uint8)), 400, "wrong size: the image is 10x10"),
        (png(np.zeros((28, 3000), dtype=np.uint8)), 400, "wrong size: the image is 3000x28"),
        (png(np.zeros((280, 280), dtype=np.uint8)), 400, "the drawing is empty"),
        (os.urandom(3 * 2**20), 413, "body too large"),
    ],
    ids=["empty", "not-an-image", "too-small", "too-wide", "no-ink", "oversized"],
)
def test_bad_requests_get_a_4xx_with_a_clear_message_and_the_server_keeps_serving(
    served, confident_digit, body, status, message
):
    got, answer = post(f"{served.url}/api/predict", body)
    assert got == status and message in answer["error"]
    assert post(f"{served.url}/api/predict", png(confident_digit[0]))[0] == 200


@pytest.fixture(scope="module")
def light():
    """The app around an untrained linear model, served on a free port: for what does not need a good answer."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    with server.serving(create_app(model, None)) as httpd:
        yield httpd.effective_port


def send(port: int, body: bytes, content_type: str = "image/png", *, chunked: bool = False):
    """POST ``body`` to /api/predict; ``chunked`` sends it in 64 KiB chunks with no Content-Length."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        if chunked:
            pieces = (body[i : i + 2**16] for i in range(0, len(body), 2**16))
            connection.request(
                "POST", "/api/predict", body=pieces, headers={"Content-Type": content_type}, encode_chunked=True
            )
        else:
            connection.request("POST", "/api/predict", body=body, headers={"Content-Type": content_type})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def a_stroke() -> bytes:
    drawing = np.zeros((280, 280), dtype=np.uint8)
    drawing[40:240, 130:150] = 255
    return png(drawing)


def test_a_chunked_body_is_held_to_the_same_limit(light):
    assert send(light, a_stroke(), chunked=True)[0] == 200
    # an image that decodes from its first bytes, padded past the limit: refused, not read in part
    status, answer = send(light, a_stroke() + bytes(server.MAX_BODY_BYTES), chunked=True)
    assert status == 413 and "body too large" in answer["error"]
    assert send(light, a_stroke() + bytes(server.MAX_BODY_BYTES))[0] == 413
    assert send(light, a_stroke())[0] == 200


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_claiming(width: int, height: int, rows: int = 1, data: bytes | None = None) -> bytes:
    """A greyscale PNG whose header says ``width`` x ``height`` and whose data holds ``rows`` rows of zeros (or
    ``data``)."""
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    compressor = zlib.compressobj()
    if data is None:
        data = b"".join(compressor.compress(bytes(1 + width)) for _ in range(rows)) + compressor.flush()
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", data) + _chunk(b"IEND", b"")


def ico_around(embedded: bytes) -> bytes:
    """An icon whose directory says 256x256 around an embedded PNG of any size (Pillow decodes it in Image.open)."""
    return struct.pack("<HHH", 0, 1, 1) + struct.pack("<BBBBHHII", 0, 0, 0, 0, 1, 32, len(embedded), 22) + embedded


EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 100 100\nnewpath 10 10 moveto 90 90 lineto stroke\n%%EOF\n"


def tiff_in_lab() -> bytes:
    buffer = io.BytesIO()
    Image.new("LAB", (28, 28)).save(buffer, "TIFF")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (png_claiming(60_000, 60_000), "wrong size: the image has more pixels than 2048x2048"),
        (png_claiming(3000, 40, rows=40), "wrong size: the image is 3000x40 pixels"),
        (ico_around(png_claiming(4000, 4000, rows=4000)), "not an image the app reads: send a PNG, JPEG, GIF or BMP"),
        (EPS, "not an image the app reads"),
        (tiff_in_lab(), "not an image the app reads"),
        (png_claiming(300, 300, data=b"not deflate data"), "not an image: the PNG data cannot be decoded"),
    ],
    ids=["header-lies-60000", "too-wide", "ico-header-lies", "eps", "tiff", "damaged"],
)
def test_an_upload_outside_the_promise_is_a_400_before_any_decoding(light, monkeypatch, body, message):
    """Only PNG, JPEG, GIF and BMP are opened, their size read from the header and checked before any pixel is
    decoded; no external program (Ghostscript for EPS) is ever started."""
    from PIL import EpsImagePlugin, IcoImagePlugin, ImageFile

    calls = []
    load = ImageFile.ImageFile.load

    def counted_load(image):
        calls.append(f"decoded {image.format} {image.size}")
        return load(image)

    def never(name):
        def called(*args, **kwargs):
            calls.append(name)
            raise AssertionError(f"{name} was called")

        return called

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted_load)
    monkeypatch.setattr(IcoImagePlugin.IcoImageFile, "_open", never("the ICO reader"))
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", never("the EPS reader"))
    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", never("Ghostscript"))
    monkeypatch.setattr(subprocess, "Popen", never("an external program"))
    with pytest.raises(BadImage, match=message) as refused:
        preprocess(body)
    assert refused.value.status == 400 and len(str(refused.value).splitlines()) == 1
    decoded = ["decoded PNG (300, 300)"] if "decoded" in message else []
    assert calls == decoded  # only the damaged PNG, whose header is honest, was decoded (and failed)
    status, answer = send(light, body)
    assert status == 400 and message.split(":")[0] in answer["error"]


#: Posts the upload sys.argv[1] names to the app (an untrained model, the test client) in this process; prints the
#: status, the error and the growth of the process's peak memory (KiB) around the request alone.
MEASURE = r"""
import json, resource, sys, torch
from vitbn_nb.app import server
app = server.create_app(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10)), None).test_client()
body = open(sys.argv[1], "rb").read()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
answer = app.post("/api/predict", data=body, content_type="image/png")
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
print(json.dumps({"status": answer.status_code, "error": answer.get_json()["error"], "growth_kib": growth}))
"""


def test_an_icon_that_hides_a_large_image_costs_no_more_than_its_header(tmp_path):
    """An icon says 256x256 and embeds an 8000x8000 PNG of 300 KB: Pillow would decode its 256 MB inside Image.open.
    The app never opens it; the request's peak memory is measured in a child process."""
    upload = tmp_path / "icon.ico"
    upload.write_bytes(ico_around(png_claiming(8000, 8000, rows=8000)))
    assert upload.stat().st_size < server.MAX_BODY_BYTES
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(upload)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    assert measured["status"] == 400 and "not an image the app reads" in measured["error"]
    assert measured["growth_kib"] < 100 * 1024, measured


def test_pillow_refuses_more_pixels_than_the_app_promises_once_it_serves(light):
    assert Image.MAX_IMAGE_PIXELS == server.MAX_SIDE**2
    with pytest.raises(Image.DecompressionBombError):
        Image.open(io.BytesIO(png_claiming(3 * server.MAX_SIDE, server.MAX_SIDE)))


def test_a_form_is_told_what_the_app_expects(light):
    status, answer = send(light, b"image=abc", "application/x-www-form-urlencoded")
    assert status == 400 and "empty body" not in answer["error"] and "form" in answer["error"]
    assert 'file field named "image"' in answer["error"]
    # curl --data-binary without -H labels an image as a form: its bytes are still the image
    assert send(light, a_stroke(), "application/x-www-form-urlencoded")[0] == 200
    boundary = "vitbn-test-boundary"
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="image"; filename="d.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()
    upload = part + a_stroke() + f"\r\n--{boundary}--\r\n".encode()
    assert send(light, upload, f"multipart/form-data; boundary={boundary}")[0] == 200
    status, answer = send(
        light, upload.replace(b'name="image"', b'name="other"'), f"multipart/form-data; boundary={boundary}"
    )
    assert status == 400 and 'file field named "image"' in answer["error"]


def test_wrong_method_and_unknown_route_are_json_too(served):
    for url in (f"{served.url}/api/predict", f"{served.url}/nope"):
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(url, timeout=30)
        assert error.value.code in (404, 405) and "error" in json.loads(error.value.read())


def test_bad_image_carries_its_status():
    assert BadImage("x").status == 400 and BadImage("y", 413).status == 413
    with pytest.raises(BadImage, match="no ink"):
        mnist_style(np.zeros((40, 40), dtype=np.float32))


def test_the_command_line_serves_a_stored_run(served):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "VITBN_RUNS_DIR": str(served.store)}
    process = subprocess.Popen(
        [sys.executable, "-m", "vitbn_nb.app", "--port", str(port), "--no-train"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/model", timeout=5) as response:
                    assert json.loads(response.read())["run_id"] == served.run.run_id
                    break
            except (urllib.error.URLError, ConnectionError):
                assert process.poll() is None, process.stdout.read()
                assert time.monotonic() < deadline, "the app did not start within 2 minutes"
                time.sleep(0.5)
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert f"Serving run {served.run.run_id}" in output and "Draw a digit at http://127.0.0.1:" in output


# -- the page in headless Chromium -------------------------------------------------------------


def draw_one(driver, pad, pointer: str = "mouse"):
    """A vertical stroke down the middle of the pad, by mouse or by finger (pointer events either way)."""
    from selenium.webdriver.common.actions import interaction
    from selenium.webdriver.common.actions.action_builder import ActionBuilder
    from selenium.webdriver.common.actions.pointer_input import PointerInput

    actions = ActionBuilder(
        driver,
        mouse=PointerInput(interaction.POINTER_TOUCH if pointer == "touch" else interaction.POINTER_MOUSE, pointer),
    )
    device = actions.pointer_action
    device.move_to(pad, 0, -95)
    device.pointer_down()
    for step in range(1, 20):
        device.move_to(pad, 0, -95 + 10 * step)
    device.pointer_up()
    actions.perform()


def wait_for_answer(driver):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(
        lambda d: d.find_element("tag name", "body").get_attribute("data-state") in ("answered", "error")
    )
    return driver.find_element("tag name", "body").get_attribute("data-state")


@pytest.mark.parametrize("pointer", ["mouse", "touch"])
def test_drawing_in_the_browser_shows_the_prediction(served, browser, tmp_path, pointer):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{served.url}/")
    WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-state") == "ready"
    )
    WebDriverWait(browser, 30).until(lambda d: served.run.run_id in d.find_element(By.ID, "model").text)
    pad = browser.find_element(By.ID, "pad")
    draw_one(browser, pad, pointer)
    assert wait_for_answer(browser) == "answered", browser.find_element(By.ID, "message").text
    shown = browser.find_element(By.ID, "digit").text
    confidence = float(browser.find_element(By.ID, "confidence").text.rstrip(" %"))
    bars = browser.find_elements(By.CSS_SELECTOR, "#top3 li")
    assert shown in list("0123456789") and 0 < confidence <= 100 and len(bars) == 3
    assert browser.execute_script("return document.getElementById('seen').naturalWidth") == 28

    # the page shows what the server answers for this very canvas, and a stroke down the middle is a one
    canvas_png = browser.execute_script("return document.getElementById('pad').toDataURL('image/png')")
    import base64

    status, answer = post(f"{served.url}/api/predict", base64.b64decode(canvas_png.split(",", 1)[1]))
    assert status == 200 and str(answer["digit"]) == shown
    assert f"{100 * answer['confidence']:.1f}" == f"{confidence:.1f}"
    assert shown == "1"

    shot = tmp_path / f"app-{pointer}.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 1000
    with Image.open(shot) as image:
        assert image.size[0] > 300 and image.size[1] > 300

    browser.find_element(By.ID, "clear").click()
    assert browser.find_element(By.ID, "digit").text == "–"
    browser.find_element(By.ID, "predict").click()  # an empty pad is refused in the page, with a message
    assert "Draw a digit first" in browser.find_element(By.ID, "message").text


# -- the app sheds load ------------------------------------------------------------------------------------

#: The app (an untrained model) served in this child process as the app serves it (waitress); each admitted upload
#: is held after its decode (so that MAX_DECODES are in flight at once) until every other of the N concurrent uploads
#: of the file sys.argv[1] (sys.argv[2] of them) has been answered. Prints the statuses, each 503's Retry-After and
#: error, and the growth of the process's peak memory (KiB).
LOAD = r"""
import collections, http.client, json, resource, sys, threading, torch
from vitbn_nb.app import server

body, n = open(sys.argv[1], "rb").read(), int(sys.argv[2])
answered, gate = threading.Semaphore(0), threading.Event()
decode = server.preprocess
def held(data):
    digit = decode(data)
    gate.wait()
    return digit
server.preprocess = held
app = server.create_app(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10)), None)
httpd = server.make_server(app, "127.0.0.1", 0)
threading.Thread(target=httpd.run, daemon=True).start()
results = []
def upload():
    connection = http.client.HTTPConnection("127.0.0.1", httpd.effective_port, timeout=300)
    connection.request("POST", "/api/predict", body=body, headers={"Content-Type": "image/png"})
    response = connection.getresponse()
    results.append((response.status, response.getheader("Retry-After"), json.loads(response.read())))
    connection.close()
    answered.release()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
clients = [threading.Thread(target=upload) for _ in range(n)]
for client in clients:
    client.start()
for _ in range(n - server.MAX_DECODES):
    answered.acquire()  # every upload but those held has its answer
gate.set()
for client in clients:
    client.join()
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
statuses = collections.Counter(status for status, _, _ in results)
busy = [(after, answer["error"]) for status, after, answer in results if status == 503]
print(json.dumps({"statuses": statuses, "busy": busy[:1], "growth_kib": growth}))
"""
#: What 100 concurrent uploads of a 2048x2048 RGBA PNG of 1.5 MB may add to the server's peak memory: MAX_DECODES
#: decodes of about 100 MB each, and little per refused upload (measured: about 230 MB; 4.9 GB before shedding).
MAX_LOAD_GROWTH_MIB = 400


def large_upload() -> bytes:
    """A 2048x2048 RGBA PNG of about 1.5 MB (a noisy patch that does not compress, and a stroke): a costly decode."""
    image = np.full((2048, 2048, 4), 255, dtype=np.uint8)
    image[:700, :700, :3] = np.random.default_rng(0).integers(0, 256, (700, 700, 3), dtype=np.uint8)
    image[900:1800, 1000:1100, :3] = 0
    return png(image, mode="RGBA")


def test_many_concurrent_large_uploads_are_shed_with_503_in_bounded_memory(tmp_path):
    upload = tmp_path / "large.png"
    upload.write_bytes(large_upload())
    assert 2**20 < upload.stat().st_size < server.MAX_BODY_BYTES
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(upload), "100"], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    assert measured["statuses"] == {"200": server.MAX_DECODES, "503": 100 - server.MAX_DECODES}, measured
    ((after, error),) = measured["busy"]
    assert after == "1" and "busy" in error
    print(f"100 concurrent uploads: peak RSS growth {measured['growth_kib'] / 1024:.0f} MiB")  # shown with -s
    assert measured["growth_kib"] < MAX_LOAD_GROWTH_MIB * 1024, measured


@pytest.fixture
def handled(monkeypatch):
    """The app served as it serves itself, with short limits here: 1 s of silence, 3 s for a whole request, 20
    connections; yields the server."""
    monkeypatch.setattr(server, "READ_SECONDS", 1)
    monkeypatch.setattr(server, "REQUEST_SECONDS", 3)
    monkeypatch.setattr(server, "CONNECTIONS", 20)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    with server.serving(create_app(model, None)) as httpd:
        yield httpd


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        connection.sendall(data)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GARBAGE\r\n\r\n", b"4"),
        (b"\x16\x03\x01 tls?\r\n\r\n", b"4"),
        (
            b"POST /api/predict HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nnot hex\r\n0\r\n\r\n",
            b"400",
        ),
        (b"POST /api/predict HTTP/1.1\r\nHost: x\r\nContent-Length: twelve\r\n\r\n", b"400"),
    ],
    ids=["request line", "tls", "chunk framing", "content length"],
)
def test_malformed_requests_are_refused_in_json_and_bad_framing_is_a_400(handled, request_bytes, status):
    head, _, body = _raw(handled.effective_port, request_bytes).partition(b"\r\n\r\n")
    assert head.split()[1].startswith(status) and b"application/json" in head
    assert json.loads(body)["error"][:3] == head.split()[1].decode()


def test_a_client_that_sends_nothing_or_stops_mid_body_is_dropped_and_the_server_goes_on(handled):
    with socket.create_connection(("127.0.0.1", handled.effective_port), timeout=60) as idle:
        assert idle.recv(1) == b""  # closed by the server after its read timeout, not after the test's 60 s
    with socket.create_connection(("127.0.0.1", handled.effective_port), timeout=60) as slow:
        slow.sendall(b"POST /api/predict HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nonly part")
        assert slow.recv(1) == b""
    assert send(handled.effective_port, a_stroke())[0] == 200


def _trickle(port: int, closed: list) -> None:
    """An upload that promises a megabyte and sends one byte every half second, until the server drops it."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as slow:
        slow.sendall(
            b"POST /api/predict HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\nContent-Length: 1000000\r\n\r\n"
        )
        try:
            for _ in range(240):
                slow.sendall(b"x")
                time.sleep(0.5)
        except OSError:  # reset or broken pipe: the server closed it
            closed.append(True)


def test_two_trickling_uploads_never_stop_a_third_and_are_dropped_at_their_deadline(handled):
    closed: list = []
    slow = [threading.Thread(target=_trickle, args=(handled.effective_port, closed)) for _ in range(2)]
    for client in slow:
        client.start()
    time.sleep(1.0)  # both bodies under way
    assert send(handled.effective_port, a_stroke())[0] == 200  # within the client's timeout: no decode slot was taken
    for client in slow:
        client.join(timeout=120)
    assert closed == [True, True]  # each dropped at the request deadline, not after its 2 minutes of trickling


def test_more_connections_than_the_cap_wait_and_the_server_holds_no_thread_for_them(handled):
    threads = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", handled.effective_port), timeout=60) for _ in range(60)]
    try:
        deadline = time.monotonic() + 60
        while not handled.in_connection_overflow:  # the cap is reached: the rest wait in the backlog
            assert time.monotonic() < deadline, "the server never reached its connection cap"
            time.sleep(0.05)
        assert len(handled.active_channels) < server.CONNECTIONS < len(idle)
        assert threading.active_count() == threads  # a fixed pool: no thread per connection
        assert send(handled.effective_port, a_stroke())[0] == 200  # queued, then answered once idle ones are dropped
    finally:
        for connection in idle:
            connection.close()


def progressive_jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((64, 64), 255, dtype=np.uint8), mode="L").save(buffer, "JPEG", progressive=True)
    return buffer.getvalue()


def test_a_progressive_jpeg_is_refused_and_a_decode_past_its_time_is_stopped(light, monkeypatch):
    status, answer = send(light, progressive_jpeg(), "image/jpeg")
    assert status == 400 and "progressive JPEG" in answer["error"] and "baseline JPEG or a PNG" in answer["error"]
    baseline = io.BytesIO()
    Image.fromarray(np.full((64, 64), 255, dtype=np.uint8), mode="L").save(baseline, "JPEG")
    with pytest.raises(BadImage, match="no ink"):  # a baseline JPEG is decoded (this one is blank)
        preprocess(baseline.getvalue())
    monkeypatch.setattr(server, "DECODE_SECONDS", -1.0)  # every read is past the deadline
    status, answer = send(light, a_stroke())
    assert status == 400 and "too slow to decode" in answer["error"]


def test_the_app_never_serves_from_a_store_an_import_has_not_finished(run_store, tmp_path):
    fake_run(run_store, "ViT-served", weights=True)
    mark = run_store / ".incomplete-0123456789abcdef-0123456789ab"
    mark.touch()  # left by an import a kill stopped: the run the app would choose may be missing
    with pytest.raises(SystemExit, match=r"has not finished .*fix: run the same `python -m vitbn_nb runs import"):
        load_model(train_if_missing=False, log=lambda _: None)
    mark.unlink()
    assert load_model(train_if_missing=False, log=lambda _: None)[1].run_id == "ViT-served"
