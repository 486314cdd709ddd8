"""What a non-editable install needs: every data file of the package is in the wheel's package-data."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_data_file_is_shipped():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for package, patterns in data.items():
        base = ROOT / package
        files = [p.relative_to(base).as_posix() for p in base.rglob("*")
                 if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts]
        missing = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
        assert not missing, f"{package} files a wheel would leave out: {missing}"
