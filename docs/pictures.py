"""Make the documentation's pictures from the real thing (nothing is drawn by hand but the diagram).

    python docs/pictures.py web      # docs/screenshots/web-page.png and web-annotated.png (labelled)
    python docs/pictures.py budget   # docs/images/budget.svg: what `agentd budget` prints
    python docs/pictures.py site     # docs/screenshots/site-home.png: the built site's home page
    python docs/pictures.py          # all three

``web`` starts ``agentd serve`` on a free loopback port with an empty data directory and the
shipped personas (the offline model), stores two memories, asks a question in Debian's headless
Chromium (driven by selenium through Debian's chromedriver, as tests/test_web.py does: nothing is
downloaded), then labels the parts of the page and takes the screenshot. ``budget`` runs the
command in a fresh data directory after a short conversation and renders its output as SVG with
rich (fonts are the reader's monospace: nothing is fetched). ``site`` builds the site
(``mkdocs build``) and screenshots ``index.html`` with ``chromium --headless --screenshot``.
Needs the test and docs extras: ``pip install -e '.[test,docs]'``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a script: the Chromium settings are the browser tests'

from tests.support import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS  # noqa: E402

DOCS = REPO / "docs"
FLAGS = (*CHROMIUM_FLAGS, "--hide-scrollbars")
AGENTD = [sys.executable, "-m", "agentd"]


def _env(home: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    env.update(AGENTD_HOME=home, AGENTD_RUNTIME__WORKERS="0", AGENTD_LOGGING__LEVEL="warning", COLUMNS="100")
    return env


@contextmanager
def serve(home: str) -> Iterator[str]:
    """``agentd serve`` on a free loopback port; yields its URL."""
    proc = subprocess.Popen(
        [*AGENTD, "serve", "--port", "0"], cwd=home, env=_env(home), stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                yield found.group(1).rstrip("/")
                return
        raise SystemExit("agentd serve did not start")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _post(url: str, body: dict[str, object]) -> None:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60):
        pass


#: The parts of the page labelled in the screenshot: CSS selector, label (docs/concepts.md lists them).
LABELS = [
    ("#who", "1"),
    (".exchange .reply", "2"),
    (".exchange .recalled", "3"),
    (".exchange .near", "4"),
    (".exchange .budget", "5"),
    ("#memories-panel", "6"),
]

OVERLAY = """
const labels = arguments[0];
for (const [css, label] of labels) {
  const el = document.querySelector(css);
  if (!el) throw new Error('no element ' + css);
  const r = el.getBoundingClientRect();
  const box = document.createElement('div');
  Object.assign(box.style, {position: 'fixed', left: (r.left - 4) + 'px', top: (r.top - 3) + 'px',
    width: (r.width + 8) + 'px', height: (r.height + 6) + 'px', border: '2px solid #d81b60',
    borderRadius: '6px', pointerEvents: 'none', zIndex: 9998});
  const badge = document.createElement('div');
  badge.textContent = label;
  Object.assign(badge.style, {position: 'fixed',
    left: Math.max(2, r.left - 16) + 'px', top: Math.max(2, r.top - 12) + 'px',
    width: '24px', height: '24px', lineHeight: '24px', borderRadius: '12px', background: '#d81b60',
    color: 'white', font: 'bold 14px sans-serif', textAlign: 'center', zIndex: 9999});
  document.body.append(box, badge);
}
"""


def web() -> None:
    """The web page after one exchange, its parts labelled 1 to 6."""
    from selenium import webdriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    with tempfile.TemporaryDirectory(prefix="agentd-pictures-") as home, serve(home) as url:
        for text in ("The user's favorite color is blue", "The user's favorite food is pasta"):
            _post(f"{url}/v1/memories", {"persona": "buddy", "userId": "web", "text": text, "category": "preference"})
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in (*FLAGS, f"--user-data-dir={home}/chromium", "--window-size=1280,800"):
            options.add_argument(flag)
        driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
        try:
            driver.get(url + "/")
            _wait(lambda: driver.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true")
            for field, value in (("channel", "dm-web"), ("user", "web")):
                box = driver.find_element(By.ID, field)
                if box.get_attribute("value") != value:
                    box.clear()
                    box.send_keys(value, Keys.TAB)
            message = driver.find_element(By.ID, "message")
            message.send_keys("What is my favorite color?", Keys.ENTER)
            _wait(lambda: driver.find_elements(By.CSS_SELECTOR, ".exchange.complete"))
            driver.execute_script("document.activeElement.blur()")
            plain = DOCS / "screenshots" / "web-page.png"
            driver.save_screenshot(str(plain))
            print(f"wrote {plain.relative_to(REPO)}")
            driver.execute_script(OVERLAY, LABELS)
            out = DOCS / "screenshots" / "web-annotated.png"
            driver.save_screenshot(str(out))
            print(f"wrote {out.relative_to(REPO)}")
        finally:
            driver.quit()


def _wait(ready: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return
        except Exception:  # the page may re-render between two reads
            pass
        time.sleep(0.1)
    raise SystemExit("the web page did not get there in time")


def budget() -> None:
    """What ``agentd budget`` prints after a short conversation, as SVG."""
    from rich.console import Console
    from rich.text import Text

    with tempfile.TemporaryDirectory(prefix="agentd-pictures-") as home:
        env = _env(home)

        def run(*args: str) -> str:
            done = subprocess.run(
                [*AGENTD, *args], cwd=home, env=env, capture_output=True, text=True, check=True, timeout=300
            )
            return done.stdout

        run("chat", "buddy", "-c", "general", "-u", "alice", "-m", "remember that I like Python")
        run("chat", "buddy", "-c", "general", "-u", "alice", "-m", "and that I live in Lisbon")
        command = ["budget", "buddy", "--channel", "general", "--user", "alice", "--message", "what should I learn?"]
        env["FORCE_COLOR"] = "1"
        env["TERM"] = "xterm-256color"
        printed = run(*command)
    console = Console(record=True, width=100, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(Text.from_ansi(printed.rstrip("\n")))
    svg = console.export_svg(title="agentd " + " ".join(_quote(a) for a in command))
    # rich links a web font from a CDN: the reader's own monospace font is used instead.
    svg = re.sub(r"@font-face \{.*?\}\s*", "", svg, flags=re.S)
    out = DOCS / "images" / "budget.svg"
    out.write_text(svg, encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)}")


def _quote(arg: str) -> str:
    return f'"{arg}"' if " " in arg else arg


def site() -> None:
    """The built site's home page."""
    with tempfile.TemporaryDirectory(prefix="agentd-site-") as where:
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", where], cwd=REPO, env=env, check=True
        )
        out = DOCS / "screenshots" / "site-home.png"
        subprocess.run(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={where}/chromium",
                "--window-size=1280,900",
                f"--screenshot={out}",
                f"file://{where}/index.html",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        print(f"wrote {out.relative_to(REPO)}")


def main(argv: list[str]) -> int:
    """Make the pictures named on the command line (all of them by default)."""
    makers = {"web": web, "budget": budget, "site": site}
    for name in argv or list(makers):
        makers[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
