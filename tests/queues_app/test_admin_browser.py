"""The operator console in a real browser: Playwright (Python) driving Debian's Chromium against
a live server on the demo cluster with cycles run.

The scenario on top of the demo makes every screen say something: a 64-task elastic sweep in
``batch`` fills the idle GPUs, then ``vision``'s GPU limit is set to 24 and an 8-task job
``vit-ablation`` waits in ``vision`` ("over its limit").  Raising that limit in the what-if
preview predicts the reclaim of eight sweep tasks; the tests also save a quota edit and read
its audit row, open the pending workload and read its reason, and cordon a node.

Runs where Chromium is installed (``apt-get install chromium``; ``KAI_CHROMIUM`` names another
binary); skipped with that message elsewhere.  ``KAI_SCREENSHOT_DIR=docs`` also writes the
dashboard and workload screenshots the README shows.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

from queues_app.models import Node, Queue, QueueResource, Tenant, Workload
from queues_app.services import queue_set_quota, workload_submit
from queues_app.cycle.run import cycle_run

CHROMIUM = os.environ.get("KAI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--no-first-run", "--disable-sync"]
USER, PASSWORD = "console-operator", "console-password-19"
GIB = 2**30

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser_context():
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (Debian: apt-get install -y chromium; "
                    "or set KAI_CHROMIUM); .ci/run installs it")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("browser tests need Playwright for Python: pip install -e '.[test]'")
    # Playwright's sync API keeps an event loop in this thread; the ORM calls the tests make
    # between browser steps are ordinary synchronous code.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    profile = tempfile.mkdtemp(prefix="kai-chromium-")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1440, "height": 900}, locale="en-GB", timezone_id="UTC")
        context.set_default_timeout(20_000)
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture
def console(browser_context, live_server, settings):
    """A busy demo cluster and a logged-in operator's page."""
    settings.KAI_DASHBOARD_REFRESH_SECONDS = 1
    busy_demo()
    get_user_model().objects.create_superuser(USER, "ops@example.org", PASSWORD)
    browser_context.clear_cookies()
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", USER)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#dashboard")
    yield page, live_server.url
    page.close()
    assert errors == [], f"JavaScript errors on the console: {errors}"


def busy_demo() -> None:
    call_command("load_demo", stdout=StringIO())
    for _ in range(2):
        cycle_run(trigger="test")
    queues = {q.name: q for q in Queue.objects.all()}
    tenants = {t.name: t for t in Tenant.objects.all()}
    workload_submit(queue=queues["batch"], name="hparam-sweep", tenant=tenants["team-nlp"], min_available=1,
                    task={"gpu": 1, "cpu_millis": 4000, "memory_bytes": 16 * GIB}, replicas=64)
    for _ in range(2):
        cycle_run(trigger="test")
    queue_set_quota(queue=queues["vision"], resource="gpu", limit=24, source="setup")
    workload_submit(queue=queues["vision"], name="vit-ablation", tenant=tenants["team-vision"],
                    task={"gpu": 1, "cpu_millis": 8000, "memory_bytes": 32 * GIB}, replicas=8)
    for _ in range(2):
        cycle_run(trigger="test")
    assert Workload.objects.get(name="vit-ablation").status == "Pending"


def screenshot(page, name: str) -> None:
    target = os.environ.get("KAI_SCREENSHOT_DIR")
    if target:
        if page.locator("#nav-sidebar").is_visible():
            page.click("#toggle-nav-sidebar")  # the page's width for the content
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / name), full_page=True)


def test_the_dashboard_shows_the_cluster_and_refreshes_itself(console):
    page, base = console
    assert page.title().startswith("Cluster")
    in_use = page.inner_text("#gpus-in-use")
    assert float(in_use) > 120  # the sweep filled the idle GPUs (128 in the demo)
    rows = page.locator("table.queue-tree tr.q-row")
    assert rows.count() == 6
    research = page.locator('tr.q-row[data-queue="research"]')
    assert research.locator(".qbar").count() == 3
    assert not research.locator(".qbar-label").first.inner_text().startswith("0 /")  # a parent's subtree
    pending = page.inner_text("[data-section=pending]")
    assert "vit-ablation" in pending and "over its limit" in pending
    assert page.locator("#node-map a.node").count() == 20  # 16 + the DRA-only pool
    # the page polls dashboard.json and swaps its sections without a reload
    page.evaluate("window.__kaiMarker = 19")
    page.wait_for_function("Number(document.getElementById('dashboard').dataset.refreshed || 0) >= 2")
    assert page.evaluate("window.__kaiMarker") == 19
    # a node cell opens the node
    page.locator("#node-map a.node").first.click()
    page.wait_for_url(re.compile(r"/admin/queues_app/node/\d+/change/"))
    assert "dgx-rack-1-01" in page.content()
    page.goto(f"{base}/admin/")
    page.click("#dash-toggle")  # pause before the screenshot so it shows one state
    screenshot(page, "dashboard.png")


def test_a_queue_from_the_tree_what_if_then_save_and_audit(console):
    page, base = console
    page.click('tr.q-row[data-queue="vision"] a.q-link')
    page.wait_for_url(re.compile(r"/admin/queues_app/queue/\d+/change/"))
    gpu_row = page.locator('tr.quota-row[data-resource="gpu"]')
    assert gpu_row.locator("td.field-limit input").input_value() == "24"
    # what-if: the limit back to unlimited would reclaim eight sweep tasks for vit-ablation
    page.click("a.whatif-link")
    page.wait_for_selector("#whatif-form")
    page.fill("input[name=gpu_limit]", "unlimited")
    page.click("input[name=_preview]")
    evictions = page.locator("#whatif-evictions")
    evictions.wait_for()
    text = evictions.inner_text()
    assert "hparam-sweep" in text and "Reclaimed" in text
    assert page.locator("#whatif-evictions tbody tr").count() == 8
    assert QueueResource.objects.get(queue__name="vision", resource="gpu").limit == 24  # nothing saved
    # save a real edit on the form and read its audit row
    page.click("#content a:text('queue form')")
    page.wait_for_selector("#queue_form")
    page.locator('tr.quota-row[data-resource="gpu"] td.field-limit input').fill("40")
    page.click("input[name=_continue]")
    page.wait_for_selector("ul.messagelist")
    assert "was changed successfully" in page.inner_text("ul.messagelist")
    assert QueueResource.objects.get(queue__name="vision", resource="gpu").limit == 40
    history = page.locator("#quota_changes-table")
    first = history.locator("tbody tr").first.inner_text()
    assert "Limit" in first and "24 GPUs" in first and "40 GPUs" in first and USER in first and "admin" in first


def test_a_pending_workload_says_why_and_a_cordon_says_what_it_did(console):
    page, base = console
    page.locator("[data-section=pending] a", has_text="vit-ablation").click()
    page.wait_for_url(re.compile(r"/admin/queues_app/workload/\d+/change/"))
    reason = page.inner_text("#why-summary")
    assert reason.startswith("queue vision is over its limit for gpu: 24 used + 8 requested > 24"), reason
    assert "more nodes would not help" in page.inner_text("#why-waiting")  # a limit, not capacity
    assert "1 of 1 pending in vision" in page.content()
    assert page.locator("#why-events tr").count() >= 3
    page.set_viewport_size({"width": 1440, "height": 900})
    screenshot(page, "workload.png")
    # cordon a node from the node list and read the message
    page.goto(f"{base}/admin/queues_app/node/")
    node = Node.objects.get(name="dgx-rack-2-08")
    page.check(f"input[name=_selected_action][value='{node.pk}']")
    page.select_option("select[name=action]", "cordon")
    page.click("button[name=index]")
    page.wait_for_selector("ul.messagelist")
    message = page.inner_text("ul.messagelist")
    assert "Cordoned 1 node (dgx-rack-2-08)" in message, message
    assert Node.objects.get(pk=node.pk).unschedulable
    page.goto(f"{base}/admin/")
    assert "cordoned" in page.get_attribute(f'#node-map a[data-node="{node.pk}"]', "class")


def test_the_scale_up_preview_says_what_more_nodes_would_start(console):
    """Nodes -> Scale-up preview on the busy demo: eight more nodes shaped like a demo node start
    the workloads that wait for capacity (each is Pending now, waiting for capacity), vit-ablation
    still waits for its limit, and nothing is created."""
    page, base = console
    nodes_before = Node.objects.count()
    page.goto(f"{base}/admin/queues_app/node/")
    page.click("a:text('Scale-up preview')")
    page.wait_for_selector("#scaleup-form")
    page.fill("input[name=count]", "8")
    page.select_option("select[name=like]", "dgx-rack-1-01")
    page.click("input[name=_preview]")
    page.wait_for_selector("#scaleup-queues")
    rows = page.locator("#scaleup-starts tbody tr")
    assert rows.count() >= 1
    first = rows.first.locator("td").first.inner_text().strip()
    assert "scale-up-" in rows.first.inner_text()  # placed on the added nodes
    assert Workload.objects.get(name=first).status == "Pending"
    waiting = page.inner_text("#scaleup-waiting")
    assert "vit-ablation" in waiting and "limit" in waiting  # no node helps a limit
    queue = Workload.objects.get(name=first).queue.name
    row = page.locator(f"#scaleup-queues tbody tr:has(td:text-is('{queue}'))").inner_text()
    assert first in row and "\u2192" in row  # allocation / fair share now -> with the nodes
    rows.first.locator("a").click()
    page.wait_for_url(re.compile(r"/admin/queues_app/workload/\d+/change/"))
    assert "capacity" in page.inner_text("#why-waiting").lower()
    assert Node.objects.count() == nodes_before  # a preview creates nothing


def test_a_workload_with_subgroups_shows_its_tree_and_a_node_its_devices(console):
    """disagg-serve (the demo's subgroup tree) lists each subgroup with placed / required; a DRA node
    lists its devices; the imex-train task shows the DRA devices it holds."""
    page, base = console
    wl = Workload.objects.get(name="disagg-serve")
    page.goto(f"{base}/admin/queues_app/workload/{wl.pk}/change/")
    tree = page.locator("table.kai-subgroups")
    tree.wait_for()
    rows = tree.locator("tbody tr")
    assert rows.count() == 4
    text = tree.inner_text()
    assert "decode-workers" in text and "2 / 2 tasks" in text and "2 / 2 subgroups" in text
    assert "kai.scheduler/rack" in text
    imex = Workload.objects.get(name="imex-train")
    page.goto(f"{base}/admin/queues_app/workload/{imex.pk}/change/")
    body = page.inner_text("body")
    assert "gpu.nvidia.com 0,1,2,3" in body and "4 x gpu.nvidia.com" in body
    page.goto(f"{base}/admin/queues_app/node/?q=gb200")
    assert "gpu.nvidia.com x4" in page.inner_text("#result_list")
