"""A package's `requirements` against the distributions installed in this Python.

Workers run the gateway's own interpreter, so a distribution the package's source imports
must be installed here. `check_requirements` says which are missing: the deploy is refused.
It also says which are installed at a version outside the requirement's specifier: only a
warning, since the package may well work. Requirement strings are read with
`packaging.requirements`. Torch-free; reads only installed distributions' metadata.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement

VersionOf = Callable[[str], "str | None"]


@dataclass(frozen=True, slots=True)
class ParsedRequirement:
    name: str
    applies: bool = True  # False: its environment marker excludes this Python or platform
    allows: Callable[[str], bool] | None = None  # does a version satisfy it? None: any


def installed_version(name: str) -> str | None:
    """The installed version of distribution `name`, None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class RequirementCheck:
    missing: tuple[str, ...] = ()  # distributions not installed
    mismatched: tuple[str, ...] = ()  # "name>=2 (installed 1.0)": installed, other version
    invalid: tuple[str, ...] = ()  # requirement strings that do not parse

    @property
    def ok(self) -> bool:
        return not (self.missing or self.invalid)

    def problem(self) -> str:
        """One sentence naming every missing distribution and unreadable requirement."""
        parts = []
        if self.missing:
            parts.append(f"not installed: {', '.join(self.missing)}")
        if self.invalid:
            parts.append(f"not valid requirements: {', '.join(map(repr, self.invalid))}")
        return "; ".join(parts)


def parse_requirement(text: str) -> ParsedRequirement | None:
    """A requirement string's name, marker and specifier; None when it does not parse."""
    try:
        requirement = Requirement(text)
    except InvalidRequirement:
        return None
    marker = requirement.marker
    specifier = requirement.specifier
    return ParsedRequirement(
        requirement.name,
        applies=marker is None or marker.evaluate(),
        allows=(lambda v: specifier.contains(v, prereleases=True)) if specifier else None,
    )


def check_requirements(
    requirements: Iterable[str], version_of: VersionOf = installed_version
) -> RequirementCheck:
    """Which requirements are missing, installed at another version, or unreadable."""
    missing: list[str] = []
    mismatched: list[str] = []
    invalid: list[str] = []
    for text in requirements:
        parsed = parse_requirement(text)
        if parsed is None:
            invalid.append(text)
            continue
        if not parsed.applies:
            continue
        version = version_of(parsed.name)
        if version is None:
            missing.append(parsed.name)
        elif parsed.allows is not None and not parsed.allows(version):
            mismatched.append(f"{text} (installed {version})")
    return RequirementCheck(tuple(missing), tuple(mismatched), tuple(invalid))
