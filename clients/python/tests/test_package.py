"""The package as a user installs it: `pip install` of the path into a fresh
virtual environment, offline (its in-tree build backend needs only the
standard library), also in a plain venv without wheel; then py.typed makes
mypy check a program that sends with the generated notifier types."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.env import TYPES_DIR

ROOT = pathlib.Path(__file__).resolve().parent.parent

USE = '''
from typing import Any
import psycopg
import notifyd
from notifiers import NotifierName, params

def f(conn: "psycopg.Connection[Any]") -> str:
    res = notifyd.send(conn, notifyd.Notification[NotifierName](
        notifier="comment.created", key="k", recipients=["u1", notifyd.Recipient("u2", reason="author")],
        params=params("comment.created", {"post_title": "Hi", "author_name": "Ada"})))
    token: str = notifyd.recipient_token("secret", "u1", 600)
    try:
        notifyd.put_recipient(conn, "u1", {"email": "ada@example.com"})
    except notifyd.InputError as e:
        field: str = e.field
        return field
    return res.id + token
'''

WRONG = '''
import notifyd
from notifiers import NotifierName, params

notifyd.send(None, notifyd.Notification(notifier="comment.created", key="k",
             params=params("comment.created", {"post_titel": "Hi", "author_name": "Ada"})))
r: int = notifyd.send(None, notifyd.Notification(notifier="a", key="k")).id
notifyd.send(None, notifyd.Notification[NotifierName](notifier="comment.craeted", key="k"))
'''


class PackageTest(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="notifyd-py-"))

    def tearDown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_in(self, *args: str, cwd: pathlib.Path) -> "subprocess.CompletedProcess[str]":
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
        return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)

    def test_installs_offline_and_type_checks(self) -> None:
        # A copy: the build writes build/ and *.egg-info next to the sources.
        src = self.dir / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
        venv = self.dir / "venv"
        r = self.run_in(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv), cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        py = str(venv / "bin" / "python")
        r = self.run_in(py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--disable-pip-version-check", str(src), cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.run_in(py, "-c", "import notifyd, notifyd.aio, notifyd.django, notifyd.sqlalchemy, importlib.metadata as m, "
                        "pathlib; print(pathlib.Path(notifyd.__file__).parent.joinpath('py.typed').exists(), "
                        "m.version('notifyd'), m.metadata('notifyd')['Project-URL'] is not None, notifyd.__file__)",
                        cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        typed, version, urls, where = r.stdout.split()
        self.assertEqual((typed, version, urls), ("True", "0.1.0", "True"))
        self.assertTrue(where.startswith(str(venv)), where)
        r = self.run_in(py, "-c", "import importlib.metadata as m; print(*m.requires('notifyd'), sep='\\n')", cwd=self.dir)
        # psycopg is an extra, not a dependency.
        self.assertEqual(sorted(r.stdout.replace("'", '"').splitlines()),
                         ['psycopg2>=2.8; extra == "psycopg2"', 'psycopg>=3.1; extra == "psycopg"'])

        # mypy --strict, with the installed package found through py.typed.
        shutil.copy(pathlib.Path(TYPES_DIR) / "notifiers.py", self.dir / "notifiers.py")
        (self.dir / "use.py").write_text(USE)
        (self.dir / "wrong.py").write_text(WRONG)
        mypy = [py, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(self.dir / ".mypy_cache")]
        r = self.run_in(*mypy, "notifiers.py", "use.py", cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.run_in(*mypy, "notifiers.py", "wrong.py", cwd=self.dir)
        self.assertNotEqual(r.returncode, 0, "mypy accepted wrong.py")
        self.assertIn("wrong.py:6: error: No overload variant of \"params\"", r.stdout)  # the misspelt param
        self.assertIn("wrong.py:7", r.stdout)  # str is not int: the package's types are used
        # A misspelt notifier in a Notification[NotifierName].
        self.assertIn('wrong.py:8: error: Argument "notifier" to "Notification" has incompatible type', r.stdout)


class CleanInstallTest(unittest.TestCase):
    """The README's offline install in a plain virtual environment: no
    system packages, no wheel, no index; pip's build isolation on."""

    def test_installs_without_wheel_or_network(self) -> None:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="notifyd-py-clean-"))
        self.addCleanup(shutil.rmtree, tmp, True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_"))}

        def run(*args: str) -> "subprocess.CompletedProcess[str]":
            return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=240)

        src = tmp / "src"
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("tests", "__pycache__", "*.egg-info"))
        r = run(sys.executable, "-m", "venv", str(tmp / "venv"))
        if r.returncode != 0 and "ensurepip" in r.stdout + r.stderr and os.environ.get("CI") != "true":
            self.skipTest("python3 -m venv cannot make a venv with pip here (install Debian's python3-venv)")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        py = str(tmp / "venv" / "bin" / "python")
        self.assertNotEqual(run(py, "-c", "import wheel").returncode, 0, "the clean venv has wheel")
        r = run(py, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", str(src))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = run(py, "-c", "import notifyd, notifyd.aio, pathlib; "
                "print(pathlib.Path(notifyd.__file__).parent.joinpath('py.typed').exists(), notifyd.__file__)")
        self.assertEqual(r.returncode, 0, r.stderr)
        typed, where = r.stdout.split()
        self.assertEqual(typed, "True")
        self.assertTrue(where.startswith(str(tmp / "venv")), where)


class ReadmeTest(unittest.TestCase):
    def test_readme_stands_alone(self) -> None:
        import re
        readme = (ROOT / "README.md").read_text()
        relative = re.findall(r"\]\((?!https://|#)([^)]*)\)", readme)
        self.assertEqual(relative, [], "relative links break on the package index's page")


if __name__ == "__main__":
    unittest.main()
