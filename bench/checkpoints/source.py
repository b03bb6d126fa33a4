"""Where a checkpoint comes from: a local file or ``hf://<owner>/<repo>/<path>[@revision]``.

A Hugging Face source is fetched through ``huggingface_hub`` into its usual cache (so a file
fetched once, or by hand with ``hf download``, is found again offline). Its identity is the
file's sha256: computed once per (path, size, mtime) and remembered in the data cache, or, for a
hub file not fetched yet, read from the hub's metadata (the LFS object id is the sha256) without
downloading it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from bench import atomic
from bench.config import ConfigError
from bench.text.locate import hub_offline

HF_PREFIX = "hf://"
#: the S-FLM paper's released checkpoints (Hugging Face)
RELEASE_REPO = "jdeschena/s-flm"


class CheckpointError(ConfigError):
    """A checkpoint that cannot be used as asked: one line naming the file and the problem."""


@dataclass
class Source:
    """A resolved checkpoint source. ``path`` is None for a hub file not fetched (offline
    planning); ``sha256`` is None only when neither the file nor the hub could be read."""

    name: str
    path: Path | None
    sha256: str | None
    repo: str | None = None
    filename: str | None = None
    revision: str | None = None

    @property
    def is_hub(self) -> bool:
        return self.repo is not None

    def fetch_hint(self) -> str:
        rev = f" --revision {self.revision}" if self.revision else ""
        return f"hf download {self.repo} {self.filename}{rev}"


def parse_hub(src: str) -> tuple[str, str, str | None]:
    """``hf://owner/repo/path/in/repo[@revision]`` -> (repo id, path, revision)."""
    rest = src[len(HF_PREFIX) :]
    rev = None
    if "@" in rest:
        rest, rev = rest.rsplit("@", 1)
    parts = rest.split("/")
    if len(parts) < 3 or not all(parts):
        raise CheckpointError(f"{src}: expected hf://<owner>/<repo>/<path in the repo>[@revision]")
    return "/".join(parts[:2]), "/".join(parts[2:]), rev or None


def _sha_cache() -> Path:
    from bench.text.locate import data_cache_root

    return data_cache_root() / "checkpoints" / "sha256.json"


def file_sha256(path: Path) -> str:
    """sha256 of ``path``, remembered per (absolute path, size, mtime) so a 2.5 GB file is hashed
    once."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    cache = _sha_cache()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        known[key] = digest
        atomic.write_text(cache, json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only cache only costs a re-hash next time
    return digest


def _hub_cached(repo: str, filename: str, revision: str | None) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, filename, revision=revision)
    return Path(found) if isinstance(found, str) else None


def _hub_reachable(timeout: float = 5.0) -> bool:
    """A quick TCP check of the hub endpoint (huggingface_hub itself retries for ~30 s)."""
    import socket
    from urllib.parse import urlparse

    try:
        from huggingface_hub import constants

        url = urlparse(constants.ENDPOINT)
    except Exception:
        return False
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _hub_sha256(repo: str, filename: str, revision: str | None) -> str | None:
    """The LFS sha256 of a hub file from its metadata (no download); None offline."""
    if hub_offline() or not _hub_reachable():
        return None
    try:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        meta = get_hf_file_metadata(hf_hub_url(repo, filename, revision=revision), timeout=10)
    except Exception:  # unreachable hub, missing file: the caller decides what that means
        return None
    etag = (meta.etag or "").strip('"')
    return etag if len(etag) == 64 else None


def resolve(src: str, *, fetch: bool = True, hash_file: bool = True) -> Source:
    """Resolve ``src``. ``fetch``: download a hub file not in the cache (else its path stays
    None). Raises :class:`CheckpointError` for a missing local file, and for a hub file that is
    needed (``fetch``) but neither cached nor reachable (naming the command that fetches it)."""
    if not src.startswith(HF_PREFIX):
        path = Path(src).expanduser()
        if not path.is_file():
            raise CheckpointError(f"{src}: no such file")
        return Source(src, path, file_sha256(path) if hash_file else None)
    repo, filename, rev = parse_hub(src)
    hub = Source(src, None, None, repo, filename, rev)
    cached = _hub_cached(repo, filename, rev)
    if cached is None and fetch:
        why = (
            "HF_HUB_OFFLINE is set"
            if hub_offline()
            else (None if _hub_reachable() else "the hub is unreachable")
        )
        if why:
            raise CheckpointError(
                f"{src}: not in the Hugging Face cache and {why}; fetch it by hand with: "
                f"{hub.fetch_hint()}"
            )
        try:
            from huggingface_hub import hf_hub_download

            cached = Path(hf_hub_download(repo, filename, revision=rev))
        except ImportError:
            raise CheckpointError(f"{src}: needs the huggingface_hub package") from None
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CheckpointError(
                f"{src}: download failed ({first}); fetch it by hand with: {hub.fetch_hint()}"
            ) from None
    if cached is not None:
        hub.path = cached
        hub.sha256 = file_sha256(cached) if hash_file else None
    else:
        hub.sha256 = _hub_sha256(repo, filename, rev)
    return hub
