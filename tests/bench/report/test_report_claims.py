"""What the report's tables and figures claim: the training curves say what each loss is (one row
of panels per kind, from the method's ``loss_kind`` recorded on its train rows) and keep their
legend inside the figure; the model styles keep 12 models apart; ``power.md`` says why a
detectable difference is undefined instead of printing 0; the sweep CLI prints AR's NFE as the
report does and counts import cells as such; a ``--paper``-only page shows no empty sections."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest
from helpers import outcome_row

from bench.results import Store

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


# --------------------------------------------------------------------------- 1. training curves


def test_every_builtin_method_says_what_its_loss_is():
    """The quantity comes from the method (and its options), never from a list in the report."""
    from baselines.ar import AR
    from baselines.candi import CANDI
    from baselines.duo import Duo
    from baselines.flm import FLM
    from baselines.mdlm import MDLM
    from bench.method import LOSS_CE, LOSS_NELBO, LOSS_NLL, Method
    from sflm.method import SFLM

    def kind(cls, **opts):
        return cls.loss_kind_for(cls.Options(**opts))

    for cls in (AR, MDLM, Duo, CANDI, FLM, SFLM):
        assert cls.loss_kind != Method.loss_kind, cls.name
    assert kind(AR) == LOSS_NLL
    assert kind(MDLM) == LOSS_NELBO and kind(Duo) == LOSS_NELBO
    assert kind(MDLM, loss_type="low_var") == LOSS_CE  # the masked CE without 1/t: no bound
    assert "not a likelihood bound" in kind(Duo, loss_type="low_var")
    assert "curriculum" in kind(Duo, curriculum_end=1000)
    # low_var is no bound whatever the curriculum (its kind wins over the curriculum's)
    assert kind(Duo, loss_type="low_var", curriculum_end=1000) == kind(Duo, loss_type="low_var")
    assert kind(FLM) == LOSS_CE and kind(SFLM) == LOSS_CE  # unweighted CE, neither a NELBO
    assert kind(CANDI, pure_gaussian=True) == LOSS_CE
    assert "not a likelihood bound" in kind(CANDI)
    assert "not a likelihood bound" in LOSS_CE and "NLL" in LOSS_NELBO


def test_train_rows_record_the_methods_loss_kind(tmp_path):
    from bench.config import load_sweep
    from bench.data.toy import SortTask
    from bench.method import LOSS_CE, LOSS_NLL
    from bench.plan import plan
    from bench.results.rows import train_rows
    from bench.train import TrainResult

    cells = plan(load_sweep(QUICKSTART), "q").train_cells
    kinds = {}
    for cell in cells:
        cell = dataclasses.replace(cell, results_dir=str(tmp_path))
        rows = train_rows(cell, TrainResult(3, 1.0, 3.0, 0.5, cell.weights), 10, task=SortTask)
        assert len({r["loss_kind"] for r in rows}) == 1
        kinds[(cell.method, cell.variant)] = rows[0]["loss_kind"]
        Store(tmp_path).write_cell(cell.id, rows)  # the store accepts the column
    assert kinds[("ar", "base")] == LOSS_NLL
    assert kinds[("candi", "pure-gaussian")] == LOSS_CE
    assert set(Store(tmp_path).read()["loss_kind"].dropna()) == set(kinds.values())


def _train_cell(store: Store, root: Path, method: str, seed: int, kind: str | None):
    log = root / "runs" / f"{method}-{seed}" / "logs" / "metrics.csv"
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step,loss,val_loss"] + [
        f"{s},{2.0 / (1 + s / 100) + 0.01 * seed:.4f},{2.1 / (1 + s / 100):.4f}"
        for s in range(50, 601, 50)
    ]
    log.write_text("\n".join(lines) + "\n")
    base = {
        "task": "sudoku",
        "method": method,
        "variant": "base",
        "seed": seed,
        "kind": "train",
        "subset": "easy+medium+hard",
        "train_cell": f"{method}-{seed}",
        "train_log": f"runs/{method}-{seed}/logs/metrics.csv",
        "task_kind": "generic",
        **({"loss_kind": kind} if kind is not None else {}),
    }
    store.write_cell(
        f"{method}-{seed}",
        [{**base, "metric": m, "value": 1.0} for m in ("train_final_loss", "n_params")],
    )


def _drawn(monkeypatch, root: Path):
    """The training-curves figure of the store at ``root`` (its Figure object, after saving)."""
    from bench.report import curves as mod
    from bench.results import read

    figs = []
    real = mod.save_figure

    def keep(fig, stem):
        figs.append(fig)
        return real(fig, stem)

    monkeypatch.setattr(mod, "save_figure", keep)
    out = root / "out"
    out.mkdir(exist_ok=True)
    for task, c in mod.curves(read(root), root).items():
        mod.figure(task, c, out)
    assert len(figs) == 1
    return figs[0]


def test_curves_draw_one_titled_row_per_kind_of_loss(tmp_path, monkeypatch):
    from bench.method import LOSS_CE, LOSS_NELBO, LOSS_NLL
    from bench.report.curves import UNRECORDED

    s = Store(tmp_path)
    kinds = {"ar": LOSS_NLL, "mdlm": LOSS_NELBO, "flm": LOSS_CE, "sflm": LOSS_CE, "old": None}
    for method, kind in kinds.items():
        for seed in (0, 1):
            _train_cell(s, tmp_path, method, seed, kind)
    fig = _drawn(monkeypatch, tmp_path)
    rows = {}
    for sf in fig.subfigs:
        title = sf._suptitle.get_text().replace("\n", " ")
        legends = [*sf.legends, *(ax.get_legend() for ax in sf.axes if ax.get_legend())]
        rows[title] = sorted(t.get_text() for lg in legends for t in lg.get_texts())
        assert [ax.get_title() for ax in sf.axes] == [
            "training batches",
            "held-out examples (EMA weights)",
        ]
    assert rows == {
        LOSS_NLL: ["ar"],
        LOSS_NELBO: ["mdlm"],
        LOSS_CE: ["flm", "sflm"],  # the same quantity: one axis
        UNRECORDED: ["old"],  # a store older than loss_kind says it does not know
    }


def test_curves_legend_takes_no_margin_beside_the_panels(tmp_path, monkeypatch):
    """Everything drawn (legends included) lies inside the figure: nothing is added beside it."""
    s = Store(tmp_path)
    for i in range(9):  # more models than a panel's legend holds: the legend goes under the row
        _train_cell(s, tmp_path, f"m{i}", 0, None)
    fig = _drawn(monkeypatch, tmp_path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # saved and closed: a canvas to measure on
    fig.draw(renderer)
    box = fig.get_tightbbox(renderer)  # inches
    assert box.x0 >= -0.05 and box.x1 <= fig.get_figwidth() + 0.05, (box, fig.get_figwidth())
    assert not fig.legends  # no figure-wide legend beside the rows


# --------------------------------------------------------------------------- 2. model styles


def test_model_styles_have_distinct_hues_and_differ_in_two_of_three():
    from matplotlib.colors import to_rgb

    from bench.report.figures import model_style

    names = [f"model {i:02d} (decoding)" for i in range(12)]
    st = model_style(names)
    rgb = {m: np.array(to_rgb(st["palette"][m])) for m in names}
    closest = min(np.linalg.norm(rgb[a] - rgb[b]) for a, b in itertools.combinations(names, 2))
    assert closest >= 0.25, closest  # tab20's light / dark pairs are 0.1 apart
    many = [f"m{i:02d}" for i in range(40)]
    st40 = model_style(many)
    for a, b in itertools.combinations(many, 2):
        same = [st40[k][a] == st40[k][b] for k in ("palette", "markers", "dashes")]
        assert sum(same) <= 1, (a, b)
    # deterministic: a function of the set of names, not of their order or of the call
    assert model_style(list(reversed(names))) == st == model_style(names)
    assert model_style(names[:3])["palette"][names[0]] == st["palette"][names[0]]


# --------------------------------------------------------------------------- 3. power.md


def test_power_says_why_a_zero_spread_gives_no_detectable_difference(tmp_path):
    from bench.report.differences import power_markdown, power_rows
    from bench.results import read

    s = Store(tmp_path)
    for m in ("a", "b", "c"):  # every model at 0 %: no item differs between any pair
        s.write_cell(m, [outcome_row(m, 0, np.zeros(50, dtype=int))])
    p = power_rows("sudoku", read(tmp_path))
    assert p["pairs"].iloc[0] == 3 and np.isnan(p["mde_observed"].iloc[0])
    text = str(power_markdown(p))
    row = next(ln for ln in text.splitlines() if ln.startswith("| sudoku"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert "undefined: no item differs between any pair" in cells
    assert "0.0" not in cells


# --------------------------------------------------------------------------- 4. / 5. sweep CLI


def test_status_labels_print_ar_nfe_as_the_length():
    from bench.config import load_sweep
    from bench.kinds.likelihood import LikelihoodCell
    from bench.plan import plan

    p = plan(load_sweep(QUICKSTART), "q")
    ar = [
        c.label()
        for c in p.sample_cells
        if c.train.method == "ar" and not isinstance(c, LikelihoodCell)
    ]
    assert ar and all("nfe=length" in x for x in ar)
    assert not any("nfe=0" in c.label() for c in p.sample_cells)


def test_model_cells_count_train_and_import_cells():
    from bench.config import load_sweep
    from bench.plan import plan
    from bench.status import model_cells

    p = plan(load_sweep(QUICKSTART), "q")
    n = len(p.train_cells)
    src = {"checkpoint": "x.ckpt", "sha256": None, "family": None, "forced": None}
    p.train_cells[:2] = [dataclasses.replace(tc, source=src) for tc in p.train_cells[:2]]
    assert model_cells(p) == f"{n - 2} train cells, 2 import cells"
    p.train_cells[:] = [dataclasses.replace(tc, source=src) for tc in p.train_cells]
    assert model_cells(p) == f"{n} import cells"


def test_dry_run_counts_import_cells_as_such(tmp_path, capsys):
    from bench import sweep

    path = ROOT / "sweeps" / "paper_owt_checkpoints.yaml"
    assert sweep.main([str(path), "--dry-run", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ": 7 import cells," in out and "train cells" not in out
    assert "jobs: 7 import job(s)," in out and "train job" not in out


# --------------------------------------------------------------------------- 6. --paper page


def test_paper_only_page_has_no_empty_sections(tmp_path):
    from bench.report import main

    s = Store(tmp_path)
    for m in ("a", "b"):
        s.write_cell(m, [outcome_row(m, 0, np.ones(20, dtype=int))])
    out = tmp_path / "paper_only"
    assert main(["--results-dir", str(tmp_path), "--out", str(out), "--paper"]) == 0
    html = (out / "index.html").read_text()
    assert "None written." not in html
    assert 'id="f-sudoku"' not in html  # no task section with nothing in it
    assert "Paper items only" in html and "under <code>paper/</code>" in html
    assert 'href="#store-wide"' not in html
    # the full report in the same folder: the task and store-wide sections are back
    assert main(["--results-dir", str(tmp_path), "--out", str(out)]) == 0
    html = (out / "index.html").read_text()
    assert 'id="f-sudoku"' in html and 'id="store-wide"' in html
    assert "Paper items only" not in html


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
