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
    def _valid_host(host):
        if not isinstance(host, str) or not host:
            raise BadRequest("a host name or address is needed, not %r" % (host,))
        return host

    @classmethod
    def _host(cls, host):
        return urllib.parse.quote(cls._valid_host(host), safe=":")

    @staticmethod
    def _name(name):
        if not isinstance(name, str) or not name:
            raise BadRequest("a mesh name is needed, not %r" % (name,))
        return urllib.parse.quote(name, safe="")

    @staticmethod
    def _query(**params):
        """The query string of the parameters that are not None; `from_`
        is sent as `from`."""
        query = {}
        for name, value in params.items():
            if value is not None:
                query[name.rstrip("_")] = value
        return "?" + urllib.parse.urlencode(query) if query else ""

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
        """Measurements of `host`, newest first, each with the site that
        measured it (`from`); `kind` is rtt, capacity, throughput, loss,
        loss_reverse, jitter, jitter_reverse or route."""
        query = {"limit": int(limit)}
        if kind is not None:
            query["kind"] = kind
        path = "/api/v1/history/%s?%s" % (self._host(host), urllib.parse.urlencode(query))
        return self._call("GET", path)["measurements"]

    def targets(self):
        """Every target the advisor measures: host, port, source (config,
        api, discovered or mesh), interval_s and, when a mesh sets them,
        probes (the tests run against it)."""
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

    def series(self, to, kind, from_=None, since_ms=None, until_ms=None, limit=None, ewma=None):
        """The series of one kind on the path from the site `from_` (default:
        this advisor's) to `to`, oldest first: from, to, kind, unit,
        smoothing ("raw", or "ewma W" when `ewma` is a weight W, 0 < W <= 1)
        and points, each at_ms and value. `since_ms` and `until_ms` bound
        it (ms since the epoch); `limit` keeps the newest points (1000 by
        default, at most 10000)."""
        query = self._query(from_=from_, to=self._valid_host(to), kind=kind, since_ms=since_ms,
                            until_ms=until_ms, limit=limit, ewma=ewma)
        return self._call("GET", "/api/v1/series" + query)

    def pairs(self):
        """Every (site, target, kind) with measurements: from, to, kind,
        count and last_ms."""
        return self._call("GET", "/api/v1/pairs")["pairs"]

    def events(self, from_=None, to=None, since_ms=None, limit=None):
        """Route changes and level shifts, newest first, of the paths from
        the site `from_` and to the target `to` (default: all): from, host,
        kind, event (route_change or level_shift), at_ms and details."""
        if to is not None:
            to = self._valid_host(to)
        query = self._query(from_=from_, to=to, since_ms=since_ms, limit=limit)
        return self._call("GET", "/api/v1/events" + query)["events"]

    def routes(self, from_=None, to=None):
        """The newest route of every path (of the site `from_`, to `to`):
        from, to, at_ms, reached and hops (ttl, addr, rtt_ms)."""
        if to is not None:
            to = self._valid_host(to)
        return self._call("GET", "/api/v1/routes" + self._query(from_=from_, to=to))["routes"]

    def groups(self):
        """Bottleneck groups, paths whose newest routes share a router: name,
        paths ([from, to] pairs) and shared_hops."""
        return self._call("GET", "/api/v1/groups")["groups"]

    def meshes(self):
        """Every mesh in the archive, as dicts: name, hosts (name, port) and
        groups (name, members, tests, interval_s)."""
        return self._call("GET", "/api/v1/meshes")["meshes"]

    def put_mesh(self, mesh):
        """Stores (or replaces) the mesh `mesh` (a dict: name, hosts and
        groups, as meshes() returns them); returns it as stored. The hosts
        of its groups become targets (source mesh); every advisor sharing
        the archive measures the hosts that share a group with its site."""
        if not isinstance(mesh, dict):
            raise BadRequest("a mesh is a dict with name, hosts and groups, not %r" % (mesh,))
        return self._call("PUT", "/api/v1/meshes/" + self._name(mesh.get("name")), mesh)

    def delete_mesh(self, name):
        """Removes a mesh; its hosts that no other mesh lists age like
        discovered targets, and no measurement is deleted."""
        self._call("DELETE", "/api/v1/meshes/" + self._name(name))
