"""The Python client against a real `tern serve --http`, on SQLite and, when
TERN_TEST_PG is set, on PostgreSQL.

TERN_BIN names the tern binary (default: target/release/tern of this
checkout). Run: python3 -m unittest discover -s python/tests -v
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python", "src"))

from tern_advisor import (  # noqa: E402
    Advisor,
    AdvisorError,
    BadRequest,
    ConnectionFailed,
    NotFound,
)

TERN = os.environ.get("TERN_BIN") or os.path.join(ROOT, "target", "release", "tern")
PG = os.environ.get("TERN_TEST_PG") or ""
STRICT = bool(os.environ.get("TERN_TEST_STRICT"))


def skip(reason):
    """Skips the test, or fails it when TERN_TEST_STRICT is set (CI, as
    root): there nothing may be skipped."""
    if STRICT:
        raise AssertionError(reason + " (TERN_TEST_STRICT is set: no test may skip)")
    raise unittest.SkipTest(reason)


SITE = "test-site"


class Daemon:
    """`tern serve --http --site test-site` in a temporary directory."""

    def __init__(self, db=None):
        self.dir = tempfile.mkdtemp(prefix="tern-py-")
        os.mkdir(os.path.join(self.dir, "root"))
        args = [TERN, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                "--root", os.path.join(self.dir, "root"),
                "--state-dir", os.path.join(self.dir, "state"),
                "--site", SITE, "--probe-jitter", "0", "--json"]
        if db:
            args += ["--db", db]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line:
            err = self.proc.stderr.read()
            raise RuntimeError("tern serve did not start: " + err)
        self.banner = json.loads(line)
        self.url = "http://" + self.banner["http"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.stdout.close()
            self.proc.stderr.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def have_tern():
    return os.access(TERN, os.X_OK)


class ClientTests:
    """The tests; mixed into one TestCase per database."""

    db = None
    needs_pg = False

    @classmethod
    def setUpClass(cls):
        if cls.needs_pg and not PG:
            skip("SKIP: TERN_TEST_PG is not set; the PostgreSQL half did not run")
        if not have_tern():
            skip("SKIP: no tern binary at %s (cargo build --release, or set TERN_BIN)" % TERN)
        cls.daemon = Daemon(cls.db)
        cls.adv = Advisor(cls.daemon.url)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_unknown_host_is_not_found(self):
        with self.assertRaises(NotFound) as cm:
            self.adv.advice("unknown.example")
        self.assertEqual(cm.exception.status, 404)
        self.assertEqual(cm.exception.code, "not_found")
        self.assertIn("unknown host", cm.exception.message)

    def test_bad_host_is_a_bad_request(self):
        with self.assertRaises(BadRequest) as cm:
            self.adv.advice("not a host")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(BadRequest):
            self.adv.advice("")
        with self.assertRaises(BadRequest):
            self.adv.report("h.example", rtt_ms=-1)

    def test_targets_are_added_listed_and_removed(self):
        t = self.adv.add_target("192.0.2.10", port=5000, interval_s=3600)
        self.assertEqual((t["host"], t["port"], t["source"]), ("192.0.2.10", 5000, "api"))
        self.assertIn("192.0.2.10", [t["host"] for t in self.adv.targets()])
        self.adv.remove_target("192.0.2.10")
        self.assertNotIn("192.0.2.10", [t["host"] for t in self.adv.targets()])
        with self.assertRaises(NotFound):
            self.adv.remove_target("192.0.2.10")

    def test_a_report_gives_advice_buffer_size_and_history(self):
        # A name of its own: a PostgreSQL archive may outlive a run.
        host = "py-%s.test" % uuid.uuid4().hex[:12]
        out = self.adv.report(host, throughput_bps=4.8e8, rtt_ms=180.0,
                              bytes=2000000000, duration_s=33.3, streams=4,
                              window="auto", limit="network", command="python test")
        self.assertEqual(out["stored"], 2)
        a = self.adv.advice(host)
        self.assertAlmostEqual(a["rtt_ms"], 180.0)
        self.assertAlmostEqual(a["capacity_bps"], 4.8e8)
        self.assertEqual(a["bdp_bytes"], 10800000)
        self.assertEqual(a["source"], "passive")
        self.assertGreaterEqual(a["streams"], 1)
        self.assertEqual(self.adv.buffer_size(host), a["buffer_bytes"])
        held = a["buffer_bytes"] * a["streams"]
        self.assertTrue(held >= a["bdp_bytes"] or a["host_limit"]["limited"], a)
        hist = self.adv.history(host)
        self.assertEqual(sorted(m["kind"] for m in hist), ["rtt", "throughput"])
        only = self.adv.history(host, kind="throughput", limit=1)
        self.assertEqual(len(only), 1)
        self.assertEqual(only[0]["producer"], "python test")
        self.assertEqual(only[0]["details"]["streams"], 4)
        with self.assertRaises(BadRequest):
            self.adv.history(host, kind="colour")

    def test_schedule_says_how_busy(self):
        s = self.adv.schedule()
        self.assertLessEqual(s["load_bps"], s["budget_bps"])
        self.assertIn("rtt_tcp_connect", [p["name"] for p in s["probes"]])
        # The daemon itself as a target: the probes run at once (no jitter).
        port = int(self.daemon.banner["listen"].rsplit(":", 1)[1])
        self.adv.add_target("127.0.0.1", port=port, interval_s=3600)
        deadline = time.monotonic() + 30
        while s["completed"] < 1:
            self.assertLess(time.monotonic(), deadline, "no probe completed in 30 s: %s" % s)
            time.sleep(0.2)
            s = self.adv.schedule()
        self.assertGreaterEqual(s["targets"], 1, s)
        self.assertLessEqual(s["load_bps"], s["budget_bps"])
        self.assertLessEqual(s["busy_workers"], s["workers"])
        kinds = {m["kind"] for m in self.adv.history("127.0.0.1")}
        self.assertTrue(kinds & {"rtt", "capacity"}, kinds)

    def test_a_target_can_join_a_bottleneck_group(self):
        t = self.adv.add_target("192.0.2.20", interval_s=3600, group="wan-py")
        self.assertEqual(t["group"], "wan-py")
        with self.assertRaises(BadRequest):
            self.adv.add_target("192.0.2.21", group="not a group")
        self.adv.remove_target("192.0.2.20")

    def test_a_report_shows_up_in_pairs_and_series_from_this_site(self):
        host = "py-%s.test" % uuid.uuid4().hex[:12]
        self.adv.report(host, throughput_bps=2.5e8, rtt_ms=42.0, command="python test")
        mine = [p for p in self.adv.pairs() if p["to"] == host]
        self.assertEqual(sorted(p["kind"] for p in mine), ["rtt", "throughput"], mine)
        for p in mine:
            self.assertEqual(p["from"], SITE)
            self.assertEqual(p["count"], 1)
            self.assertGreater(p["last_ms"], 0)
        self.assertEqual({m["from"] for m in self.adv.history(host)}, {SITE})
        s = self.adv.series(host, "rtt")
        self.assertEqual((s["from"], s["to"], s["kind"], s["unit"]), (SITE, host, "rtt", "ms"))
        self.assertEqual([p["value"] for p in s["points"]], [42.0])
        self.assertEqual(self.adv.series(host, "rtt", from_="elsewhere")["points"], [])
        self.assertEqual(self.adv.events(to=host), [])
        self.assertEqual(self.adv.routes(from_=SITE, to=host), [])

    def test_a_series_without_measurements_is_empty_and_bad_ones_refused(self):
        host = "py-%s.test" % uuid.uuid4().hex[:12]
        s = self.adv.series(host, "loss")
        self.assertEqual((s["from"], s["to"], s["kind"]), (SITE, host, "loss"))
        self.assertEqual((s["unit"], s["smoothing"], s["points"]), ("%", "raw", []))
        s = self.adv.series(host, "loss", ewma=0.5, since_ms=0, until_ms=2**62, limit=10)
        self.assertEqual((s["smoothing"], s["points"]), ("ewma 0.5", []))
        self.assertEqual(self.adv.series(host, "route")["unit"], "hops")
        with self.assertRaises(BadRequest) as cm:
            self.adv.series(host, "bogus")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(BadRequest) as cm:
            self.adv.series(host, "rtt", ewma=0)
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(BadRequest):
            self.adv.series("not a host", "rtt")

    def test_a_mesh_is_put_listed_and_deleted(self):
        # Names of their own: a PostgreSQL archive may outlive a run. The
        # site (test-site) is in no group, so nothing probes the hosts.
        tag = uuid.uuid4().hex[:12]
        a, b = "a-%s.example" % tag, "b-%s.example" % tag
        mesh = {"name": "py-" + tag,
                "hosts": [{"name": a}, {"name": b, "port": 4848}],
                "groups": [{"name": "all", "members": [a, b],
                            "tests": ["rtt", "loss", "route", "capacity"], "interval_s": 600}]}
        try:
            self.assertEqual(self.adv.put_mesh(mesh), mesh)
            self.assertIn(mesh, self.adv.meshes())
            targets = {t["host"]: t for t in self.adv.targets() if t["host"] in (a, b)}
            self.assertEqual(sorted(targets), [a, b])
            for t in targets.values():
                self.assertEqual(t["source"], "mesh")
                self.assertEqual(t["interval_s"], 600)
                self.assertEqual(sorted(t["probes"]), ["capacity", "loss", "route", "rtt"])
            self.assertEqual(targets[b]["port"], 4848)
        finally:
            self.adv.delete_mesh(mesh["name"])
        self.assertNotIn(mesh["name"], [m["name"] for m in self.adv.meshes()])
        # Its hosts stay, as discovered targets that age out, with their history.
        left = {t["host"]: t for t in self.adv.targets() if t["host"] in (a, b)}
        self.assertEqual(sorted(left), [a, b])
        self.assertEqual({t["source"] for t in left.values()}, {"discovered"})
        with self.assertRaises(NotFound) as cm:
            self.adv.delete_mesh(mesh["name"])
        self.assertEqual(cm.exception.status, 404)

    def test_a_mesh_with_a_bad_test_is_refused(self):
        tag = uuid.uuid4().hex[:12]
        mesh = {"name": "py-" + tag,
                "hosts": [{"name": "a.example"}, {"name": "b.example"}],
                "groups": [{"name": "all", "members": ["a.example", "b.example"],
                            "tests": ["rtt", "ping"], "interval_s": 600}]}
        with self.assertRaises(BadRequest) as cm:
            self.adv.put_mesh(mesh)
        self.assertEqual(cm.exception.status, 400)
        self.assertIn("ping", cm.exception.message)
        self.assertNotIn(mesh["name"], [m["name"] for m in self.adv.meshes()])
        with self.assertRaises(BadRequest):
            self.adv.put_mesh({"hosts": []})


class SqliteTests(ClientTests, unittest.TestCase):
    db = None


class PostgresTests(ClientTests, unittest.TestCase):
    db = PG
    needs_pg = True


class FreshArchiveTests(unittest.TestCase):
    """A daemon of its own on an empty SQLite archive: nothing measured,
    nothing defined."""

    @classmethod
    def setUpClass(cls):
        if not have_tern():
            skip("SKIP: no tern binary at %s (cargo build --release, or set TERN_BIN)" % TERN)
        cls.daemon = Daemon()
        cls.adv = Advisor(cls.daemon.url)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_a_fresh_archive_has_empty_lists(self):
        self.assertEqual(self.adv.pairs(), [])
        self.assertEqual(self.adv.events(), [])
        self.assertEqual(self.adv.events(from_=SITE, since_ms=0, limit=5), [])
        self.assertEqual(self.adv.routes(), [])
        self.assertEqual(self.adv.groups(), [])
        self.assertEqual(self.adv.meshes(), [])


class NoAdvisorTests(unittest.TestCase):
    def test_nothing_listening_is_connection_failed(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with self.assertRaises(ConnectionFailed) as cm:
            Advisor("http://127.0.0.1:%d" % port, timeout=2).advice("h.example")
        self.assertIsNone(cm.exception.status)
        self.assertIsInstance(cm.exception, AdvisorError)

    def test_bad_urls_are_refused(self):
        with self.assertRaises(ValueError):
            Advisor("ftp://x")


if __name__ == "__main__":
    unittest.main()
