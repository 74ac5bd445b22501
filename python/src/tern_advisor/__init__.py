"""Client of the tern advisor's HTTP API, standard library only.

    >>> from tern_advisor import Advisor
    >>> Advisor("http://127.0.0.1:4748").buffer_size("dtn.example.org")  # doctest: +SKIP
    1875968

Every method returns plain JSON data (dicts and lists) as the API sends it;
docs/ADVISOR.md describes the fields. Errors are exceptions derived from
AdvisorError.
"""

import json
import urllib.error
import urllib.parse
import urllib.request

__all__ = [
    "Advisor",
    "AdvisorError",
    "BadRequest",
    "NotFound",
    "Unavailable",
    "ConnectionFailed",
    "DEFAULT_URL",
]

DEFAULT_URL = "http://127.0.0.1:4748"


class AdvisorError(Exception):
    """The advisor refused a request or could not be asked.

    status: the HTTP status (None when there was no answer);
    code: the API's error code (bad_request, not_found, store_unavailable, ...);
    message: what the advisor said.
    """

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self):
        if self.status is None:
            return self.message
        return "%s (HTTP %d %s)" % (self.message, self.status, self.code or "")


class BadRequest(AdvisorError):
    """The request makes no sense: a bad host name, malformed values (400, 413, 415)."""


class NotFound(AdvisorError):
    """The host is unknown to the advisor, or nothing was measured yet (404)."""


class Unavailable(AdvisorError):
    """The advisor's archive is locked or unreachable; try again later (503)."""


class ConnectionFailed(AdvisorError):
    """Nothing answered at the advisor's URL."""


def _error_for(status):
    if status == 404:
        return NotFound
    if status == 503:
        return Unavailable
    if 400 <= status < 500:
        return BadRequest
    return AdvisorError


class Advisor:
    """A tern advisor at `url` (http://HOST:PORT)."""

    def __init__(self, url=DEFAULT_URL, timeout=10.0):
        if not url.startswith("http://") and not url.startswith("https://"):
            raise ValueError("advisor URL must start with http:// or https://, not %r" % url)
        self.url = url.rstrip("/")
        self.timeout = timeout

    def __repr__(self):
        return "Advisor(%r)" % self.url

    def _call(self, method, path, body=None):
        data = None
        headers = {"Accept": "application/json"}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                err = json.loads(raw)
                message, code = err.get("message", ""), err.get("error")
            except ValueError:
                message, code = raw.decode("utf-8", "replace")[:200], None
            raise _error_for(e.code)(message or e.reason, e.code, code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConnectionFailed("cannot reach the advisor at %s: %s" % (self.url, reason)) from None
        return json.loads(raw) if raw else None

    @staticmethod
    def _host(host):
        if not isinstance(host, str) or not host:
            raise BadRequest("a host name or address is needed, not %r" % (host,))
        return urllib.parse.quote(host, safe=":")

    def advice(self, host):
        """Tuning advice for the path to `host`: buffer_bytes (per stream),
        streams, expected_throughput_bps, rtt_ms, capacity_bps, samples,
        age_s, source (passive|active|mixed) and the evidence behind them."""
        return self._call("GET", "/api/v1/advice/" + self._host(host))

    def buffer_size(self, host):
        """The TCP buffer per stream for `host`, bytes (for setsockopt
        SO_SNDBUF/SO_RCVBUF or iperf3 -w); use advice(host)["streams"]
        streams."""
        return int(self.advice(host)["buffer_bytes"])

    def history(self, host, kind=None, limit=100):
        """Measurements of `host`, newest first; `kind` is rtt, capacity or
        throughput."""
        query = {"limit": int(limit)}
        if kind is not None:
            query["kind"] = kind
        path = "/api/v1/history/%s?%s" % (self._host(host), urllib.parse.urlencode(query))
        return self._call("GET", path)["measurements"]

    def targets(self):
        """Every target the advisor measures."""
        return self._call("GET", "/api/v1/targets")["targets"]

    def add_target(self, host, port=None, interval_s=None, group=None):
        """Adds (or updates) a target; returns it as stored. Targets with
        the same `group` share a bottleneck: one is measured for all."""
        body = {"host": host}
        if port is not None:
            body["port"] = port
        if interval_s is not None:
            body["interval_s"] = interval_s
        if group is not None:
            body["group"] = group
        return self._call("POST", "/api/v1/targets", body)

    def remove_target(self, host):
        """Removes a target and its measurements."""
        self._call("DELETE", "/api/v1/targets/" + self._host(host))

    def report(self, host, **fields):
        """Reports what a transfer with `host` achieved (throughput_bps,
        rtt_ms, bytes, duration_s, streams, window, limit, ...)."""
        body = dict(fields)
        body["host"] = host
        return self._call("POST", "/api/v1/report", body)

    def schedule(self):
        """How busy the advisor's probe scheduler is."""
        return self._call("GET", "/api/v1/schedule")
