"""``python -m bench.generate SRC --prompt TEXT [--suffix TEXT] [--length N] [--nfe N]
[--temperature T] [--decoding D] [--n K] [--seed S] [--task T] [--set KEY=VALUE ...]``

Print K continuations of a prompt by one model, with the method's NFE accounting. ``SRC`` is
what ``python -m bench.eval`` takes (:mod:`bench.source_model`): a run folder of a sweep, a model
folder from ``python -m bench.checkpoints convert``, a reference-format file or ``hf://...``
(these need ``--task``, and ``--set task....`` for the task's options; a file is read in memory,
nothing is written).

The task lays the text out (:meth:`bench.data.base.Task.text_canvas`): the prompt's ids, ``N``
positions to generate, then the suffix's ids; prompt and suffix are kept as given. A suffix makes
it infilling, which the non-AR methods do by construction; AR generates left to right and says
it cannot infill (exit 2). Sudoku takes the puzzle as the prompt (``--prompt "1.3./..."``) and
fills its solution half. The text is what the task reads
(:meth:`~bench.data.base.Task.encode_text`): token ids separated by spaces for the sort task, a
puzzle for Sudoku, text for the tokenizer tasks.

Defaults: ``--length`` the task's sequence length minus the prompt (and suffix), at least 1;
``--nfe`` the positions to generate; ``--temperature`` 1; the method's default decoding; one
sample; seed 0. The K samples are one batch drawn with ``torch.Generator().manual_seed(S)``: the
same command prints the same text. Output (stdout): one line per sample, the generated part
only (between prompt and suffix); when a sample's text spans several lines, each sample is
preceded by a ``--- sample k/K ---`` line instead; then the NFE line, e.g. ``nfe: 8 network calls
per sample (method mdlm, decoding ancestral, T 1)``: the backbone calls the sampler made, counted
by :meth:`bench.method.Method.call` (AR: one per generated position, whatever ``--nfe`` says).

Bad input (an unknown SRC, text the task cannot read, AR with a suffix, a canvas longer than the
model's positions) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bench.config import ConfigError
from bench.usage import UsageError, add_results_dir, add_sets, add_task, usage_exit

LABEL = "bench.generate"


@dataclass
class Generation:
    """What :func:`generate` returns. ``ids``: (K, L) sampled canvases (prompt and suffix
    included); ``span``: the generated positions ``[start, end)``; ``texts``: each sample's
    generated part as text; ``nfe``: backbone calls per sample."""

    ids: object  # torch.Tensor
    canvas: object  # bench.data.base.TaskData (one row)
    span: tuple[int, int]
    texts: list[str]
    nfe: int
    method: str
    decoding: str
    temperature: float

    def nfe_line(self) -> str:
        how = ", one call per generated position" if self.method == "ar" else ""
        return (
            f"nfe: {self.nfe} network calls per sample (method {self.method}, decoding "
            f"{self.decoding}, T {self.temperature:g}{how})"
        )


@dataclass
class _Model:
    cell: object  # bench.plan.TrainCell
    task: object
    positions: int  # the longest canvas the model was trained for
    weights: Path | None  # a weights file in our format, or None: read ``source`` directly
    checkpoint: str | None = None  # a reference-format file to read (weights None)


def _model(src: str, *, task: str | None, sets: list[str], results_dir: str | None) -> _Model:
    """SRC's train cell, task and weights (nothing is loaded or written)."""
    import json

    from bench import registry
    from bench import source_model as sm

    source = sm.resolve_source(src)
    if source.kind == "run":
        if sets:
            raise ConfigError("--set: a run folder's task and model are its own (cell.json)")
        tc = sm.trained_cell(source)
        if task is not None and task != tc.task["name"]:
            raise ConfigError(f"--task: {src} is a model of task {tc.task['name']!r}, not {task!r}")
        if not tc.weights.is_file():
            raise ConfigError(f"{src}: no weights.pt (training has not finished)")
        t = registry.make_task(tc.task_config())
        meta = tc.run_dir / "model.json"  # an import cell's run folder: the model's own length
        own = json.loads(meta.read_text()).get("seq_len") if meta.is_file() else None
        return _Model(tc, t, max(t.seq_len, own or 0), tc.weights)
    data = sm.sweep_data(source, task=task, sets=sets, results_dir=results_dir)
    p = sm.build_plan(data, LABEL)
    tc = p.train_cells[0]
    t = registry.make_task(tc.task_config())
    from bench.checkpoints import is_model_folder, plan_spec

    sp, _ = plan_spec(src, family=tc.source.get("forced"))
    positions = max(t.seq_len, sp.seq_len or 0)
    if is_model_folder(src):  # a converted model folder
        return _Model(tc, t, positions, Path(src) / "weights.pt")
    if tc.weights.is_file():  # imported by bench.eval or a sweep already
        return _Model(tc, t, positions, tc.weights)
    return _Model(tc, t, positions, None, checkpoint=src)


def _load(m: _Model, device):
    """The method and backbone of ``m`` holding its weights, on ``device``, in eval mode."""
    from bench import registry
    from bench.weights import load_weights

    tc = m.cell
    method = registry.make_method(tc.method, tc.options, m.task, tc.vocab_size)
    backbone = method.build_backbone(tc.backbone_config())
    if m.weights is not None:
        load_weights(method, backbone, m.weights)
    else:  # a reference-format file: read its EMA weights in memory (bench.checkpoints)
        from bench.checkpoints import _load_into, open_source, resolve_options

        op = open_source(m.checkpoint, family=tc.source.get("forced"))
        for w in op.ref.warnings:
            print(f"warning: {w}", file=sys.stderr, flush=True)
        opts = resolve_options(op.spec, tc.options, where="options")
        ref_method, ref_backbone = _load_into(op, opts, m.task.seq_len)
        backbone.load_state_dict(ref_backbone.state_dict())
        method.load_state_dict(ref_method.state_dict())
    backbone.to(device).eval()
    method.to(device)
    return method, backbone


class LoadedModel(NamedTuple):
    """What :func:`load_model` returns: the task, the method and backbone holding SRC's weights
    (eval mode, on ``device``), the longest canvas the model was trained for (``positions``)
    and its train cell (:class:`bench.plan.TrainCell`)."""

    task: object
    method: object
    backbone: object
    device: object
    positions: int
    cell: object


def load_model(
    src: str,
    *,
    task: str | None = None,
    sets: list[str] = (),
    results_dir: str | None = None,
    device=None,
) -> LoadedModel:
    """SRC's model, loaded as :func:`generate` loads it (:mod:`bench.source_model`; ``task`` and
    ``sets`` as ``--task`` / ``--set``), for other front ends (:mod:`bench.lmeval`). ``device``:
    a torch device or its name (default: CUDA when there is one). Reads, never writes;
    :class:`ConfigError` (one line) on bad input."""
    import torch

    m = _model(src, task=task, sets=list(sets), results_dir=results_dir)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    method, backbone = _load(m, dev)
    return LoadedModel(m.task, method, backbone, dev, m.positions, m.cell)


def generate(
    src: str,
    prompt: str,
    *,
    suffix: str = "",
    length: int | None = None,
    nfe: int | None = None,
    temperature: float = 1.0,
    decoding: str = "default",
    n: int = 1,
    seed: int = 0,
    task: str | None = None,
    sets: list[str] = (),
    results_dir: str | None = None,
    float64: bool = True,
) -> Generation:
    """Sample ``n`` continuations (module docstring). :class:`ConfigError` (one line) on bad
    input, before any weights are read."""
    import torch

    _check_flags(n=n, temperature=temperature, nfe=nfe, length=length)
    m = _model(src, task=task, sets=list(sets), results_dir=results_dir)
    tc, t = m.cell, m.task
    canvas, (start, end), free = _canvas(m, prompt, suffix, length)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    method, backbone = _load(m, dev)
    try:
        dec = method.resolve_decoding(decoding)
    except ValueError as e:
        raise ConfigError(f"--decoding: {e}") from None
    x = canvas.x.repeat(n, 1).to(dev)
    clean = canvas.clean_mask.repeat(n, 1).to(dev)
    gen = torch.Generator(device=dev).manual_seed(seed)
    method.nfe_counter = 0
    ids = method.sample(
        backbone,
        x,
        clean,
        nfe=nfe or free,
        temperature=temperature,
        decoding=dec,
        float64=float64,
        generator=gen,
    ).cpu()
    texts = [t.decode_text(row[start:end]) for row in ids.tolist()]
    return Generation(ids, canvas, (start, end), texts, method.nfe_counter, tc.method, dec,
                      temperature)  # fmt: skip


def _check_flags(*, n: int, temperature: float, nfe: int | None, length: int | None) -> None:
    if n < 1:
        raise ConfigError(f"--n: must be >= 1, got {n}")
    if not temperature > 0:
        raise ConfigError(f"--temperature: must be > 0, got {temperature}")
    if nfe is not None and nfe < 1:
        raise ConfigError(f"--nfe: must be >= 1, got {nfe}")
    if length is not None and length < 1:
        raise ConfigError(f"--length: must be >= 1, got {length}")


def _canvas(m: _Model, prompt: str, suffix: str, length: int | None):
    """The one-row canvas of ``prompt``, ``length`` positions to generate (None: the task's
    length left) and ``suffix``, for model ``m``: (canvas, the generated span ``(start, end)``,
    the positions to generate). :class:`ConfigError` when the method cannot infill, the task
    cannot read the text, or the canvas does not fit the model."""
    from bench import registry

    tc, t = m.cell, m.task
    cls = registry.METHODS[tc.method]
    # a method whose NFE is its generated length generates left to right (AR): nothing after
    # the generated span can condition it
    if suffix and cls.nfe_is_length:
        raise ConfigError(
            f"{tc.method} cannot infill: it generates left to right, so a --suffix could not "
            "condition what comes before it (use a non-AR model, or drop --suffix)"
        )
    try:  # text the task cannot read: one line (Task.encode_text / text_canvas)
        if length is None:  # the task's length minus what the prompt and suffix take
            probe = t.text_canvas(prompt, suffix, 1)
            length = max(1, t.seq_len - (probe.x.shape[1] - 1))
        canvas = t.text_canvas(prompt, suffix, length)
        suffix_len = len(t.encode_text(suffix)) if suffix else 0
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(f"{LABEL}: {e}") from None
    L = int(canvas.x.shape[1])
    start = t.prompt_length(canvas, 0)
    end = L - suffix_len
    if L > m.positions:
        raise ConfigError(
            f"--length: the canvas is {L} positions (prompt {start}, generated {end - start}, "
            f"suffix {L - end}); the model has {m.positions}"
        )
    free = int((~canvas.clean_mask).sum())
    if free == 0:
        raise ConfigError("--length: nothing to generate")
    if cls.nfe_is_length and bool(~canvas.clean_mask[0, 0]):
        raise ConfigError(f"--prompt: {tc.method} needs a prompt (its first position is given)")
    return canvas, (start, end), free


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.generate",
        description="Print K continuations of a prompt (or infillings, with --suffix) by one "
        "model, with the method's NFE accounting.",
    )
    ap.add_argument("src", metavar="SRC", help="run folder, model folder, .ckpt file or hf://...")
    ap.add_argument("--prompt", required=True, help="the prompt, as the task reads text")
    ap.add_argument("--suffix", default="", help="text after the generated part (infilling)")
    ap.add_argument(
        "--length", type=int, help="positions to generate (default: the task's length left)"
    )
    ap.add_argument("--nfe", type=int, help="network calls (default: the positions to generate)")
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    ap.add_argument("--decoding", default="default", help="decoding (default: the method's)")
    ap.add_argument("--n", type=int, default=1, metavar="K", help="samples (one batch)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (same seed, same text)")
    add_task(ap, "task name (required for a checkpoint)")
    add_sets(
        ap,
        "a checkpoint's task options, as in a sweep file (repeatable; VALUE is YAML), e.g. "
        "--set task.options.n_digits=4",
    )
    add_results_dir(
        ap, "where bench.eval or a sweep imported the checkpoint (default: results); read only"
    )
    ap.add_argument("--float32", action="store_true", help="sample in float32 (default: float64)")
    args = ap.parse_args(argv)
    try:
        g = generate(
            args.src,
            args.prompt,
            suffix=args.suffix,
            length=args.length,
            nfe=args.nfe,
            temperature=args.temperature,
            decoding=args.decoding,
            n=args.n,
            seed=args.seed,
            task=args.task,
            sets=args.sets,
            results_dir=args.results_dir,
            float64=not args.float32,
        )
    except UsageError as e:  # ConfigError, CheckpointError included
        return usage_exit(e)
    multi = any("\n" in s for s in g.texts)
    for k, s in enumerate(g.texts, 1):
        if multi:
            print(f"--- sample {k}/{len(g.texts)} ---")
        print(s)
    print(g.nfe_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
