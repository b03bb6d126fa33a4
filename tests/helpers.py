"""Helpers shared by several test modules (imported as ``from helpers import ...``; pytest puts
``tests/`` on ``sys.path`` because it holds the rootdir ``conftest.py``).

torch and the method registry are imported inside the functions that need them, so that
``conftest.py`` (which uses :func:`run`) and the SLURM-only modules stay light.
"""

from __future__ import annotations

import json
import subprocess
import time
from functools import cache
from pathlib import Path

#: 30 rows in TinyGSM's schema (question, code) for the TinyGSM / GSM8K data tests
TINYGSM_FIXTURE = Path(__file__).parent / "fixtures" / "tinygsm_sample.jsonl"


def make_method(method, options: dict | None = None, vocab: int = 10, seq_len: int = 16):
    """A method (a registered name or a Method class) with ``options`` validated the way a sweep
    file's are (errors name ``<method>.options.<key>``), for a ``vocab`` x ``seq_len`` task."""
    from bench import registry
    from bench.config import build

    cls = registry.METHODS[method] if isinstance(method, str) else method
    opts = build(cls.Options, options or {}, where=f"{cls.name}.options")
    return cls(opts, vocab, seq_len)


def make_model(
    method,
    options: dict | None = None,
    vocab: int = 10,
    seq_len: int = 16,
    backbone=None,
    seed: int = 0,
):
    """``(method, backbone)``: :func:`make_method` plus its backbone (a ``BackboneConfig``;
    default the smallest preset, ``cpu-mini``: d = 64, 2 blocks, 4 heads), initialised under
    ``torch.manual_seed(seed)`` so that two calls give identical weights."""
    import torch

    from bench.config import BackboneConfig

    m = make_method(method, options, vocab, seq_len)
    torch.manual_seed(seed)
    return m, m.build_backbone(
        backbone if backbone is not None else BackboneConfig(size="cpu-mini")
    )


def run(*cmd: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a command (SLURM client tools), capturing text output; raises on timeout."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def wait_until(pred, timeout: float, what: str, interval: float = 0.5):
    """Return ``pred()``'s first truthy value; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(interval)


@cache
def tinygsm_rows() -> list[dict]:
    """The rows of :data:`TINYGSM_FIXTURE` (read once; do not mutate)."""
    return [json.loads(line) for line in TINYGSM_FIXTURE.read_text().splitlines()]


def tinygsm_options(**kw):
    """``TinyGSMOptions`` reading :data:`TINYGSM_FIXTURE`, ``max_len`` 160 unless given."""
    from bench.data.tinygsm import TinyGSMOptions

    return TinyGSMOptions(data_files=[str(TINYGSM_FIXTURE)], **{"max_len": 160, **kw})


def tinygsm_bpe():
    """A small byte-level BPE in the Hugging Face interface, like SmolLM's (BOS = EOS = 0,
    ``[PAD]`` added), trained on :data:`TINYGSM_FIXTURE`: no download. A test module makes it
    a fixture with ``bpe = pytest.fixture(tinygsm_bpe, scope="module", name="bpe")``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(
        [r["question"] + "\n" + r["code"] for r in tinygsm_rows()],
        trainers.BpeTrainer(
            vocab_size=600,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )
    tok.add_special_tokens({"pad_token": "[PAD]"})
    return tok


def sort_train_config(steps: int, **kw):
    """The small TrainConfig of the trainer tests (batch 16, lr 1e-3, warm-up 2, EMA 0.9, one
    thread, seed 5); ``kw`` overrides or adds fields."""
    from bench.config import TrainConfig, build

    base = {
        "steps": steps,
        "batch_size": 16,
        "lr": 1e-3,
        "warmup_steps": 2,
        "ema": 0.9,
        "checkpoint_every": 3,
        "threads": 1,
        "seed": 5,
    }
    return build(TrainConfig, {**base, **kw})


def train_sort_mdlm(run_dir, cfg, *, init_seed: int = 0, callbacks=(), val_data=None):
    """Train MDLM with the shared trainer on 200 sort-8 examples (cpu-mini DiT, dropout 0.1 so
    that the dropout RNG is part of what a resume must restore); returns ``fit``'s result.
    ``val_data``: held-out examples for the validation loss."""
    import torch

    from baselines.mdlm import MDLM
    from bench.config import BackboneConfig
    from bench.data.toy import sort_data
    from bench.train import fit

    method = MDLM(None, 10, 16)
    torch.manual_seed(init_seed)
    backbone = method.build_backbone(BackboneConfig(size="cpu-mini", dropout=0.1))
    return fit(
        method,
        backbone,
        sort_data(200, seed=1),
        cfg,
        run_dir,
        progress=False,
        callbacks=list(callbacks),
        val_data=val_data,
    )
