"""The package list, found automatically; everything else is in pyproject.toml.

The repository root is the ``pictrieve`` package (``package-dir = {"pictrieve" = "."}``), so setuptools'
own discovery (``[tool.setuptools.packages.find]``) would install ``agents``, ``tools``, ... as top-level
packages and cannot add a prefix. This script lists every folder of the root that holds an
``__init__.py`` as ``pictrieve.<folder>``: a new ``agents/<method>/`` is installed with no edit here.
tests/, benchmarks/, examples/, docs/ and build output are left out, and so is this file.
"""

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

NOT_INSTALLED = ("tests", "benchmarks", "examples", "docs", "build", "dist")


class BuildPy(build_py):
    """``build_py`` without this script: the root's ``.py`` files are ``pictrieve``'s modules, but not it."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if not (package == "pictrieve" and m[1] == "setup")]


def pictrieve_packages() -> list[str]:
    found = find_packages(".", exclude=[pattern for name in NOT_INSTALLED for pattern in (name, f"{name}.*")])
    return ["pictrieve", *(f"pictrieve.{name}" for name in sorted(found))]


if __name__ == "__main__":  # how setuptools runs it; importing it (an editable install maps the root) does nothing
    setup(packages=pictrieve_packages(), cmdclass={"build_py": BuildPy})
