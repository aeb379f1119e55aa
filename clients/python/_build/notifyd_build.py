"""The package's PEP 517 build backend: it builds the wheel, the sdist and
an editable install with the standard library alone, so that
``pip install ./clients/python`` works offline, in a plain virtual
environment without setuptools or wheel. The metadata is pyproject.toml's
[project] table (read with tomllib, Python 3.11; older Pythons need tomli,
which pyproject.toml's build requirements name for them).

The package is pure Python: one wheel, py3-none-any, holding the notifyd
directory.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import tarfile
import time
import zipfile
from typing import Any, Dict, List, Optional, Tuple

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = "notifyd"

__all__ = [
    "build_wheel",
    "build_sdist",
    "build_editable",
    "get_requires_for_build_wheel",
    "get_requires_for_build_sdist",
    "get_requires_for_build_editable",
]


def _project() -> Dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        project: Dict[str, Any] = tomllib.load(f)["project"]
    return project


def _metadata() -> str:
    """The core metadata (METADATA, PKG-INFO) of pyproject's [project]."""
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    for a in p.get("authors", []):
        if a.get("name"):
            lines.append("Author: " + a["name"])
    lic = p.get("license", {})
    if lic.get("text"):
        lines.append("License: " + lic["text"])
    if p.get("keywords"):
        lines.append("Keywords: " + ",".join(p["keywords"]))
    for c in p.get("classifiers", []):
        lines.append("Classifier: " + c)
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    for label, url in p.get("urls", {}).items():
        lines.append("Project-URL: %s, %s" % (label, url))
    for dep in p.get("dependencies", []):
        lines.append("Requires-Dist: " + dep)
    for extra, deps in p.get("optional-dependencies", {}).items():
        lines.append("Provides-Extra: " + extra)
        for dep in deps:
            lines.append('Requires-Dist: %s; extra == "%s"' % (dep, extra))
    readme = p.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _files() -> List[Tuple[str, bytes]]:
    """The package's files: notifyd/*.py and py.typed, in a stable order."""
    out = []
    for path in sorted((ROOT / PACKAGE).iterdir()):
        if path.is_file() and (path.suffix == ".py" or path.name == "py.typed"):
            out.append((PACKAGE + "/" + path.name, path.read_bytes()))
    return out


def _dist_info() -> str:
    p = _project()
    return "%s-%s.dist-info" % (p["name"].replace("-", "_"), p["version"])


def _wheel_name() -> str:
    p = _project()
    return "%s-%s-py3-none-any.whl" % (p["name"].replace("-", "_"), p["version"])


def _write_wheel(directory: str, files: List[Tuple[str, bytes]]) -> str:
    dist_info = _dist_info()
    files = files + [
        (dist_info + "/METADATA", _metadata().encode("utf-8")),
        (dist_info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: notifyd_build\nRoot-Is-Purelib: true\n"
                               b"Tag: py3-none-any\n"),
        (dist_info + "/top_level.txt", (PACKAGE + "\n").encode()),
    ]
    record = []
    for name, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(dist_info + "/RECORD,,")
    files.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode()))
    name = _wheel_name()
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """Builds the wheel of the notifyd package in wheel_directory."""
    return _write_wheel(wheel_directory, _files())


def build_editable(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """Builds an editable wheel (PEP 660): a .pth file naming the source
    directory, so the installed package is the checkout's."""
    return _write_wheel(wheel_directory, [(PACKAGE + ".pth", (str(ROOT) + "\n").encode())])


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """Builds the sdist: the package, the backend, pyproject.toml, the README
    and PKG-INFO."""
    p = _project()
    base = "%s-%s" % (p["name"].replace("-", "_"), p["version"])
    members = [("pyproject.toml", (ROOT / "pyproject.toml").read_bytes()),
               ("README.md", (ROOT / "README.md").read_bytes()),
               ("_build/notifyd_build.py", pathlib.Path(__file__).read_bytes()),
               ("PKG-INFO", _metadata().encode("utf-8"))] + _files()
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, data in members:
            info = tarfile.TarInfo(base + "/" + path)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return name
