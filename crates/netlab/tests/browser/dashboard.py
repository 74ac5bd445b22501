"""Drives the tern dashboard in headless Chromium (the system's, through
Playwright) for crates/netlab/tests/dashboard.rs, and prints what it saw as
one JSON object. Usage:

    dashboard.py BASE_URL CHECK [ARGS...] [--shots DIR]

CHECK is one of
    grid CELLS         the grid has CELLS cells; a click opens a path page
                       whose charts hold the measured points
    event FROM TO      the path page of FROM → TO lists a route change
    routes             the route graph draws, bottleneck groups are listed
    transfers          a running session's bytes grow between two updates

Exit 1 with the reason on stderr when a check fails.
"""

import json
import os
import sys
import time

from playwright.sync_api import sync_playwright

CHROMIUM = os.environ.get("TERN_CHROMIUM", "/usr/bin/chromium")


def fail(why):
    print(why, file=sys.stderr)
    sys.exit(1)


def shot(page, shots, name):
    if shots:
        page.screenshot(path=os.path.join(shots, name), full_page=True)


def check_grid(page, base, cells, shots):
    page.goto(base + "/#/grid")
    page.wait_for_selector("table.grid a.cell", timeout=20000)
    found = page.locator("table.grid a.cell").count()
    if found != cells:
        fail(f"grid: {found} cells, expected {cells}")
    health = page.locator("table.grid a.cell").first.get_attribute("data-health")
    shot(page, shots, "dashboard-grid.png")
    # Keyboard: the first cell is a link; Enter on it opens the path.
    page.locator("table.grid a.cell").first.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("location.hash.startsWith('#/path')", timeout=10000)
    page.wait_for_selector(".chart[data-kind=rtt] canvas", timeout=20000)
    page.wait_for_function(
        "document.querySelectorAll('.chart[data-points]').length === document.querySelectorAll('.chart').length",
        timeout=20000,
    )
    points = {}
    for c in page.locator(".chart").all():
        points[c.get_attribute("data-kind")] = int(c.get_attribute("data-points") or 0)
        if c.locator("canvas").count() and int(c.get_attribute("data-points") or 0) == 0:
            fail("a chart with no points drew a canvas")
    if points.get("rtt", 0) < 1 or points.get("capacity", 0) < 1:
        fail(f"path charts without measured points: {points}")
    canvases = page.locator(".chart canvas").count()
    shot(page, shots, "dashboard-path.png")
    return {"cells": found, "health": health, "points": points, "canvases": canvases, "hash": page.evaluate("location.hash")}


def check_event(page, base, src, dst, shots):
    page.goto(f"{base}/#/path?from={src}&to={dst}")
    page.wait_for_selector("li[data-event=route_change]", timeout=20000)
    text = page.locator("li[data-event=route_change]").first.inner_text()
    shot(page, shots, "dashboard-path-event.png")
    return {"event": text}


def check_routes(page, base, shots):
    page.goto(base + "/#/routes")
    page.wait_for_selector("#cy canvas", timeout=20000)
    time.sleep(1)
    groups = page.locator("[data-group]").count()
    paths = page.locator("main ul li a").count()
    shot(page, shots, "dashboard-routes.png")
    return {"groups": groups, "paths": paths}


def check_transfers(page, base, shots):
    page.goto(base + "/#/transfers")
    row = page.locator("#live tr[data-session]").first
    row.wait_for(timeout=20000)
    first = int(row.get_attribute("data-bytes"))
    deadline = time.time() + 10
    while time.time() < deadline:
        time.sleep(0.5)
        rows = page.locator("#live tr[data-session]")
        if rows.count() and int(rows.first.get_attribute("data-bytes")) > first:
            later = int(rows.first.get_attribute("data-bytes"))
            shot(page, shots, "dashboard-transfers.png")
            return {"bytes_first": first, "bytes_later": later, "summary": page.locator("#live-summary").inner_text()}
    fail(f"the transfers view did not move past {first} bytes in 10 s")


def main():
    args = sys.argv[1:]
    shots = None
    if "--shots" in args:
        i = args.index("--shots")
        shots = args[i + 1]
        del args[i : i + 2]
        os.makedirs(shots, exist_ok=True)
    base, check, rest = args[0].rstrip("/"), args[1], args[2:]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        if check == "grid":
            out = check_grid(page, base, int(rest[0]), shots)
        elif check == "event":
            out = check_event(page, base, rest[0], rest[1], shots)
        elif check == "routes":
            out = check_routes(page, base, shots)
        elif check == "transfers":
            out = check_transfers(page, base, shots)
        else:
            fail(f"unknown check {check}")
        browser.close()
    if errors:
        fail(f"script errors on the page: {errors}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
