"""Registries that ask for credentials, as fleets run them (executor/bundle/oci_auth.py): the CNCF
registry with HTTP Basic auth (htpasswd) and a Bearer token service in front of it
(registry_server.TokenProxy). Right credentials push and pull bit-identical, from each place the
registry tools keep them; wrong or missing ones are one line that says "authentication failed"
with the registry's answer (exit 1), never "cannot be reached"; a docker config that cannot be
read is one line naming it (exit 2)."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest

from executor.bundle import oci, oci_auth, oci_ref
from planner.errors import PlanError
from registry_server import PASSWORD, USER, TokenProxy, serve
from test_bundle_oci import make_bundle, run_cli, sha


@pytest.fixture
def basic(tmp_path, monkeypatch):
    server = serve("basic", str(tmp_path), monkeypatch)
    yield server
    server.kill()


@pytest.fixture
def token(tmp_path, monkeypatch):
    """The token-auth registry: the proxy's address; USER's credentials in the environment."""
    upstream = serve("open", str(tmp_path), monkeypatch)
    proxy = TokenProxy(upstream).start()
    monkeypatch.setenv("ORAS_USER", USER)
    monkeypatch.setenv("ORAS_PASS", PASSWORD)
    yield proxy
    proxy.stop()
    upstream.kill()


def without_env_credentials(monkeypatch):
    monkeypatch.delenv("ORAS_USER")
    monkeypatch.delenv("ORAS_PASS")


def docker_config(tmp_path, monkeypatch, doc) -> str:
    directory = tmp_path / "docker-config"
    directory.mkdir(exist_ok=True)
    (directory / "config.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    return str(directory / "config.json")


def auth_of(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def push_and_pull_cli(tmp_path, address: str):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    pushed = run_cli("push", str(bundle), f"oci://{address}/warmup/llama:v1")
    pulled = run_cli("pull", f"oci://{address}/warmup/llama:v1", "-o", str(tmp_path / "p.warmup"))
    return bundle, pushed, pulled


def assert_one_line(done, code: int, *words: str) -> None:
    assert done.returncode == code, done.stderr
    assert done.stdout == "" and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# --- HTTP Basic (the registry's htpasswd) -----------------------------------------------------------

def test_basic_auth_with_the_right_credentials_pushes_and_pulls_bit_identical(tmp_path, basic):
    bundle, pushed, pulled = push_and_pull_cli(tmp_path, basic.address)
    assert pushed.returncode == 0 and pulled.returncode == 0, pushed.stderr + pulled.stderr
    assert pulled.stdout == pushed.stdout and sha(tmp_path / "p.warmup") == sha(bundle)


def test_basic_auth_with_a_wrong_password_is_authentication_failed(tmp_path, basic, monkeypatch):
    monkeypatch.setenv("ORAS_PASS", PASSWORD + "-wrong")
    _, pushed, pulled = push_and_pull_cli(tmp_path, basic.address)
    for done in (pushed, pulled):
        assert_one_line(done, 1, f"authentication failed: {basic.address} refused the request (HTTP 401",
                        "user 'alice' from ORAS_USER/ORAS_PASS")
        assert "cannot be reached" not in done.stderr
    assert not (tmp_path / "p.warmup").exists()


def test_basic_auth_without_credentials_says_the_registry_asks_for_them(tmp_path, basic, monkeypatch):
    without_env_credentials(monkeypatch)
    _, pushed, pulled = push_and_pull_cli(tmp_path, basic.address)
    for done in (pushed, pulled):
        assert_one_line(done, 1, f"authentication failed: {basic.address} refused the request and asks for a "
                                 "user and password (Basic) (HTTP 401", f"no credentials for {basic.address}")


def test_basic_credentials_from_a_docker_config_auths_entry(tmp_path, basic, monkeypatch):
    without_env_credentials(monkeypatch)
    docker_config(tmp_path, monkeypatch, {"auths": {f"http://{basic.address}/v2/": {"auth": auth_of(USER, PASSWORD)}}})
    bundle, pushed, pulled = push_and_pull_cli(tmp_path, basic.address)
    assert pulled.returncode == 0, pushed.stderr + pulled.stderr
    assert sha(tmp_path / "p.warmup") == sha(bundle)


def test_basic_credentials_from_registry_auth_file(tmp_path, basic, monkeypatch):
    without_env_credentials(monkeypatch)
    auth_file = tmp_path / "auth.json"  # podman's and skopeo's: the same format
    auth_file.write_text(json.dumps({"auths": {basic.address: {"auth": auth_of(USER, PASSWORD)}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(auth_file))
    bundle, _, pulled = push_and_pull_cli(tmp_path, basic.address)
    assert pulled.returncode == 0 and sha(tmp_path / "p.warmup") == sha(bundle), pulled.stderr


def credential_helper(tmp_path, monkeypatch, name: str, body: str) -> None:
    """docker-credential-NAME on PATH: a shell script answering `get` as docker's helpers do."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    helper = bindir / f"docker-credential-{name}"
    helper.write_text(f"#!/bin/sh\n[ \"$1\" = get ] || exit 2\nread server\n{body}\n")
    helper.chmod(helper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("key", ["credHelpers", "credsStore"])
def test_basic_credentials_from_a_credential_helper(tmp_path, basic, monkeypatch, key):
    without_env_credentials(monkeypatch)
    credential_helper(tmp_path, monkeypatch, "fleet",
                      f'[ "$server" = "{basic.address}" ] || {{ echo "credentials not found in native keychain"; exit 1; }}\n'
                      f'echo \'{{"ServerURL":"{basic.address}","Username":"{USER}","Secret":"{PASSWORD}"}}\'')
    docker_config(tmp_path, monkeypatch, {"credHelpers": {basic.address: "fleet"}} if key == "credHelpers"
                  else {"credsStore": "fleet", "auths": {basic.address: {}}})
    bundle, _, pulled = push_and_pull_cli(tmp_path, basic.address)
    assert pulled.returncode == 0 and sha(tmp_path / "p.warmup") == sha(bundle), pulled.stderr
    assert oci_auth.credentials("other.example:5000") is None  # the helper has none for it: anonymous


# --- Bearer tokens ----------------------------------------------------------------------------------

def test_a_token_registry_with_the_right_credentials_pushes_and_pulls_bit_identical(tmp_path, token):
    bundle = tmp_path / "b.warmup"
    make_bundle(bundle)
    from test_bundle_oci import push

    pushed = push(bundle, f"oci://{token.address}/warmup/llama:v1")
    pulled = oci.pull(oci_ref.parse(f"oci://{token.address}/warmup/llama:v1"), str(tmp_path / "p.warmup"))
    assert pulled.reference.digest == pushed.reference.digest and sha(tmp_path / "p.warmup") == sha(bundle)
    # one token for pull (the HEADs), one for push, one for the pull: not one per request
    assert token.tokens_issued == 3 and token.unauthorized == 3


@pytest.mark.parametrize("password", [PASSWORD + "-wrong", None])
def test_a_token_service_refusing_the_credentials_is_authentication_failed(tmp_path, token, monkeypatch, password):
    if password is None:
        without_env_credentials(monkeypatch)
    else:
        monkeypatch.setenv("ORAS_PASS", password)
    _, pushed, pulled = push_and_pull_cli(tmp_path, token.address)
    for done in (pushed, pulled):
        assert_one_line(done, 1, f"authentication failed: the token service http://{token.address}/token "
                                 "answered HTTP 401", "no credentials for" if password is None else "user 'alice'")
        assert "cannot be reached" not in done.stderr


def test_a_token_the_registry_still_refuses_is_authentication_failed(tmp_path, token, monkeypatch):
    monkeypatch.setattr(token, "grants", lambda header, scope: False)  # tokens issued, never honoured
    _, pushed, _ = push_and_pull_cli(tmp_path, token.address)
    assert_one_line(pushed, 1, f"authentication failed: {token.address} refused the request (HTTP 401); "
                               "user 'alice' from ORAS_USER/ORAS_PASS")  # a HEAD: the registry's words are its status


# --- the challenge ------------------------------------------------------------------------------------

@pytest.mark.parametrize("header, scheme, params", [
    ('Basic realm="basic-realm"', "basic", {"realm": "basic-realm"}),
    ('Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push"',
     "bearer", {"realm": "https://auth.example/token", "service": "registry.example", "scope": "repository:a/b:pull,push"}),
    ('bearer realm="https://ghcr.io/token", error="invalid_token"', "bearer",
     {"realm": "https://ghcr.io/token", "error": "invalid_token"}),
])
def test_the_challenge_names_the_scheme_and_its_parameters(header, scheme, params):
    assert oci_auth.parse_challenge(header) == (scheme, params)


def test_a_bearer_challenge_without_an_http_realm_is_authentication_failed():
    class Refused:
        status_code, headers = 401, {"WWW-Authenticate": 'Bearer realm="basic-realm"'}

    session = oci_auth.Session("reg.example", None)
    with pytest.raises(oci_auth.AuthFailed, match="reg.example's Bearer challenge has no http.s. realm .'basic-realm'."):
        session.answer(Refused(), lambda *a: pytest.fail("asked a realm that is no URL"))


# --- credentials that cannot be read: exit 2, the file named --------------------------------------------

@pytest.mark.parametrize("doc, why", [
    ("{not json", "registry credentials: not JSON"),
    ('["auths"]', "not a docker config"),
    (json.dumps({"auths": {"REG": {"auth": "not-base64!"}}}), "registry credentials for REG: 'auth' is not base64 of user:password"),
    (json.dumps({"credHelpers": {"REG": "absent-helper"}}), "docker-credential-absent-helper is not on PATH"),
])
def test_a_docker_config_that_cannot_be_used_is_one_line_naming_it_exit_2(tmp_path, basic, monkeypatch, doc, why):
    without_env_credentials(monkeypatch)
    path = docker_config(tmp_path, monkeypatch, doc.replace("REG", basic.address))
    _, pushed, pulled = push_and_pull_cli(tmp_path, basic.address)
    for done in (pushed, pulled):
        assert_one_line(done, 2, f"warmup: error: {path}: ", why.replace("REG", basic.address))


def test_a_failing_credential_helper_is_one_line_naming_the_config(tmp_path, monkeypatch):
    credential_helper(tmp_path, monkeypatch, "broken", 'echo "keychain locked" >&2; exit 3')
    path = docker_config(tmp_path, monkeypatch, {"credsStore": "broken"})
    with pytest.raises(PlanError, match="docker-credential-broken get: exit 3: keychain locked") as caught:
        oci_auth.credentials("reg.example", {"DOCKER_CONFIG": os.path.dirname(path), "PATH": os.environ["PATH"]})
    assert caught.value.file == path
