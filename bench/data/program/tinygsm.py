"""TinyGSM training data (`dataloader.py::get_tiny_gsm_dataset` of the reference harness,
FrankCCCCC/s-flm @ 18d586f, after JaeyeonKim01/PUMA `data/tiny_gsm.py`).

- Source: HF ``TinyGSM/TinyGSM`` (about 11.8 M rows, columns ``question`` and ``code``, the code
  a ``simple_math_problem()`` function), or local files in the same schema (json / jsonl /
  parquet / csv, loaded with ``datasets.load_dataset(<builder>, data_files=...)``).
- Example: ``[BOS] tok(question.strip()) tok(separator) tok(code.strip()) [EOS]``, each piece
  tokenised on its own with no special tokens; padded with PAD to ``max_len`` (512); examples
  longer than ``max_len`` are dropped (``filter_too_long``; otherwise cut to ``max_len - 1`` +
  EOS).
- Separator: the reference configs (``configs/data/tiny-gsm.yaml``, ``gsm8k-test.yaml``) write
  ``separator: '\\n'``; YAML (PyYAML and OmegaConf alike) reads single-quoted ``'\\n'`` as the
  two characters backslash and ``n``, not a newline. The default, :data:`REFERENCE_SEPARATOR`,
  is those two characters (two SmolLM tokens, ``\\`` 76 and ``n`` 94), so the ids, the <= 512
  filter and the seeded 1 % split are the paper's; :data:`NEWLINE_SEPARATOR` (one token, 198)
  is the documented alternative (``task.options.separator: "\\n"`` in double quotes).
- Masks: ``clean_mask`` = the prompt (BOS + question + separator): never noised, so models
  sample conditionally; ``loss_mask`` = program + EOS, and the padding when ``train_on_pad``
  (the paper: "we pad the input sequences to length 512 and compute the loss on padding tokens").
- Split: ``train_test_split(test_size=0.01, seed=42)``.
- Tokenised once and cached under ``<data_dir>/tinygsm/<key>/`` as ``.npy`` files that are
  memory-mapped on load (11.8 M x 512 int32 ids is about 24 GB: never held in RAM); the key
  hashes the source, the tokenizer's ids and every option; ``meta.json`` marks a finished
  cache. One preparation per sweep: the folder is built by :func:`bench.atomic.build_once`
  (an exclusive ``flock`` on ``<data_dir>/tinygsm/.<key>.lock``, a temp folder renamed into
  place), so the train jobs of a sweep and their DDP ranks (each calls :func:`prepare` before
  the process group starts) wait for the first one and then load its cache. The data dir must
  be on a filesystem that every node sees and that supports ``flock`` (NFS does; Lustre needs
  the ``flock`` mount option): where locking fails, each process prepares on its own (still
  correct: the cache is renamed into place atomically) with a warning.
- Statistics for the token-length figure: :func:`token_lengths` / ``python -m bench.data
  tinygsm --stats``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from bench.atomic import build_once
from bench.data.base import TaskData
from bench.text.fingerprint import cache_fingerprint
from bench.text.locate import data_cache_root

TINYGSM_HF = "TinyGSM/TinyGSM"
FORMAT_VERSION = 1
IN_MEMORY_ELEMENTS = 1 << 26  # 64 M ids = 512 MB as int64
_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}
# the reference's separator: YAML '\n' in single quotes = backslash + n (configs/data/tiny-gsm.yaml)
REFERENCE_SEPARATOR = "\\n"
NEWLINE_SEPARATOR = "\n"


@dataclass
class TinyGSMOptions:
    """How TinyGSM is turned into fixed-length examples (defaults: the paper / reference)."""

    source: str = TINYGSM_HF
    data_files: list[str] | None = None
    max_len: int = 512
    train_on_pad: bool = True
    filter_too_long: bool = True
    valid_frac: float = 0.01
    split_seed: int = 42
    num_proc: int = 1
    separator: str = REFERENCE_SEPARATOR

    def __post_init__(self):
        if not isinstance(self.separator, str):
            raise ValueError(f"tinygsm: separator must be a string, got {self.separator!r}")
        if self.max_len < 8:
            raise ValueError(f"tinygsm: max_len must be >= 8, got {self.max_len}")
        if not 0.0 < self.valid_frac < 1.0:
            raise ValueError(f"tinygsm: valid_frac must be in (0, 1), got {self.valid_frac}")
        if isinstance(self.data_files, str):
            self.data_files = [self.data_files]


def encode_pair(
    tok, questions: list[str], codes: list[str], separator: str = REFERENCE_SEPARATOR
) -> tuple[list[list[int]], list[int]]:
    """Token ids ``[BOS] q sep code [EOS]`` and the prompt length (BOS + q + sep), each piece
    tokenised on its own (reference ``dataloader.py::get_tiny_gsm_dataset``, ``tokenize_qa``)."""
    q_ids = tok([q.strip() for q in questions], add_special_tokens=False)["input_ids"]
    c_ids = tok([c.strip() for c in codes], add_special_tokens=False)["input_ids"]
    sep = tok(separator, add_special_tokens=False)["input_ids"]
    ids, prompt_lens = [], []
    for q, c in zip(q_ids, c_ids):
        prompt = [tok.bos_token_id, *q, *sep]
        ids.append(prompt + list(c) + [tok.eos_token_id])
        prompt_lens.append(len(prompt))
    return ids, prompt_lens


def pack(
    ids: list[list[int]],
    prompt_lens: list[int],
    *,
    max_len: int,
    pad_id: int,
    eos_id: int,
    train_on_pad: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, max_len) ids, clean_mask, loss_mask; sequences longer than ``max_len`` are cut to
    ``max_len - 1`` + EOS (the caller filters them first when ``filter_too_long``)."""
    n = len(ids)
    x = np.full((n, max_len), pad_id, dtype=np.int32)
    lengths = np.empty(n, dtype=np.int64)
    for i, seq in enumerate(ids):
        if len(seq) > max_len:
            seq = [*seq[: max_len - 1], eos_id]
        x[i, : len(seq)] = seq
        lengths[i] = len(seq)
    pos = np.arange(max_len)[None, :]
    pl = np.minimum(np.asarray(prompt_lens, dtype=np.int64), max_len)[:, None]
    clean = pos < pl
    loss = ~clean if train_on_pad else (~clean & (pos < lengths[:, None]))
    return x, clean, loss


def data_files_builder(data_files: list[str]) -> str:
    """The ``datasets`` builder that reads local TinyGSM files: they must share one of the
    extensions of ``_BUILDERS`` (raises ValueError; the planner checks
    ``task.options.tinygsm_data_files`` with it)."""
    exts = {Path(f).suffix for f in data_files}
    builders = {_BUILDERS.get(e) for e in exts}
    if len(builders) != 1 or None in builders:
        raise ValueError(
            f"tinygsm: data_files must share one of {sorted(_BUILDERS)}, got {sorted(exts)}"
        )
    return builders.pop()


def _load_raw(opts: TinyGSMOptions):
    import datasets

    if opts.data_files:
        builder = data_files_builder(opts.data_files)
        ds = datasets.load_dataset(builder, data_files=list(opts.data_files), split="train")
    else:
        try:
            ds = datasets.load_dataset(opts.source, split="train")
        except Exception as e:
            raise RuntimeError(
                f"tinygsm: cannot load {opts.source!r} from the Hugging Face hub or cache "
                f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); on an offline machine "
                "pass task.options.tinygsm_data_files (local files with columns question, code)"
            ) from e
    missing = {"question", "code"} - set(ds.column_names)
    if missing:
        raise ValueError(
            f"tinygsm: {opts.data_files or opts.source}: missing column(s) "
            f"{sorted(missing)} (have {ds.column_names})"
        )
    return ds


def cache_key(opts: TinyGSMOptions, tok) -> str:
    src: dict = {"source": opts.source}
    if opts.data_files:
        h = hashlib.sha256()
        for f in sorted(opts.data_files):
            st = os.stat(f)
            h.update(f"{os.path.abspath(f)}|{st.st_size}|{st.st_mtime_ns}".encode())
        src = {"data_files": h.hexdigest()}
    blob = json.dumps(
        {
            **asdict(opts),
            **src,
            "data_files": None,
            "num_proc": None,
            "tok": cache_fingerprint(tok),
            "v": FORMAT_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def prepare(opts: TinyGSMOptions, tok, data_dir: str = "") -> Path:
    """Tokenise, filter, split and write the cache (once per key: concurrent callers wait for
    the first one and reuse its cache, :func:`bench.atomic.build_once`); returns the cache
    directory with ``{train,valid}_{x,clean,loss}.npy`` and ``meta.json``."""
    for f in opts.data_files or ():
        if not Path(f).is_file():
            raise FileNotFoundError(f"tinygsm: data file not found: {f}")
    root = data_cache_root(data_dir) / "tinygsm"
    out = root / cache_key(opts, tok)
    return build_once(
        out,
        lambda tmp: _build(opts, tok, tmp),
        check=lambda d: d if (d / "meta.json").exists() else None,
    )


def _tokenized(opts: TinyGSMOptions, tok):
    """The raw rows tokenised: columns ``ids``, ``prompt_len`` and ``n`` (length)."""
    ds = _load_raw(opts)

    def tokenize(batch):
        ids, pl = encode_pair(tok, batch["question"], batch["code"], opts.separator)
        return {"ids": ids, "prompt_len": pl, "n": [len(s) for s in ids]}

    return ds.map(
        tokenize,
        batched=True,
        batch_size=1000,
        remove_columns=ds.column_names,
        num_proc=opts.num_proc if opts.num_proc > 1 else None,
        desc="tokenise TinyGSM",
    )


def token_lengths(opts: TinyGSMOptions, tok) -> np.ndarray:
    """The token length of every raw example (``[BOS] q sep code [EOS]``, before the
    ``max_len`` filter), in source order: the data behind the paper's token-length figure.
    Uses ``opts.num_proc`` processes; nothing is cached."""
    for f in opts.data_files or ():
        if not Path(f).is_file():
            raise FileNotFoundError(f"tinygsm: data file not found: {f}")
    ds = _load_raw(opts)

    def count(batch):
        ids, _ = encode_pair(tok, batch["question"], batch["code"], opts.separator)
        return {"n": [len(s) for s in ids]}

    n = ds.map(
        count,
        batched=True,
        batch_size=1000,
        remove_columns=ds.column_names,
        num_proc=opts.num_proc if opts.num_proc > 1 else None,
        desc="count TinyGSM tokens",
    )["n"]
    return np.asarray(n, dtype=np.int64)


def _build(opts: TinyGSMOptions, tok, tmp: Path) -> None:
    """Write the cache's files into the (empty) folder ``tmp``; ``meta.json`` last."""
    ds = _tokenized(opts, tok)
    n_raw = len(ds)
    if opts.filter_too_long:
        ds = ds.filter(
            lambda n: [v <= opts.max_len for v in n],
            input_columns=["n"],
            batched=True,
            batch_size=10_000,
        )
    n_kept = len(ds)
    if n_kept < 2:
        raise ValueError(f"tinygsm: only {n_kept} example(s) fit max_len={opts.max_len}")
    split = ds.train_test_split(test_size=opts.valid_frac, seed=opts.split_seed)
    counts = {}
    for name, part in (("train", split["train"]), ("valid", split["test"])):
        _write_split(part, tmp, name, opts, tok)
        counts[name] = len(part)
    meta = {
        "options": asdict(opts),
        "n_raw": n_raw,
        "n_dropped_too_long": n_raw - n_kept,
        "counts": counts,
        "vocab_size": len(tok),
        "pad_id": tok.pad_token_id,
        "bos_id": tok.bos_token_id,
        "eos_id": tok.eos_token_id,
        "tokenizer": getattr(tok, "name_or_path", ""),
        "tokenizer_source": getattr(tok, "sflm_source", ""),
        "version": FORMAT_VERSION,
    }
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))


def _write_split(part, d: Path, name: str, opts: TinyGSMOptions, tok) -> None:
    n, L = len(part), opts.max_len
    arrays = {
        k: np.lib.format.open_memmap(d / f"{name}_{k}.npy", mode="w+", dtype=dt, shape=(n, L))
        for k, dt in (("x", np.int32), ("clean", np.bool_), ("loss", np.bool_))
    }
    step = 10_000
    for start in range(0, n, step):
        chunk = part[start : start + step]
        x, clean, loss = pack(
            chunk["ids"],
            chunk["prompt_len"],
            max_len=L,
            pad_id=tok.pad_token_id,
            eos_id=tok.eos_token_id,
            train_on_pad=opts.train_on_pad,
        )
        arrays["x"][start : start + len(x)] = x
        arrays["clean"][start : start + len(x)] = clean
        arrays["loss"][start : start + len(x)] = loss
    for a in arrays.values():
        a.flush()
    del arrays


class LongRows:
    """Row access to an int32 id matrix (the memory-mapped full TinyGSM) that returns int64
    rows, the dtype embeddings take: ``rows[idx]`` reads and converts only the rows asked for,
    so the trainer's ``data.x[idx]`` gets a LongTensor batch without 24 GB of int64 in RAM."""

    dtype = torch.long

    def __init__(self, ids: torch.Tensor):
        self.ids = ids

    @property
    def shape(self) -> torch.Size:
        return self.ids.shape

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, idx) -> torch.Tensor:
        return self.ids[idx].long()


def load_split(cache_dir: Path, split: str, n: int | None = None) -> TaskData:
    """The cached split (first ``n`` rows) as a TaskData over memory-mapped arrays.

    ``x`` is an int64 tensor in memory up to ``IN_MEMORY_ELEMENTS`` ids; above that (the full
    TinyGSM) it is a :class:`LongRows` over the int32 memory map, whose ``x[idx]`` (what the
    trainer and :meth:`TaskData.subset` do) returns int64 rows.
    """
    if split not in ("train", "valid"):
        raise ValueError(f"tinygsm: split must be train or valid, got {split!r}")
    arr = {
        k: np.load(cache_dir / f"{split}_{k}.npy", mmap_mode="c") for k in ("x", "clean", "loss")
    }
    if n is not None:
        arr = {k: v[:n] for k, v in arr.items()}
    x = torch.from_numpy(arr["x"])
    x = x.long() if x.numel() <= IN_MEMORY_ELEMENTS else LongRows(x)
    return TaskData(x, torch.from_numpy(arr["clean"]), torch.from_numpy(arr["loss"]))


def load_tinygsm(
    opts: TinyGSMOptions, tok, data_dir: str = "", split: str = "train", n: int | None = None
) -> TaskData:
    """Prepare (once) and load a split."""
    return load_split(prepare(opts, tok, data_dir), split, n)
