"""Registry credentials and the answer to a registry's challenge, as docker and oras-go do it.

Credentials, as the registry tools look them up (the first that has some for the registry wins):
``ORAS_USER``/``ORAS_PASS``; then docker's config (``$DOCKER_CONFIG/config.json``, else
``~/.docker/config.json``) and ``REGISTRY_AUTH_FILE`` (podman, skopeo), each read as docker reads
it: a ``credHelpers`` entry for the registry, else the ``credsStore``, asked through
``docker-credential-<name> get``, else the inline ``auths`` entry. A file that is no JSON object, an
entry whose ``auth`` is not base64 of ``user:password``, a helper that is missing or fails: one
line naming the file (PlanError, exit 2): a fleet node must not quietly go anonymous.

The challenge decides the scheme (oras-py's token backend read a Basic challenge's realm as a
URL): ``WWW-Authenticate: Basic`` gets the credentials as they are; ``Bearer realm=...,
service=..., scope=...`` gets a token from the realm (with the credentials, or anonymously where
there are none) for that scope. An answer the registry still refuses is AuthFailed, which says
"authentication failed" with the registry's own answer and where the credentials came from.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import subprocess
from typing import NamedTuple

from planner.errors import PlanError

HELPER_TIMEOUT_S = 30.0   # a credential helper may ask a keychain or a cloud's metadata service
_NOT_FOUND = "credentials not found"  # what docker's helpers say (exit 1) for a registry they do not hold
_PARAM = re.compile(r'([A-Za-z]+)="([^"]*)"')


class AuthFailed(Exception):
    """The registry refused us (or asks for credentials we do not have): one line, exit 1."""


class Credentials(NamedTuple):
    user: str
    password: str
    source: str     # where they came from, for the failure's line

    def basic(self) -> str:
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


# --- where the credentials come from ------------------------------------------------------------

def credentials(registry: str, environ=os.environ) -> Credentials | None:
    """The credentials for `registry` (host[:port]), or None: anonymous."""
    user, password = environ.get("ORAS_USER"), environ.get("ORAS_PASS")
    if user and password:
        return Credentials(user, password, "ORAS_USER/ORAS_PASS")
    for path in auth_files(environ):
        found = _from_file(path, registry, environ)
        if found:
            return found
    return None


def auth_files(environ=os.environ) -> list[str]:
    """docker's config where DOCKER_CONFIG moves it (else the home directory's), and
    REGISTRY_AUTH_FILE; those that exist."""
    docker_dir = environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    files = [os.path.join(docker_dir, "config.json")]
    if environ.get("REGISTRY_AUTH_FILE"):
        files.append(environ["REGISTRY_AUTH_FILE"])
    return [f for f in files if os.path.isfile(f)]


def _from_file(path: str, registry: str, environ) -> Credentials | None:
    config = _read_config(path)
    helper = (config.get("credHelpers") or {}).get(registry) or config.get("credsStore")
    if helper:
        found = _from_helper(path, str(helper), registry, environ)
        if found:
            return found
    entry = _entry_for(config.get("auths") or {}, registry)
    return _from_entry(path, registry, entry) if entry else None


def _read_config(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise PlanError(f"registry credentials unreadable ({getattr(e, 'strerror', None) or e})", file=path) from None
    except ValueError as e:
        raise PlanError(f"registry credentials: not JSON ({e})", file=path) from None
    if not isinstance(config, dict) or not all(isinstance(config.get(k) or {}, dict) for k in ("auths", "credHelpers")):
        raise PlanError("registry credentials: not a docker config (a JSON object with 'auths' and "
                        "'credHelpers' objects)", file=path)
    return config


def _entry_for(auths: dict, registry: str) -> dict | None:
    """The `auths` entry for `registry`: docker keys them by host, with or without a scheme and
    path (`https://host/v1/`)."""
    for key, entry in auths.items():
        host = re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]
        if host == registry and isinstance(entry, dict):
            return entry
    return None


def _from_entry(path: str, registry: str, entry: dict) -> Credentials | None:
    if entry.get("auth"):
        try:
            user, colon, password = base64.b64decode(entry["auth"], validate=True).decode().partition(":")
        except (binascii.Error, ValueError, TypeError):
            user, colon, password = "", "", ""
        if not colon or not user:
            raise PlanError(f"registry credentials for {registry}: 'auth' is not base64 of user:password", file=path)
        return Credentials(user, password, path)
    if entry.get("username") and entry.get("password"):  # older docker, and some tools, write them apart
        return Credentials(str(entry["username"]), str(entry["password"]), path)
    return None  # an entry without credentials: docker lists registries its credsStore holds that way


def _from_helper(path: str, helper: str, registry: str, environ) -> Credentials | None:
    binary = f"docker-credential-{helper}"
    where = f"registry credentials for {registry}: {binary} get"
    try:
        done = subprocess.run([binary, "get"], input=registry, capture_output=True, text=True,
                              timeout=HELPER_TIMEOUT_S, env=dict(environ))
    except FileNotFoundError:
        raise PlanError(f"{where}: {binary} is not on PATH", file=path) from None
    except subprocess.TimeoutExpired:
        raise PlanError(f"{where}: no answer within {HELPER_TIMEOUT_S:.0f} s", file=path) from None
    if done.returncode != 0:
        said = (done.stdout.strip() or done.stderr.strip()).splitlines()
        if said and _NOT_FOUND in said[0].lower():
            return None
        raise PlanError(f"{where}: exit {done.returncode}{': ' + said[0] if said else ''}", file=path)
    try:
        answer = json.loads(done.stdout)
        return Credentials(str(answer["Username"]), str(answer["Secret"]), f"{binary} ({path})")
    except (ValueError, KeyError, TypeError):
        raise PlanError(f"{where}: its answer is not JSON with Username and Secret", file=path) from None


# --- the challenge ------------------------------------------------------------------------------

class Challenge(NamedTuple):
    scheme: str       # "basic" or "bearer"
    params: dict      # realm, service, scope, error...


def parse_challenge(header: str | None) -> Challenge | None:
    """`WWW-Authenticate: Bearer realm="...",service="...",scope="..."` or `Basic realm="..."`."""
    if not header or not header.strip():
        return None
    scheme, _, rest = header.strip().partition(" ")
    return Challenge(scheme.lower(), dict(_PARAM.findall(rest)))


class Session:
    """One registry's authorization across the requests of a push or pull: what was learnt from the
    first challenge is sent with every request after it (docker does the same), so that a streamed
    upload is not sent twice."""

    def __init__(self, registry: str, creds: Credentials | None):
        self.registry, self.creds = registry, creds
        self.header: str | None = None   # Authorization
        self.tokens: dict = {}           # scope -> Bearer token

    def apply(self, headers: dict | None) -> dict:
        headers = dict(headers or {})
        if self.header:
            headers["Authorization"] = self.header
        return headers

    def answer(self, response, get_token) -> None:
        """Learn the Authorization `response` (a 401) asks for; AuthFailed where we cannot give it.
        `get_token(url, params, headers)` asks the token service (the caller bounds it in time)."""
        challenge = parse_challenge(response.headers.get("WWW-Authenticate"))
        if challenge is None:
            raise AuthFailed(self.failure(response, "and names no scheme (no WWW-Authenticate)"))
        if challenge.scheme == "basic":
            if self.creds is None:
                raise AuthFailed(self.failure(response, "and asks for a user and password (Basic)"))
            self.header = self.creds.basic()
        elif challenge.scheme == "bearer":
            self.header = "Bearer " + self._token(challenge, get_token)
        else:
            raise AuthFailed(self.failure(response, f"with a {challenge.scheme!r} challenge, which neither docker nor we speak"))

    def _token(self, challenge: Challenge, get_token) -> str:
        scope = challenge.params.get("scope", "")
        if scope in self.tokens and self.header != "Bearer " + self.tokens[scope]:
            return self.tokens[scope]  # a scope we hold a token for (push and pull alternate)
        realm = challenge.params.get("realm", "")
        if not re.match(r"https?://", realm):
            raise AuthFailed(f"authentication failed: {self.registry}'s Bearer challenge has no http(s) realm ({realm!r})")
        params = {k: challenge.params[k] for k in ("service", "scope") if challenge.params.get(k)}
        headers = {"Authorization": self.creds.basic()} if self.creds else {}
        response = get_token(realm, params, headers)
        if response.status_code != 200:
            raise AuthFailed(f"authentication failed: the token service {realm} answered HTTP {response.status_code}"
                             f"{detail(response, ' ')}{self._with()}")
        try:
            body = response.json()
            token = body.get("token") or body.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not token or not isinstance(token, str):
            raise AuthFailed(f"authentication failed: the token service {realm} gave no token")
        self.tokens[scope] = token
        return token

    def failure(self, response, how: str = "") -> str:
        """The line for a request the registry refused: its status, its own words, our credentials."""
        what = "denied access" if response.status_code == 403 else "refused the request"
        return (f"authentication failed: {self.registry} {what}{' ' + how if how else ''} "
                f"(HTTP {response.status_code}{detail(response, ': ')}){self._with()}")

    def _with(self) -> str:
        if self.creds is None:
            return f"; no credentials for {self.registry} (docker login, REGISTRY_AUTH_FILE or ORAS_USER/ORAS_PASS)"
        return f"; user {self.creds.user!r} from {self.creds.source}"


def detail(response, prefix: str) -> str:
    """The registry's own words: its `errors` (the distribution spec's body), else the challenge's
    error; '' where it said nothing."""
    said = ""
    try:
        errors = response.json().get("errors") or []
        said = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    except (ValueError, AttributeError):
        pass
    if not said:
        challenge = parse_challenge(response.headers.get("WWW-Authenticate"))
        said = (challenge.params.get("error_description") or challenge.params.get("error") or "") if challenge else ""
    return f"{prefix}{said}" if said else ""
