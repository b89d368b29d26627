"""Credentials: which Authorization header goes where, and errors that name the flags."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from loadgen.auth import NO_CREDENTIALS, Credentials, CredentialsError, load_credentials


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_no_flags_no_headers() -> None:
    credentials = load_credentials(None, None, None, environ={"OPENFAAS_PASSWORD": "unused"})
    assert credentials == NO_CREDENTIALS
    assert credentials.invoke_headers() == {}
    assert credentials.system_headers() == {}


def test_a_token_goes_on_invoke_requests_only() -> None:
    credentials = load_credentials("s3cret", None, None, environ={})
    assert credentials.invoke_headers() == {"Authorization": "Bearer s3cret"}
    assert credentials.system_headers() == {}


def test_basic_auth_goes_everywhere_and_the_token_wins_on_invoke(tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("pa ss\n")
    basic = load_credentials(None, "admin", password_file, environ={})
    assert basic.system_headers() == {"Authorization": _basic("admin", "pa ss")}
    assert basic.invoke_headers() == {"Authorization": _basic("admin", "pa ss")}
    both = load_credentials("tok", "admin", password_file, environ={})
    assert both.invoke_headers() == {"Authorization": "Bearer tok"}
    assert both.system_headers() == {"Authorization": _basic("admin", "pa ss")}


def test_the_password_may_come_from_the_environment() -> None:
    credentials = load_credentials(None, "admin", None, environ={"OPENFAAS_PASSWORD": "envpw"})
    assert credentials.system_headers() == {"Authorization": _basic("admin", "envpw")}


def test_secrets_stay_out_of_repr(tmp_path: Path) -> None:
    shown = repr(Credentials(token="tok-123", user="admin", password="pw-456"))
    assert "admin" in shown
    assert "tok-123" not in shown
    assert "pw-456" not in shown


def test_missing_halves_and_bad_values_name_the_flag(tmp_path: Path) -> None:
    with pytest.raises(CredentialsError, match=r"--user 'admin' needs a password: pass --pass"):
        load_credentials(None, "admin", None, environ={})
    with pytest.raises(CredentialsError, match=r"--password-file .* needs --user NAME"):
        load_credentials(None, None, tmp_path / "pw", environ={})
    with pytest.raises(CredentialsError, match=r"--password-file '.*missing': cannot read it"):
        load_credentials(None, "admin", tmp_path / "missing", environ={})
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(CredentialsError, match=r"--password-file .* the password is empty"):
        load_credentials(None, "admin", empty, environ={})
    with pytest.raises(CredentialsError, match="--user 'a:b'"):
        load_credentials(None, "a:b", None, environ={"OPENFAAS_PASSWORD": "x"})
    with pytest.raises(CredentialsError, match="--token"):
        load_credentials("bad\r\ntoken", None, None, environ={})


def test_hints_name_the_flags_for_the_route() -> None:
    assert "--token TOKEN" in NO_CREDENTIALS.hint("/function/f")
    assert "--token" not in NO_CREDENTIALS.hint("/system/functions")
    assert "--user NAME --password-file FILE" in NO_CREDENTIALS.hint("/system/functions")
    assert "needs credentials" in NO_CREDENTIALS.hint("/v2/models/f/infer")
    given = Credentials(token="t")
    assert "refused the credentials given" in given.hint("/function/f")
    assert "needs credentials" in given.hint("/system/instances")  # a token is not basic auth
