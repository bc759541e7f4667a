"""The web page at ``/`` in a real browser: Debian's headless Chromium driven by selenium
through Debian's chromedriver (nothing is downloaded), against a real daemon.

Set ``AGENTD_SCREENSHOTS=docs/screenshots`` to save the screenshots the README shows."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.access.scopes import Scope
from agentd.config import login_name
from tests.conftest import BUDDY, REPO
from tests.support import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, wait_for
from tests.support.fakeopenai import Turn

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a test dependency: pip install -e '.[test]'")
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    if os.environ.get("AGENTD_REQUIRE_BROWSER"):  # .ci/run: the browser tests never skip there
        pytest.fail("AGENTD_REQUIRE_BROWSER is set, but chromium or chromedriver is missing", pytrace=False)
    pytest.skip(
        "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver; "
        ".ci/run does)",
        allow_module_level=True,
    )

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402

#: Starts processes, loads a model or takes seconds: not in the fast tier.
pytestmark = pytest.mark.slow


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium'}", "--window-size=1280,900"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=CHROMEDRIVER)  # Debian's: selenium-manager never runs
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(30)
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


def shot(driver: object, name: str, tmp_path: Path) -> Path:
    where = Path(os.environ.get("AGENTD_SCREENSHOTS") or tmp_path)
    if not where.is_absolute():
        where = REPO / where
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"{name}.png"
    assert driver.save_screenshot(str(path))  # type: ignore[attr-defined]
    return path


def texts(driver: object, css: str) -> list[str]:
    """The text of every element matching ``css``, read in one step (the page may re-render between steps)."""
    script = "return Array.from(document.querySelectorAll(arguments[0])).map(e => e.textContent)"
    return list(driver.execute_script(script, css))  # type: ignore[attr-defined]


def test_a_newcomer_adds_a_memory_in_the_panel_and_the_default_channel_recalls_it(daemons, browser) -> None:
    """The first hour, exactly: the page opens (no [user] name) as the CLI's user, the login name, in
    that user's direct channel, says so, shows "no memories yet" unclipped; a memory added in the
    panel is recalled by the next question asked where the page opened."""
    d = daemons("", personas={"buddy": BUDDY})
    me = login_name()
    browser.get(d.url + "/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")
    assert browser.find_element(By.ID, "persona").get_attribute("value") == "buddy"
    assert browser.find_element(By.ID, "user").get_attribute("value") == me
    assert browser.find_element(By.ID, "channel").get_attribute("value") == f"dm-{me}"
    where = browser.find_element(By.ID, "where").text
    assert f"#dm-{me} is your direct channel" in where
    assert f"only you ({me}) and buddy" in where
    # Nothing clipped: the empty list's text starts inside its list.
    empty, box = (browser.find_element(By.CSS_SELECTOR, css) for css in ("#memory-list .empty", "#memory-list"))
    assert empty.text == "no memories yet"
    assert empty.rect["x"] >= box.rect["x"], (empty.rect, box.rect)
    browser.find_element(By.ID, "memory-text").send_keys("My favourite colour is green")
    category = browser.find_element(By.ID, "memory-category")
    category.clear()
    category.send_keys("preference")
    browser.find_element(By.CSS_SELECTOR, "#memory-add button").click()
    wait_for(lambda: "My favourite colour is green" in texts(browser, "#memory-list .stored .text"), 30, "the memory")
    browser.find_element(By.ID, "message").send_keys("What is my favourite colour?", Keys.ENTER)
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".exchange.complete"), 60, "the reply")
    assert texts(browser, ".recalled li.memory .text") == ["My favourite colour is green"]
    assert float(texts(browser, ".recalled li.memory .score")[0]) >= 0.5
    # The turn ran where the page said, as that user.
    stored = d.client.get(f"/v1/channels/dm-{me}/messages").json()["messages"]
    assert [(m["role"], m["author"]) for m in stored][:1] == [("user", me)]


def test_the_page_follows_the_configured_user_and_says_when_a_channel_is_shared(daemons, browser) -> None:
    """``[user] name`` is the page's user as it is the CLI's; the user's channel follows the user, and
    a channel typed by hand is described as shared."""
    d = daemons('[user]\nname = "alice"\n', personas={"buddy": BUDDY})
    browser.get(d.url + "/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")
    assert browser.find_element(By.ID, "user").get_attribute("value") == "alice"
    user = browser.find_element(By.ID, "user")
    user.clear()
    user.send_keys("bob", Keys.TAB)
    wait_for(lambda: browser.find_element(By.ID, "channel").get_attribute("value") == "dm-bob", 30, "dm-bob")
    assert "only you (bob) and buddy" in browser.find_element(By.ID, "where").text
    channel = browser.find_element(By.ID, "channel")
    channel.clear()
    channel.send_keys("general", Keys.TAB)
    wait_for(lambda: "#general is shared" in browser.find_element(By.ID, "where").text, 30, "the shared note")
    user = browser.find_element(By.ID, "user")
    user.clear()
    user.send_keys("carol", Keys.TAB)  # a channel chosen by hand stays
    wait_for(lambda: "Memories of carol" in browser.find_element(By.ID, "memories-title").text, 30, "carol")
    assert browser.find_element(By.ID, "channel").get_attribute("value") == "general"


def test_chat_streams_shows_recalled_memories_and_forgets(daemons, fake_openai, browser, tmp_path) -> None:
    d = daemons('[memory.tuning]\ndecay_weight = 0.0\n[user]\nname = "web"\n')
    blue, _ = d.app.memory.add("fake", Scope.user("web"), "The user's favorite color is blue", "preference")
    d.app.memory.add("fake", Scope.user("web"), "The user's favorite food is pasta", "preference")
    reply = "Your favorite color is blue, as you told me before."
    fake_openai.queue(Turn(text=reply, pause_after=3))  # three words, then nothing until released
    browser.get(d.url + "/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")
    assert browser.find_element(By.ID, "persona").get_attribute("value") == "fake"
    assert browser.find_element(By.ID, "channel").get_attribute("value") == "dm-web"
    assert "The user's favorite color is blue" in texts(browser, "#memory-list .stored .text")
    shot(browser, "web-empty", tmp_path)
    # Keyboard only: the message box has the focus; Enter sends.
    active = browser.switch_to.active_element
    assert active.get_attribute("id") == "message"
    active.send_keys("What is my favorite color?", Keys.ENTER)
    partial = wait_for(
        lambda: [t for t in texts(browser, ".reply.streaming .text") if t and t != reply], 60, "a streamed part"
    )
    assert reply.startswith(partial[0])  # seen mid-stream
    fake_openai.release()
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".exchange.complete"), 60, "the reply to complete")
    assert texts(browser, ".reply .text") == [reply]
    recalled = browser.find_elements(By.CSS_SELECTOR, ".recalled li.memory")
    assert [r.find_element(By.CSS_SELECTOR, ".text").text for r in recalled][0] == "The user's favorite color is blue"
    assert float(recalled[0].find_element(By.CSS_SELECTOR, ".score").text) >= 0.5
    near = texts(browser, ".near li.near-miss .text")
    assert near == ["The user's favorite food is pasta"]  # below the threshold: shown, not used
    assert float(texts(browser, ".near li.near-miss .score")[0]) < 0.5
    assert browser.find_elements(By.CSS_SELECTOR, ".budget .bar span.s-memory")
    assert "tokens" in texts(browser, ".budget .legend .total")[0]
    shot(browser, "web-reply", tmp_path)
    # Forget the memory from the panel, with the keyboard, and see it gone.
    forget = browser.find_element(By.CSS_SELECTOR, f'#memory-list li[data-id="{blue.id}"] button')
    forget.send_keys(Keys.ENTER)
    wait_for(
        lambda: "The user's favorite color is blue" not in texts(browser, "#memory-list .stored .text"),
        30,
        "the memory to disappear",
    )
    assert d.app.memory.list_memories("fake", Scope.user("web"))
    assert all(m.id != blue.id for m in d.app.memory.list_memories("fake", Scope.user("web")))
    # Add one from the panel, then find it by searching.
    browser.find_element(By.ID, "memory-text").send_keys("The user keeps bees")
    browser.find_element(By.CSS_SELECTOR, "#memory-add button").click()
    wait_for(lambda: "The user keeps bees" in texts(browser, "#memory-list .stored .text"), 30, "the added memory")
    browser.find_element(By.ID, "memory-query").send_keys("bees", Keys.ENTER)
    wait_for(lambda: texts(browser, "#memory-list .stored .text")[:1] == ["The user keeps bees"], 30, "the search")
    # A phone-width screen: nothing wider than the viewport.
    browser.set_window_size(390, 844)
    width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width
    shot(browser, "web-phone", tmp_path)


def test_the_page_asks_for_the_api_key(daemons, fake_openai, browser, tmp_path) -> None:
    d = daemons('[daemon]\napi_key = "s3cret"\n')
    assert d.client.get("/").status_code == 200  # the page itself needs no key
    assert d.client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    browser.get(d.url + "/")
    dialog = wait_for(lambda: browser.find_element(By.ID, "key-dialog").get_attribute("open") is not None, 30, "dialog")
    assert dialog
    browser.switch_to.active_element.send_keys("s3cret", Keys.ENTER)
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")
    assert browser.find_element(By.ID, "persona").get_attribute("value") == "fake"
    shot(browser, "web-key", tmp_path)


def test_the_page_waits_out_a_429_and_posts_again(daemons, fake_openai, browser) -> None:
    """Admission control refuses the page's message while the channel is full (429, nothing
    stored): the page waits the Retry-After and posts again, and the reply arrives once there
    is room, with no error shown."""
    d = daemons('[daemon]\nmax_pending_per_channel = 1\n[user]\nname = "web"\n')
    fake_openai.queue(Turn(hang=True, text="held"), Turn(text="second reply"))
    first = d.client.post("/v1/channels/dm-web/messages", json={"user": "web", "text": "one", "persona": "fake"})
    assert first.status_code == 202, first.text
    wait_for(lambda: fake_openai.hanging == 1, 60, "the first turn to wait on the model")
    browser.get(d.url + "/")
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")
    browser.switch_to.active_element.send_keys("two", Keys.ENTER)
    wait_for(lambda: d.client.get("/healthz").json()["admission"]["refused"] >= 1, 30, "the page's post refused")
    fake_openai.release()
    # The first message (posted over HTTP) and its reply are the channel's too: the page shows both.
    wait_for(lambda: texts(browser, ".reply .text") == ["held", "second reply"], 60, "both replies")
    assert browser.find_element(By.ID, "status").text == ""  # no error shown (a 429 would have put one here)
    users = [
        m["content"] for m in d.client.get("/v1/channels/dm-web/messages").json()["messages"] if m["role"] == "user"
    ]
    assert sorted(users) == ["one", "two"]  # the refused post was stored once, when it was let in


def ready(browser: object) -> None:
    """Wait until the page has opened its conversation."""
    wait_for(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true", 30, "the page")  # type: ignore[attr-defined]


def test_a_reload_keeps_the_conversation_with_what_each_reply_was_given(daemons, fake_openai, browser) -> None:
    """The page opens on the channel's stored messages: after a reload, the exchange is still there,
    labelled with the persona that replied, with the memories its reply was given and its budget
    (from the reply's context record)."""
    d = daemons('[memory.tuning]\ndecay_weight = 0.0\n[user]\nname = "web"\n')
    d.app.memory.add("fake", Scope.user("web"), "The user's favorite color is blue", "preference")
    fake_openai.queue(Turn(text="Blue, as you said."))
    browser.get(d.url + "/")
    ready(browser)
    browser.switch_to.active_element.send_keys("What is my favorite color?", Keys.ENTER)
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".exchange.complete"), 60, "the reply")
    browser.refresh()
    ready(browser)
    wait_for(lambda: texts(browser, ".reply .text") == ["Blue, as you said."], 30, "the stored reply")
    assert texts(browser, ".msg.user .text") == ["What is my favorite color?"]
    assert texts(browser, ".reply .speaker") == ["fake:"]
    assert texts(browser, ".recalled li.memory .text") == ["The user's favorite color is blue"]
    assert browser.find_elements(By.CSS_SELECTOR, ".budget .bar span.s-memory")
    assert browser.find_element(By.ID, "status").text == ""


def test_a_message_posted_elsewhere_to_the_channel_appears_live(daemons, fake_openai, browser) -> None:
    """A message the CLI or an adapter posts to the channel the page is in shows up while the page
    is open, and so does its reply, with the persona that wrote it."""
    d = daemons('[user]\nname = "web"\n')
    browser.get(d.url + "/")
    ready(browser)
    assert texts(browser, ".exchange") == []
    fake_openai.queue(Turn(text="Hello from the persona."))
    posted = d.client.post(
        "/v1/channels/dm-web/messages", json={"user": "web", "text": "hi from the CLI", "persona": "fake"}
    )
    assert posted.status_code == 202, posted.text
    wait_for(lambda: texts(browser, ".msg.user .text") == ["hi from the CLI"], 30, "the posted message")
    wait_for(lambda: texts(browser, ".reply .text") == ["Hello from the persona."], 60, "its reply")
    assert texts(browser, ".reply .speaker") == ["fake:"]


def test_switching_channel_starts_clean(daemons, fake_openai, browser) -> None:
    """Another channel: none of the first channel's messages, nor its error, stay on screen; the
    channel list offers the channels there are."""
    d = daemons('[user]\nname = "web"\n[channels.lobby]\npersonas = ["fake"]\n')
    fake_openai.queue(Turn(status=400))
    browser.get(d.url + "/")
    ready(browser)
    browser.switch_to.active_element.send_keys("this one fails", Keys.ENTER)
    wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".reply.failed"), 60, "the failed reply")
    assert "lobby" in browser.execute_script(
        "return Array.from(document.querySelectorAll('#channel-list option')).map(o => o.value)"
    )
    channel = browser.find_element(By.ID, "channel")
    channel.clear()
    channel.send_keys("lobby", Keys.TAB)
    wait_for(lambda: "#lobby is shared" in browser.find_element(By.ID, "where").text, 30, "the new channel")
    wait_for(lambda: texts(browser, ".exchange") == [], 30, "an empty log")
    assert browser.find_element(By.ID, "status").text == ""
    assert not browser.find_elements(By.CSS_SELECTOR, ".reply.failed")


def test_a_long_channel_opens_on_its_newest_page_and_pages_back(daemons, browser) -> None:
    """A thousand messages: the page renders the newest page only, and each "Older messages"
    (a button, so the keyboard reaches it) adds the page before, in order, until none is left."""
    d = daemons('[user]\nname = "web"\n')
    rows = [
        {"channel": "dm-web", "role": "user", "author": "web", "content": f"message {i}", "status": "complete"}
        for i in range(1000)
    ]
    with d.app.store.write() as conn:
        d.app.store.messages.add_many(conn, rows)
    browser.get(d.url + "/")
    ready(browser)
    shown = texts(browser, ".msg.user .text")
    assert shown == [f"message {i}" for i in range(950, 1000)]
    older = browser.find_element(By.ID, "older")
    older.send_keys(Keys.ENTER)
    wait_for(lambda: len(texts(browser, ".msg.user .text")) == 100, 30, "the page before")
    assert texts(browser, ".msg.user .text") == [f"message {i}" for i in range(900, 1000)]
    for _ in range(18):
        count = len(texts(browser, ".msg.user .text"))
        browser.find_element(By.ID, "older").click()
        wait_for(lambda count=count: len(texts(browser, ".msg.user .text")) == count + 50, 30, "another page")
    assert texts(browser, ".msg.user .text") == [f"message {i}" for i in range(1000)]
    assert not browser.find_element(By.ID, "older").is_displayed()


def test_the_api_docs_are_served_from_installed_files_and_render_offline(daemons, browser) -> None:
    """/docs and /redoc reference only the daemon's own paths (no CDN); their files come from the
    installed fastapi-offline package; Swagger UI renders the schema in the browser."""
    import re

    d = daemons()
    for page in ("/docs", "/redoc"):
        html = d.client.get(page).text
        urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", html)
        assert urls, html
        assert all(u.startswith("/") for u in urls), (page, urls)
        assert "cdn" not in html.lower()
        for url in urls:
            if url != "/openapi.json":
                assert d.client.get(url).status_code == 200, url
    assert d.client.get("/docs/assets/swagger-ui-bundle.js").headers["content-type"].startswith("text/javascript")
    assert d.client.get("/docs/assets/elsewhere.js").status_code == 404
    browser.get(d.url + "/docs")
    wait_for(lambda: "agentd" in " ".join(texts(browser, ".swagger-ui .info .title")), 30, "Swagger UI")
    assert texts(browser, ".opblock-summary-path")  # the operations are listed


def click(driver: object, css: str) -> None:
    """Click the first element matching ``css``, found and clicked in one step (a panel re-renders
    its list when an event arrives, which would leave a found element stale)."""
    assert driver.execute_script("const e = document.querySelector(arguments[0]); e?.click(); return !!e", css)  # type: ignore[attr-defined]


KEEPER = """
name = "keeper"
model = "offline"
max_reply_tokens = 512
channels = ["general", "dm-*"]
skills = ["remember", "schedule"]
owners = ["web"]
system_prompt = "You are keeper."

[tools."remember"]
approval = "required"
"""


def test_the_panels_approve_a_waiting_tool_call_and_cancel_a_reminder(daemons, browser) -> None:
    """A tool call that needs approval appears in the approvals panel as the turn pauses; Approve
    runs it and the reply arrives. A reminder the persona made appears in the schedules panel, and
    Cancel cancels it."""
    d = daemons('[user]\nname = "web"\n', personas={"keeper": KEEPER})
    browser.get(d.url + "/")
    ready(browser)
    assert texts(browser, "#approval-list li") == ["nothing waiting"]
    assert texts(browser, "#schedule-list li") == ["nothing scheduled"]
    browser.switch_to.active_element.send_keys("remember that I like green tea", Keys.ENTER)
    wait_for(lambda: texts(browser, "#approval-list .stored .text"), 60, "the waiting call")
    (waiting,) = texts(browser, "#approval-list .stored .text")
    assert waiting.startswith("remember(")
    assert "green tea" in waiting
    assert d.app.memory.list_memories("keeper", Scope.user("web")) == []  # not run before it is approved
    click(browser, "#approval-list button:not(.quiet)")
    wait_for(lambda: texts(browser, "#approval-list li") == ["nothing waiting"], 30, "the decision")
    wait_for(lambda: [m.text for m in d.app.memory.list_memories("keeper", Scope.user("web"))], 60, "the approved call")
    (approved,) = d.client.get("/v1/approvals", params={"state": "approved"}).json()["approvals"]
    assert approved["decided_by"].startswith("admin")

    browser.find_element(By.ID, "message").send_keys("remind me in 30 minutes to stretch", Keys.ENTER)
    wait_for(lambda: texts(browser, "#schedule-list .stored .text"), 60, "the reminder")
    (reminder,) = texts(browser, "#schedule-list .stored .text")
    assert "stretch" in reminder
    click(browser, "#schedule-list button")
    wait_for(lambda: texts(browser, "#schedule-list li") == ["nothing scheduled"], 30, "the cancel")
    (cancelled,) = d.client.get("/v1/schedules", params={"user": "web"}).json()["schedules"]
    assert cancelled["state"] == "cancelled"
