"""What clients/clients_test.go gives the tests: a running notifyd, the
database as the application's role (only notifyd_app, plus its own table
comments) and as notifyd's owner (to check what was written)."""

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional, Tuple

import psycopg


def _need(name: str) -> str:
    v = os.environ.get(name)
    if not v:
        raise RuntimeError(name + " is not set: run these tests through `go test ./clients/` (make test does)")
    return v


APP_URL = _need("NOTIFYD_TEST_APP_URL")
OWNER_URL = _need("NOTIFYD_TEST_DATABASE_URL")
API = _need("NOTIFYD_TEST_API")
TOKEN_SECRET = _need("NOTIFYD_TEST_TOKEN_SECRET")
TYPES_DIR = _need("NOTIFYD_TEST_TYPES_DIR")

PARAMS = {"post_title": "Hello", "author_name": "Ada"}


def scalar(sql: str, *args: Any) -> Any:
    """The first column of sql's first row, read as notifyd's owner."""
    with psycopg.connect(OWNER_URL, autocommit=True) as conn:
        row = conn.execute(sql, args).fetchone()
        return row[0] if row else None


def wait_for(sql: str, *args: Any, timeout: float = 30.0) -> Tuple[Any, ...]:
    """Poll (as the owner) until sql returns a row (a fan-out on a loaded machine) and return it."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(OWNER_URL, autocommit=True) as conn:
        while True:
            row = conn.execute(sql, args).fetchone()
            if row is not None:
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"no row after {timeout} s: {sql} {args}")
            time.sleep(0.05)  # polling interval


def inbox(token: str, query: str = "") -> Tuple[int, Optional[Dict[str, Any]]]:
    """GET /v1/inbox (with ?query when given) with token: the status and the JSON body."""
    req = urllib.request.Request(API + "/v1/inbox" + ("?" + query if query else ""), headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(req, timeout=30) as res:
            return res.status, json.load(res)
    except urllib.error.HTTPError as err:
        err.read()
        return err.code, None


def dsn_parts(url: str) -> Dict[str, str]:
    """The parts of a postgres:// URL, as Django's DATABASES wants them."""
    u = urllib.parse.urlsplit(url)
    q = dict(urllib.parse.parse_qsl(u.query))
    return {
        "NAME": u.path.lstrip("/"),
        "USER": urllib.parse.unquote(u.username or ""),
        "PASSWORD": urllib.parse.unquote(u.password or ""),
        "HOST": q.get("host", u.hostname or ""),
        "PORT": q.get("port", str(u.port or "")),
    }
