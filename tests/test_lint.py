"""ruff runs with the tests (its configuration, line length included, is in pyproject.toml)."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    return subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_check_clean():
    """Lint rules (E501 line length among them) hold over the whole tree."""
    proc = _ruff("check", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_clean():
    """One formatting style: `ruff format` would change no file."""
    proc = _ruff("format", "--check", ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
