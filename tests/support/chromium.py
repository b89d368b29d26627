"""Headless Chromium for integration tests, driven over the Chrome DevTools Protocol (a
websocket, spoken with aiohttp): open a page, answer its basic-auth challenge, read its DOM,
take screenshots.

The browser is Debian's `chromium` (`./scripts/setup.sh` installs it); nothing is
downloaded. Each `Browser` runs in a fresh `--user-data-dir` and is killed on close.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


def chromium_binary() -> str | None:
    """Debian's chromium (or a Chrome on the path), None when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One headless browser with one page (a CDP session attached to its target)."""

    def __init__(self, process: asyncio.subprocess.Process, http: aiohttp.ClientSession) -> None:
        self._process = process
        self._http = http
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._session: str | None = None
        self._credentials: tuple[str, str] | None = None
        self.loaded = asyncio.Event()
        self.console: list[str] = []  # the page's console messages and uncaught errors

    async def _open(self, ws_url: str) -> None:
        self._ws = await self._http.ws_connect(ws_url, max_msg_size=0)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        target = await self.send("Target.createTarget", {"url": "about:blank"}, page=False)
        attached = await self.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}, page=False
        )
        self._session = attached["sessionId"]
        for domain in ("Page", "Runtime"):
            await self.send(f"{domain}.enable")

    async def send(self, method: str, params: dict[str, Any] | None = None, *, page: bool = True
                   ) -> dict[str, Any]:  # fmt: skip
        """One CDP command (to the page's session unless `page` is False); its result."""
        assert self._ws is not None
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self._session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[message["id"]] = future
        await self._ws.send_json(message)
        return await asyncio.wait_for(future, 30)

    async def _read(self) -> None:
        assert self._ws is not None
        async for frame in self._ws:
            if frame.type is not aiohttp.WSMsgType.TEXT:
                break
            message = frame.json()
            waiting = self._waiting.pop(message.get("id", -1), None)
            if waiting is not None and not waiting.done():
                if "error" in message:
                    waiting.set_exception(RuntimeError(f"CDP error: {message['error']}"))
                else:
                    waiting.set_result(message.get("result", {}))
            elif "method" in message:
                self._event(message["method"], message.get("params", {}))

    def _event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Page.loadEventFired":
            self.loaded.set()
        elif method == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", "")) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.console.append(f"uncaught: {params['exceptionDetails']}")
        elif method == "Fetch.requestPaused":
            self._later("Fetch.continueRequest", {"requestId": params["requestId"]})
        elif method == "Fetch.authRequired" and self._credentials is not None:
            user, password = self._credentials
            response = {"response": "ProvideCredentials", "username": user, "password": password}
            self._later(
                "Fetch.continueWithAuth",
                {"requestId": params["requestId"], "authChallengeResponse": response},
            )

    def _later(self, method: str, params: dict[str, Any]) -> None:
        task = asyncio.get_running_loop().create_task(self.send(method, params))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def authenticate(self, user: str, password: str) -> None:
        """Answer every basic-auth challenge with these credentials, as a person would
        type them into the browser's prompt (the browser then sends them itself)."""
        self._credentials = (user, password)
        patterns = [{"urlPattern": "*"}]
        await self.send("Fetch.enable", {"handleAuthRequests": True, "patterns": patterns})

    async def navigate(self, url: str) -> None:
        self.loaded.clear()
        await self.send("Page.navigate", {"url": url})
        await asyncio.wait_for(self.loaded.wait(), 30)

    async def evaluate(self, expression: str) -> Any:
        result = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll `expression` until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = await self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the page never showed {expression!r} in {timeout_s} s (last value "
                    f"{value!r}; console: {self.console[-5:]})"
                )
            await asyncio.sleep(0.2)

    async def resize(self, width: int, height: int) -> None:
        await self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 700},
        )

    async def screenshot(self, path: Path, width: int, height: int) -> Path:
        """The page at `width` x `height` (the whole page's height when longer), as PNG."""
        await self.resize(width, height)
        await asyncio.sleep(0.3)  # a frame to lay out and draw the charts at the new size
        full = await self.evaluate("document.documentElement.scrollHeight")
        await self.resize(width, max(height, int(full)))
        await asyncio.sleep(0.3)
        shot = await self.send("Page.captureScreenshot", {"format": "png"})
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))
        return path

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.send("Browser.close", page=False), 5)
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self._process.wait()


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def _debugger_url(profile: Path, process: asyncio.subprocess.Process) -> str:
    """The browser's websocket, from the DevToolsActivePort file it writes when ready."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.returncode is not None:
            raise AssertionError(f"chromium exited with {process.returncode} before it listened")
        with contextlib.suppress(FileNotFoundError, ValueError):
            port, path = port_file.read_text().split("\n")[:2]
            return f"ws://127.0.0.1:{int(port)}{path}"
        await asyncio.sleep(0.05)
    raise AssertionError("chromium did not open its debugging port in 30 s")


@contextlib.asynccontextmanager
async def open_browser(profile: Path) -> AsyncIterator[Browser]:
    """A fresh headless Chromium (its profile in `profile`), closed and killed after."""
    binary = chromium_binary()
    assert binary is not None, "chromium is not installed: ./scripts/setup.sh installs it"
    await asyncio.to_thread(profile.mkdir, parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        binary, *FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    async with aiohttp.ClientSession() as http:
        browser = Browser(process, http)
        try:
            await browser._open(await _debugger_url(profile, process))
            yield browser
        finally:
            await browser.close()
