"""A chapter opened in JupyterLab (`make lab`) is not marked as modified: a reader who only reads closes it without
being asked to save. Lab writes the kernel's ``language_info`` into a notebook that lacks it, which marks it changed;
every chapter carries the book's Python's."""

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _kernel_language_info() -> dict:
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        return client.kernel_info(reply=True)["content"]["language_info"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def test_every_chapter_carries_the_language_info_its_kernel_reports():
    # the patch version is the book's environment's; a reader on another Python sees the chapter marked modified
    minor = lambda info: {**info, "version": ".".join(str(info.get("version", "")).split(".")[:2])}
    expected = _kernel_language_info()
    for chapter in CHAPTERS:
        found = json.loads(chapter.read_text()).get("metadata", {}).get("language_info")
        assert isinstance(found, dict) and minor(found) == minor(expected), (
            f"{chapter.name}: metadata.language_info is {found}, the kernel reports {expected}; JupyterLab would mark "
            "the chapter modified on opening"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dirty_tabs(browser, url: str, seconds: float = 90) -> list[str]:
    """The tabs Lab marks modified once the chapter has opened and its kernel is idle."""
    browser.get(url)
    deadline = time.monotonic() + seconds
    status = ""
    while time.monotonic() < deadline:
        status = browser.execute_script(
            "const e = document.querySelector('.jp-Notebook-ExecutionIndicator');"
            "return e ? (e.getAttribute('data-status') || '') : '';"
        )
        if status == "idle":
            time.sleep(3)  # the kernel's info has reached the notebook's metadata by now
            return browser.execute_script(
                "return Array.from(document.querySelectorAll('.lm-TabBar-tab.jp-mod-dirty'))"
                ".map(e => e.textContent.trim());"
            )
        time.sleep(1)
    pytest.fail(f"JupyterLab did not open {url} with an idle kernel within {seconds:g} s (status {status!r})")


def test_a_chapter_opened_in_lab_is_not_modified(browser, tmp_path):
    for chapter in CHAPTERS[:1]:
        shutil.copy2(chapter, tmp_path / chapter.name)
    (tmp_path / "workspaces").mkdir()
    bare = tmp_path / "bare.ipynb"  # the check can fail: a chapter without language_info is marked modified
    notebook = json.loads(CHAPTERS[0].read_text())
    notebook["metadata"].pop("language_info", None)
    bare.write_text(json.dumps(notebook))
    port = _free_port()
    lab = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            f"--port={port}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--allow-root",
            f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
            "--ServerApp.log_level=WARN",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(120):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        base = f"http://127.0.0.1:{port}/lab/tree"
        assert _dirty_tabs(browser, f"{base}/{CHAPTERS[0].name}") == []
        assert _dirty_tabs(browser, f"{base}/bare.ipynb") == ["bare.ipynb"]
    finally:
        lab.terminate()
        lab.wait(timeout=30)
