"""bloatd's API: the one client (HTTP/1.1 on the daemon's Unix socket) for
the tests, the lab and the benchmarks, and the API's JSON Schema
(docs/api.schema.json, made from bloatd-model's types) that checks every
answer a GET brings."""
import http.client
import json
import os
import re
import socket
import urllib.parse

# The repository: this file is scripts/bloatdpy/api.py (reached through
# a symlink from scripts/tests, lab, bench, vm: realpath, not abspath).
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
SCHEMA = os.path.join(REPO, "docs", "api.schema.json")

# bloatd's API socket; BLOATD_SOCK points elsewhere (a daemon started with
# --run-dir DIR serves DIR/bloatd.sock).
BLOATD_SOCK = os.environ.get("BLOATD_SOCK", "/run/bloatd/bloatd.sock")


class ApiError(OSError):
    """bloatd answered with an HTTP error: its status and its words."""

    def __init__(self, method, path, status, body):
        super().__init__(f"bloatd API {method} {path}: HTTP {status}: {body[:200]!r}")
        self.status = status
        self.body = body


class UnixHTTP(http.client.HTTPConnection):
    """HTTP/1.1 over bloatd's Unix socket."""

    def __init__(self, path, timeout=2.0):
        super().__init__("bloatd", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def request(method, path, body=None, sock_path=BLOATD_SOCK, timeout=2.0, check=True):
    """One request to bloatd's API (a JSON body for POST); returns the
    decoded JSON answer, or None for an empty one. A GET's answer is
    checked against docs/api.schema.json (`check`; ApiSchema). An HTTP
    error raises ApiError."""
    conn = UnixHTTP(sock_path, timeout)
    try:
        if body is None:
            conn.request(method, path)
        else:
            conn.request(method, path, body=json.dumps(body),
                         headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise ApiError(method, path, resp.status, data)
        answer = json.loads(data) if data.strip() else None
        if check and method == "GET":
            api_schema().check(path, answer)
        return answer
    finally:
        conn.close()


def get(path, sock_path=BLOATD_SOCK, timeout=2.0):
    """GET path from bloatd's API; the decoded JSON, checked."""
    return request("GET", path, sock_path=sock_path, timeout=timeout)


def available(sock_path=BLOATD_SOCK):
    """Whether a bloatd answers on `sock_path`."""
    try:
        request("GET", "/v1/status", sock_path=sock_path, check=False)
        return True
    except (OSError, ValueError):
        return False


class ApiSchema:
    """docs/api.schema.json, made from bloatd-model's types (`make
    api-schema`): every answer a test reads through Daemon.api, .sockets
    or .cli_json is checked against its route's schema, so a field the
    daemon drops, renames or retypes fails the test that reads it. Arrays
    longer than MOST_ITEMS are checked on MOST_ITEMS items spread over
    them (a list of 100,000 sockets would take a minute)."""

    MOST_ITEMS = 256

    def __init__(self, path=SCHEMA):
        import jsonschema  # python3-jsonschema (scripts/deps.sh)
        with open(path) as f:
            doc = json.load(f)
        self.routes = []
        for route, schema in doc["answers"].items():
            pattern = "^" + re.sub(r"\\\{[a-z_]+\\\}", "[^/]+", re.escape(route)) + "$"
            root = dict(schema, definitions=doc["definitions"])
            self.routes.append((re.compile(pattern), route, jsonschema.Draft7Validator(root)))

    def check(self, target, answer):
        """Raise AssertionError unless `answer` is what the route of
        `target` (a path, with or without its query) answers."""
        path = urllib.parse.urlsplit(target).path
        for pattern, route, validator in self.routes:
            if pattern.match(path):
                break
        else:
            raise AssertionError(f"{path}: no such route in docs/api.schema.json")
        if isinstance(answer, list) and len(answer) > self.MOST_ITEMS:
            step = len(answer) / self.MOST_ITEMS
            answer = [answer[int(i * step)] for i in range(self.MOST_ITEMS)]
        errors = sorted(validator.iter_errors(answer), key=lambda e: list(e.absolute_path))
        if errors:
            shown = "; ".join(f"at {'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:200]}"
                              for e in errors[:5])
            raise AssertionError(f"{target}: the answer is not {route}'s in docs/api.schema.json "
                                 f"({len(errors)} errors): {shown}")
        return answer


_API_SCHEMA = []


def api_schema():
    """The one ApiSchema, loaded at first use."""
    if not _API_SCHEMA:
        _API_SCHEMA.append(ApiSchema())
    return _API_SCHEMA[0]
