"""requirements.lock pins every dependency pyproject.toml names (the app's and the tests'), at a
version pyproject.toml allows: a lock left behind by a change of pyproject.toml fails here, naming
the package, instead of CI installing and auditing something else."""

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, f"requirements.lock: {line!r} is not name==version"
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_the_lock_pins_every_dependency_at_a_version_pyproject_allows():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins, wrong = locked(), []
    for text in [*project["dependencies"], *project["optional-dependencies"]["dev"]]:
        requirement = Requirement(text)
        version = pins.get(canonicalize_name(requirement.name))
        if version is None:
            wrong.append(f"{requirement.name} is not in requirements.lock")
        elif not requirement.specifier.contains(version, prereleases=True):
            wrong.append(f"{requirement.name}=={version} is outside {requirement.specifier}")
    assert wrong == [], "run .ci/lock to regenerate requirements.lock: " + "; ".join(wrong)
