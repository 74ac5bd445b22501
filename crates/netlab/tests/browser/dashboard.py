"""Drives the tern dashboard in headless Chromium (the system's, through
Playwright) for crates/netlab/tests/dashboard.rs, and prints what it saw as
one JSON object. Usage:

    dashboard.py BASE_URL CHECK [ARGS...] [--shots DIR]

CHECK is one of
    grid CELLS         the grid has CELLS cells; a click opens a path page
                       whose charts hold the measured points
    event FROM TO      the path page of FROM → TO lists a route change
    routes             the route graph draws, bottleneck groups are listed
    transfers          a running session's bytes grow between two updates; its
                       streams show bytes, its paths and tuning are shown
    map                the world map places the hosts and draws the measured paths
    recent             the last session that ended is listed with its outcome

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
            streams = page.locator(".live-session tr[data-stream]")
            per_stream = [int(streams.nth(i).get_attribute("data-bytes")) for i in range(streams.count())]
            paths = page.locator(".live-session tr[data-path]")
            tuning = page.locator(".live-session .tuning").first.inner_text()
            if not per_stream or sum(per_stream) == 0:
                fail(f"no stream of the running session shows bytes: {per_stream}")
            if "congestion control" not in tuning:
                fail(f"the session's tuning is not shown: {tuning!r}")
            shot(page, shots, "dashboard-transfers.png")
            return {"bytes_first": first, "bytes_later": later, "per_stream": per_stream,
                    "paths": [paths.nth(i).get_attribute("data-path") for i in range(paths.count())],
                    "tuning": tuning, "summary": page.locator("#live-summary").inner_text()}
    fail(f"the transfers view did not move past {first} bytes in 10 s")


def check_map(page, base, shots):
    page.goto(base + "/#/map")
    page.locator("#world .site").first.wait_for(timeout=20000)
    land = page.locator("#world path.land").get_attribute("d") or ""
    if land.count("M") < 50:
        fail(f"the world outline has only {land.count('M')} rings")
    links = page.locator("#world path.link")
    out = [{"from": links.nth(i).get_attribute("data-from"), "to": links.nth(i).get_attribute("data-to"),
            "rtt": float(links.nth(i).get_attribute("data-rtt") or "nan")} for i in range(links.count())]
    sites = page.locator("#world .site").count()
    if links.count():
        # Keyboard: the first path's link opens its path page.
        page.locator("#world a").first.focus()
        page.keyboard.press("Enter")
        page.wait_for_url("**#/path?**", timeout=10000)
        page.goto(base + "/#/map")
        page.locator("#world .site").first.wait_for(timeout=20000)
        # The path page may still have been loading: none of it may land here.
        time.sleep(1)
        if page.locator("#view #advice, #view .chart").count():
            fail("the path page's content showed up on the map page")
    shot(page, shots, "dashboard-map.png")
    return {"sites": sites, "links": out, "summary": page.locator("#map-summary").inner_text()}


def check_recent(page, base, shots):
    page.goto(base + "/#/transfers")
    row = page.locator("#recent-table tr[data-session]").first
    row.wait_for(timeout=20000)
    return {"session": int(row.get_attribute("data-session")), "outcome": row.get_attribute("data-outcome"),
            "text": row.inner_text()}


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
        elif check == "map":
            out = check_map(page, base, shots)
        elif check == "recent":
            out = check_recent(page, base, shots)
        else:
            fail(f"unknown check {check}")
        browser.close()
    if errors:
        fail(f"script errors on the page: {errors}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
