"""The deployment fields that shape a function's workers: `envVars`, `secrets`, `limits.memory`.

`check_env_vars` refuses names a worker depends on (the interpreter's and the loader's
search paths, the thread pools' settings, infless's own `INFLESS_*`); `parse_secret_names`
checks a `secrets` list (Kubernetes secret names, as OpenFaaS uses them);
`parse_memory_quantity` reads a Kubernetes quantity ("128Mi", "1G", "5e8") in bytes.
Pure: no I/O. Errors name the field, the value and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation

from infless.errors import InvalidDeployment

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Names a worker needs as the platform set them: set later (os.environ, after the fork),
# they would break the interpreter, the dynamic loader or the already-started thread pools.
RESERVED_ENV_NAMES = frozenset(
    {"PATH", "GLIBC_TUNABLES", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}
)
RESERVED_ENV_PREFIXES = (
    "INFLESS_",
    "PYTHON",
    "LD_",
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "MALLOC_",
    "CUDA_MPS_",
)
MAX_ENV_BYTES = 128 * 1024  # names and values together

# A Kubernetes secret name (a DNS subdomain): also its file name under /var/openfaas/secrets.
SECRET_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
MAX_SECRET_NAME = 253
MAX_SECRETS_PER_FUNCTION = 64

MIN_MEMORY_BYTES = 16 * 1024 * 1024  # a worker cannot even load a model in less
_QUANTITY = re.compile(
    r"^(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?[0-9]+))?$"
)
_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


def reserved_env_reason(name: str) -> str | None:
    """Why `name` may not be set for a function, or None when it may."""
    if not ENV_NAME.match(name):
        return "an environment variable name is letters, digits and '_', not starting with a digit"
    upper = name.upper()
    if upper in RESERVED_ENV_NAMES:
        return f"{name} is set by the platform for every worker"
    prefix = next((p for p in RESERVED_ENV_PREFIXES if upper.startswith(p)), None)
    if prefix is not None:
        return f"names starting with {prefix} are reserved: the worker's runtime reads them"
    return None


def check_env_vars(env: Mapping[str, str]) -> dict[str, str]:
    """`envVars`, checked: every name settable, no NUL byte, bounded in size."""
    size = 0
    for name, value in env.items():
        reason = reserved_env_reason(name)
        if reason is not None:
            raise InvalidDeployment(f"envVars.{name}: may not be set: {reason}")
        if "\0" in value:
            raise InvalidDeployment(f"envVars.{name}: the value contains a NUL byte")
        size += len(name.encode()) + len(value.encode())
    if size > MAX_ENV_BYTES:
        raise InvalidDeployment(
            f"envVars: {size} bytes of names and values; at most {MAX_ENV_BYTES} (use a secret "
            "or a file in the function package for larger data)"
        )
    return dict(env)


def secret_name_problem(name: object) -> str | None:
    """Why `name` is not a valid secret name, or None."""
    if not isinstance(name, str) or not name:
        return "a secret name is a non-empty string"
    if len(name) > MAX_SECRET_NAME or not SECRET_NAME.match(name):
        return (
            "a secret name is lowercase letters, digits, '-' and '.', starting and ending with "
            f"a letter or digit, at most {MAX_SECRET_NAME} characters"
        )
    return None


def parse_secret_names(value: object) -> tuple[str, ...]:
    """A deployment's `secrets`: a list of secret names (duplicates collapse)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidDeployment(
            f'secrets: expected a list of secret names, e.g. ["db-password"], '
            f"got {type(value).__name__}"
        )
    names: list[str] = []
    for index, name in enumerate(value):
        problem = secret_name_problem(name)
        if problem is not None:
            raise InvalidDeployment(f"secrets[{index}] = {name!r}: {problem}")
        assert isinstance(name, str)
        if name not in names:
            names.append(name)
    if len(names) > MAX_SECRETS_PER_FUNCTION:
        raise InvalidDeployment(
            f"secrets: {len(names)} secrets; a function may use at most {MAX_SECRETS_PER_FUNCTION}"
        )
    return tuple(names)


def parse_memory_quantity(text: str, field: str) -> int:
    """A Kubernetes memory quantity ('128Mi', '1G', '500M', '5e8', '1073741824') in bytes."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise InvalidDeployment(
            f"{field} = {text!r}: expected a Kubernetes quantity like '128Mi', '1Gi' or '500M' "
            "(suffixes Ki Mi Gi Ti Pi Ei, or k M G T P E)"
        )
    try:
        number = Decimal(match["number"])
        if match["exponent"] is not None:
            number = number.scaleb(int(match["exponent"]))
        else:
            number *= _SUFFIXES[match["suffix"] or ""]
    except InvalidOperation:
        raise InvalidDeployment(f"{field} = {text!r}: not a number of bytes") from None
    if number > 2**62:
        raise InvalidDeployment(f"{field} = {text!r}: larger than any machine's memory")
    quantity = math.ceil(number)
    if quantity < MIN_MEMORY_BYTES:
        raise InvalidDeployment(
            f"{field} = {text!r}: must be at least {MIN_MEMORY_BYTES // 2**20}Mi "
            "(a worker cannot load a model in less)"
        )
    return quantity
