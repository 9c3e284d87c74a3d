"""Under CI=true a skipped test fails (conftest.py's hook): a test that
skips in its body or in a fixture fails there, naming its reason, and
passes as a skip without CI=true. Run in a child pytest on a copy of the
hook, so that this suite's own result is not the subject."""

import os
import shutil
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))

SAMPLE = '''import pytest


@pytest.fixture
def needs():
    pytest.skip("fixture reason")


def test_body():
    pytest.skip("body reason")


def test_fixture(needs):
    pass


@pytest.mark.xfail(reason="expected")
def test_xfail():
    assert False
'''


def _run(tmp_path, ci):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)


def test_skips_fail_under_ci(tmp_path):
    shutil.copy(os.path.join(TESTS, "conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    r = _run(tmp_path, "true")
    assert r.returncode == 1, r.stdout
    assert "1 failed" in r.stdout and "1 error" in r.stdout and "1 xfailed" in r.stdout, r.stdout
    assert "skipped under CI=true (install what it needs): Skipped: body reason" in r.stdout, r.stdout
    assert "fixture reason" in r.stdout, r.stdout
    r = _run(tmp_path, None)
    assert r.returncode == 0, r.stdout
    assert "2 skipped" in r.stdout and "1 xfailed" in r.stdout, r.stdout
