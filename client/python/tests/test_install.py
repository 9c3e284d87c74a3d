"""The documented install works on Debian 12 (PEP 668: no pip into the
system Python): a venv, then pip install of client/python, from a copy in
a temporary directory. Offline, as on this project's CI: the venv sees
Debian's python3-redis (--system-site-packages) and pip uses no index."""

import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_venv_install(tmp_path):
    try:
        import venv  # noqa: F401
    except ImportError:
        pytest.skip("python3-venv not installed")
    src = tmp_path / "python"
    shutil.copytree(HERE, src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache"))
    # The venv must find the installed copy, not the source tree (the Go
    # suite runs these tests with PYTHONPATH set to it).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(env_dir)], check=True,
                   capture_output=True, timeout=120, env=env)
    py = env_dir / "bin" / "python"
    # Dependencies are resolved (redis>=4.3 from the system site packages),
    # nothing is downloaded.
    out = subprocess.run([str(py), "-m", "pip", "install", "--no-index", "--no-build-isolation",
                          "--disable-pip-version-check", str(src)],
                         capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    probe = ("import hotsniff_shim, os, redis, importlib.util as u; "
             "print(os.path.dirname(hotsniff_shim.__file__)); "
             "print(callable(hotsniff_shim.install)); "
             "print(u.find_spec('tests') is None, u.find_spec('bench') is None)")
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, timeout=60, cwd="/", env=env)
    assert out.returncode == 0, out.stderr
    where, callable_, no_extras = out.stdout.splitlines()
    assert where.startswith(str(env_dir)), where
    assert callable_ == "True"
    assert no_extras == "True True", "tests and bench are not installed"
    files = subprocess.run([str(py), "-m", "pip", "show", "-f", "hotsniff-shim"], capture_output=True,
                           text=True, timeout=60, env=env).stdout
    assert "tests/" not in files and "bench.py" not in files
