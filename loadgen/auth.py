"""Credentials for a gateway with authentication on: which `Authorization` header goes where.

Pure except for reading the password file it is given. OpenFaaS style, as infless's gateway
checks them: `--token` is a bearer token for the invoke routes (`/function/*`,
`/v2/models/*`: the gateway's `auth.invoke_token`); `--user` with `--password-file` (or
`$OPENFAAS_PASSWORD`) is basic auth, sent on every request, the `/system/...` calls included.
With both, invoke requests carry the token and the others basic auth. Without either, no
`Authorization` header is sent. Never prints a secret: `repr` hides it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PASSWORD_ENV = "OPENFAAS_PASSWORD"  # noqa: S105 (a variable name, not a secret)
AUTH_FLAGS = "--user NAME --password-file FILE (or $OPENFAAS_PASSWORD)"
TOKEN_FLAG = "--token TOKEN (the gateway's auth.invoke_token)"  # noqa: S105 (a flag)


class CredentialsError(ValueError):
    """Credentials flags that cannot make a header (missing half, unreadable file)."""


def _printable(value: str) -> bool:
    return all(" " <= c <= "~" for c in value)


@dataclass(frozen=True, slots=True)
class Credentials:
    token: str | None = field(default=None, repr=False)
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    @property
    def basic(self) -> str | None:
        if self.user is None or self.password is None:
            return None
        pair = f"{self.user}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")

    def invoke_headers(self) -> dict[str, str]:
        """For `/function/*` and `/v2/models/*`: the bearer token, else basic auth."""
        if self.token is not None:
            return {"Authorization": f"Bearer {self.token}"}
        return self.system_headers()

    def system_headers(self) -> dict[str, str]:
        """For `/system/*` and every other call: basic auth when a user is given."""
        basic = self.basic
        return {"Authorization": basic} if basic is not None else {}

    def hint(self, path: str) -> str:
        """What to pass when `path` answered 401 (the flags, and whether they were given)."""
        invoke = path.startswith(("/function/", "/v2/models/"))
        wanted = f"{TOKEN_FLAG} or {AUTH_FLAGS}" if invoke else AUTH_FLAGS
        given = (invoke and self.token is not None) or self.basic is not None
        if given:
            return f"the gateway refused the credentials given: check {wanted}"
        return f"the gateway needs credentials: pass {wanted}"


NO_CREDENTIALS = Credentials()


def load_credentials(
    token: str | None,
    user: str | None,
    password_file: Path | None,
    environ: Mapping[str, str] | None = None,
) -> Credentials:
    """Credentials from the command line's flags; errors name the flag and the value."""
    env = os.environ if environ is None else environ
    if token is not None and (not token.strip() or not _printable(token)):
        raise CredentialsError("--token: the token is empty or holds spaces or control characters")
    if user is None:
        if password_file is not None:
            raise CredentialsError(f"--password-file {str(password_file)!r} needs --user NAME")
        return Credentials(token=token)
    if not user or ":" in user or not _printable(user) or " " in user:
        raise CredentialsError(f"--user {user!r}: a non-empty name without ':' or spaces")
    if password_file is not None:
        try:
            password = password_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialsError(
                f"--password-file {str(password_file)!r}: cannot read it: {exc}"
            ) from None
        source = f"--password-file {str(password_file)!r}"
    else:
        password = env.get(PASSWORD_ENV, "").strip()
        source = f"${PASSWORD_ENV}"
        if not password:
            raise CredentialsError(
                f"--user {user!r} needs a password: pass --password-file FILE or set "
                f"${PASSWORD_ENV}"
            )
    if not password or not _printable(password):
        raise CredentialsError(f"{source}: the password is empty or holds control characters")
    return Credentials(token=token, user=user, password=password)
