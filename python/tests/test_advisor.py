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


class Daemon:
    """`tern serve --http` in a temporary directory."""

    def __init__(self, db=None):
        self.dir = tempfile.mkdtemp(prefix="tern-py-")
        os.mkdir(os.path.join(self.dir, "root"))
        args = [TERN, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                "--root", os.path.join(self.dir, "root"),
                "--state-dir", os.path.join(self.dir, "state"),
                "--probe-jitter", "0", "--json"]
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


class SqliteTests(ClientTests, unittest.TestCase):
    db = None


class PostgresTests(ClientTests, unittest.TestCase):
    db = PG
    needs_pg = True


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
