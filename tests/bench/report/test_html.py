"""``<out>/index.html``: the report as one page. For a quickstart-like store (Sudoku, two seeds,
training logs) and a synthetic one (a program task, a frontier task, the paper items), the page
shows every table of every Markdown file and every figure of the folder, links only to files
that exist, escapes the store's strings, and carries each number's provenance; ``--no-html``
and ``--open``; the figures' SVG and the token-length bins."""

from __future__ import annotations

import re
import webbrowser
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from bench.report import main
from bench.report.document import read_page_data
from bench.results import Store, sample_columns, task_columns

#: a store string with markup in it: the page must show it as text, never as markup
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">&amp;"


def _sudoku_rows(method_cls, variant, decoding, subset, nfe, temp, seed, value, sha="abc1234"):
    from bench.data.sudoku.task import SudokuTask

    return [
        {
            "sweep": "quickstart",
            "task": "sudoku",
            "method": method_cls.name,
            "variant": variant,
            "decoding": decoding,
            "backbone": "cpu-mini",
            "kind": "sample",
            "subset": subset,
            "metric": m,
            "value": v,
            "ci_low": v - 0.05 if m == "exact_match" else None,
            "ci_high": v + 0.05 if m == "exact_match" else None,
            "n": 256,
            "nfe": nfe,
            "temperature": temp,
            "train_steps": 600,
            "seed": seed,
            "git_sha": sha,
            "config_hash": f"cfg-{method_cls.name}-{seed}",
            "train_cell": f"train-{method_cls.name}-{seed}",
            **sample_columns(SudokuTask, method_cls, decoding, subset, m),
        }
        for m, v in (("exact_match", value), ("cell_accuracy", min(1.0, value + 0.3)))
    ]


def _train_rows(root: Path, method: str, variant: str, seed: int, steps=600, sweep="quickstart"):
    """A train cell and its training log (loss and val_loss every 50 steps)."""
    from bench.data.sudoku.task import SudokuTask

    run = f"runs/{method}-{variant}-{seed}"
    log = root / run / "logs" / "metrics.csv"
    log.parent.mkdir(parents=True, exist_ok=True)
    lines = ["step,loss,val_loss"] + [
        f"{s},{2.0 / (1 + s / 100) + 0.01 * seed:.4f},{2.1 / (1 + s / 100):.4f}"
        for s in range(50, steps + 1, 50)
    ]
    log.write_text("\n".join(lines) + "\n")
    base = {
        "sweep": sweep,
        "task": "sudoku",
        "method": method,
        "variant": variant,
        "backbone": "cpu-mini",
        "subset": "easy+medium+hard",
        "kind": "train",
        "seed": seed,
        "train_steps": steps,
        "config_hash": f"train-{method}-{seed}",
        "train_cell": f"train-{method}-{seed}",
        "train_log": f"{run}/logs/metrics.csv",
        "wall_s": 60.0,
        "device": "cpu",
        "devices": 1,
        "git_sha": "abc1234",
        **task_columns(SudokuTask),
    }
    return [
        {**base, "metric": "train_steps_per_s", "value": 5.0 + seed, "n": steps},
        {**base, "metric": "train_final_loss", "value": 0.2, "n": steps},
    ]


def _records(root: Path, cell: str, row: dict, hostile: str) -> dict:
    """Per-item records of a synthetic cell (bench.records): 6 items, the model's output holds
    ``hostile`` when given; returns the row columns naming them."""
    from bench import records

    recs = [
        {
            "cell_id": cell,
            "index": i,
            "item": i,
            "subset": row["subset"],
            "prompt": f"puzzle {i} <b>of</b> {row['subset']}",
            "target": f"solution {i}",
            "output": f"{hostile}grid {i} by {row['method']} | seed {row['seed']}",
            "correct": int((i + row["seed"]) % 3 == 0),
        }
        for i in range(6)
    ]
    return records.write(root, cell, recs)


def quickstart_like_store(root: Path, hostile: str = "") -> Path:
    """Sudoku, AR and MDLM (+ a variant named ``hostile`` when given), two seeds, NFE 4 / 16,
    T 1 / 0.5, three difficulties, with training logs: the shape of the quickstart's store."""
    from baselines.ar import AR
    from baselines.mdlm import MDLM

    s = Store(root)
    models = [(AR, "base", "sample", 19), (MDLM, "base", "ancestral", None)]
    if hostile:
        models.append((MDLM, hostile, "ancestral", None))
    for cls, variant, dec, nfe_len in models:
        for seed in (0, 1):
            sweep = hostile if variant == hostile else "quickstart"  # a sweep name, too
            rows = _train_rows(root, cls.name, variant, seed, sweep=sweep)
            s.write_cell(f"tr-{cls.name}-{len(variant)}-{seed}", rows)
            for nfe in (nfe_len,) if nfe_len else (4, 16):
                for temp in (1.0, 0.5):
                    for k, sub in enumerate(("easy", "medium", "hard")):
                        v = 0.6 - 0.1 * k + 0.01 * seed + 0.001 * nfe - 0.05 * (temp != 1.0)
                        cell = f"{cls.name}-{len(variant)}-{nfe}-{temp:g}-{sub}-{seed}"
                        rows = _sudoku_rows(cls, variant, dec, sub, nfe, temp, seed, v)
                        files = _records(root, cell, rows[0], hostile if variant == hostile else "")
                        s.write_cell(cell, [{**r, **files} for r in rows])
    return root


class _Page(HTMLParser):
    """What a test needs from the page: links and image sources, the tables (per enclosing
    article id: header texts and the number of rows), the cells' titles."""

    def __init__(self):
        super().__init__()
        self.refs: list[str] = []
        self.tables: list[dict] = []
        self.titles: list[tuple[str, str]] = []  # (cell text, title)
        self.articles: list[str] = []
        self._stack: list[str] = []
        self._table: list[dict] = []
        self._cell: list | None = None
        self._depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for k in ("href", "src"):
            if a.get(k):
                self.refs.append(a[k])
        if a.get("srcset"):
            self.refs.append(a["srcset"])
        if tag == "article":
            self.articles.append(a.get("id", ""))
        if tag == "table":
            t = {
                "sortable": "sortable" in a.get("class", ""),
                "header": [],
                "rows": 0,
                "body": [],  # per row: (text, title) per cell
                "article": self.articles[-1] if self.articles else "",
            }
            self._table.append(t)
            self.tables.append(t)
        if tag == "tr" and self._table and self._stack.count("tbody") >= 1:
            if self._stack[-1] == "tbody":
                self._table[-1]["rows"] += 1
                self._table[-1]["body"].append([])
        if tag in ("td", "th"):
            self._cell = [a.get("title", ""), ""]
        self._stack.append(tag)

    def handle_endtag(self, tag):
        while self._stack:
            top = self._stack.pop()
            if top == tag:
                break
        if tag == "table" and self._table:
            self._table.pop()
        if tag == "article" and self.articles:
            self.articles.pop()
        if tag in ("td", "th") and self._cell is not None:
            if tag == "th" and self._table:
                self._table[-1]["header"].append(self._cell[1].strip())
            elif self._cell[0]:
                self.titles.append((self._cell[1].strip(), self._cell[0]))
            if tag == "td" and self._table and self._table[-1]["body"]:
                self._table[-1]["body"][-1].append((self._cell[1].strip(), self._cell[0]))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data


def parse_page(path: Path) -> _Page:
    p = _Page()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def local_refs(page: _Page) -> set[str]:
    return {unquote(r.split("#")[0]) for r in page.refs if r and not r.startswith(("#", "http"))}


def check_page(out: Path) -> _Page:
    """Every file of ``out`` is on the page, every link resolves, every table of a report file is
    a page table with the same header and as many rows, and every entry of every table that is
    not a label (model, subset, NFE, ...) shows where it comes from on hover: its store cells,
    the paper, or what computed it."""
    page = parse_page(out / "index.html")
    refs = local_refs(page)
    files = {
        str(p.relative_to(out))
        for p in out.rglob("*")
        if p.is_file()
        and p.name != "index.html"
        and not any(x.startswith(".") for x in p.relative_to(out).parts)  # the page's data
    }
    assert files, "the report wrote no files"
    assert files <= refs, f"files the page does not show: {sorted(files - refs)}"
    missing = sorted(r for r in refs if not (out / r).is_file())
    assert not missing, f"links to missing files: {missing}"
    anchors = {t["article"] for t in page.tables}
    for md in sorted(out.rglob("*.md")):
        name = str(md.relative_to(out))
        data = read_page_data(md)
        assert data is not None, f"{name}: written without its page data"
        want = [b for b in data if b["kind"] == "table"]
        art = "f-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)
        assert art in anchors or not want, f"{name}: no table on the page"
        got = [t for t in page.tables if t["article"] == art and t["sortable"]]
        assert [t["header"][: len(w["header"])] for t, w in zip(got, want)] == [
            w["header"] for w in want
        ], name
        assert [t["rows"] for t in got] == [len(w["rows"]) for w in want], name
        for t, w in zip(got, want):
            for row in t["body"]:
                for h, (text, title) in zip(t["header"], row):
                    if h in w["keys"] or h == "source" or not text:
                        continue
                    assert title, f"{name}: {h!r} of row {row[0][0]!r} shows no provenance"
    # figures: the SVG first, the PNG as the image element's fallback
    for svg in out.rglob("*.svg"):
        rel = str(svg.relative_to(out))
        assert rel in refs and rel.replace(".svg", ".png") in refs, rel
    return page


@pytest.fixture(scope="module")
def quickstart_like_report(tmp_path_factory) -> Path:
    """A :func:`quickstart_like_store` and its report (default options), written once for the
    tests that only read them."""
    root = quickstart_like_store(tmp_path_factory.mktemp("quickstart-like"))
    assert main(["--results-dir", str(root)]) == 0
    return root


def test_quickstart_like_page_lists_every_table_and_figure(quickstart_like_report):
    out = quickstart_like_report / "report"
    check_page(out)
    for stem in ("sudoku_training_curves", "sudoku_exact_match_vs_nfe"):
        for ext in ("svg", "png", "pdf"):
            assert (out / f"{stem}.{ext}").is_file(), (stem, ext)
    html = (out / "index.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "<script src" not in html and "<link" not in html  # nothing from outside the file
    assert re.search(r"cells done</dt><dd>\d+ \(\d+ sample, 4 train\)", html)
    assert "sweeps/quickstart.yaml" in html or "<code>quickstart</code>" in html
    assert "abc1234" in html  # the commit behind the store
    # the page's numbers are the Markdown's: the headline table cell of MDLM, easy
    md = (out / "sudoku.md").read_text()
    cell = re.search(r"\| mdlm \(ancestral\) \|[^|]*\|[^|]*\|[^|]*\|[^|]*\| ([^|]+) \|", md)
    assert cell and cell.group(1).strip() in html


def test_every_number_has_its_provenance(quickstart_like_report):
    """The headline MDLM / easy entry names both seeds' cells, its config hashes, the commit and
    seeds x items; a paper column says it is the paper's; the training table its train cells."""
    page = parse_page(quickstart_like_report / "report" / "index.html")
    by_text = {}
    for text, title in page.titles:
        by_text.setdefault(text, []).append(title)
    titles = [t for _, t in page.titles]
    easy = [t for t in titles if "mdlm-4-16-1-easy-0" in t]
    assert easy, "no entry names the MDLM easy cell at NFE 16, T 1"
    t = easy[0]
    assert "mdlm-4-16-1-easy-1" in t  # the other seed's cell
    assert "2 seed(s) x 256 items" in t and "cfg-mdlm-0" in t and "commit abc1234" in t
    assert "mdlm-4-16-0.5-easy-0" not in t  # not the T = 0.5 cell
    assert any("paper's reported number" in x for x in titles)
    assert any("train-mdlm-1" in x and "commit abc1234" in x for x in titles)


def test_store_strings_are_escaped(tmp_path):
    quickstart_like_store(tmp_path, hostile=HOSTILE)
    assert main(["--results-dir", str(tmp_path)]) == 0
    html = (tmp_path / "report" / "index.html").read_text()
    assert HOSTILE not in html and "<img src=x" not in html
    escaped = "&lt;img src=x onerror=&#34;document.title=&#39;pwned&#39;&#34;&gt;&amp;amp;"
    assert html.count(escaped) > 10  # tables, the training runs, the header's sweeps
    assert f"<dt>sweeps</dt><dd><code>{escaped}</code>" in html


def _program_and_frontier_store(root: Path) -> Path:
    """A synthetic store of a program task (GSM8K's stand-in, with bootstrap CIs at two NFEs
    and temperatures) and a frontier task (OWT), sample rows only."""
    from baselines.ar import AR
    from baselines.mdlm import MDLM
    from bench.data.owt.task import OWTTask
    from bench.data.program.arith import ArithTask
    from sflm.method import SFLM

    s = Store(root)
    k = 0
    for cls, variant, dec, nfes in (
        (AR, "base", "greedy", (64,)),
        (MDLM, "base", "ancestral", (8, 32)),
        (SFLM, "trunc-adaptive", "exact", (8, 32)),
        (SFLM, "trunc-adaptive", "top1", (8, 32)),
    ):
        for nfe in nfes:
            for t in (1.0, 0.1):
                k += 1
                v = 0.2 + 0.01 * k
                s.write_cell(
                    f"p{k}",
                    [
                        {
                            "task": ArithTask.name,
                            "method": cls.name,
                            "variant": variant,
                            "decoding": dec,
                            "kind": "sample",
                            "subset": "test",
                            "metric": "accuracy",
                            "value": v,
                            "ci_low": v - 0.05,
                            "ci_high": v + 0.05,
                            "n": 128,
                            "nfe": nfe,
                            "temperature": t,
                            "train_steps": 100,
                            "seed": 0,
                            **sample_columns(ArithTask, cls, dec, "test", "accuracy"),
                        }
                    ],
                )
    for nfe in (4, 8):
        for t in (0.7, 1.3):
            k += 1
            rows = []
            for m, v in (("gen_ppl", 300 * t), ("gen_ppl_pooled", 200 * t), ("entropy", 3 + t)):
                rows.append(
                    {
                        "task": "owt",
                        "method": "mdlm",
                        "variant": "base",
                        "decoding": "ancestral",
                        "kind": "sample",
                        "subset": "standin-x",
                        "metric": m,
                        "value": v,
                        "ci_low": 0.9 * v,
                        "ci_high": 1.1 * v,
                        "n": 8,
                        "nfe": nfe,
                        "temperature": t,
                        "train_steps": 20,
                        "seed": 0,
                        **sample_columns(OWTTask, MDLM, "ancestral", "standin-x", m),
                    }
                )
            s.write_cell(f"o{k}", rows)
    return root


def test_synthetic_store_with_paper_items(tmp_path):
    """Program and frontier tasks and ``--paper``: every table and figure on the page, each paper
    label with its ``--list`` status and what was missing."""
    _program_and_frontier_store(tmp_path)
    assert main(["--results-dir", str(tmp_path)]) == 0
    assert main(["--results-dir", str(tmp_path), "--paper", "--mc-trials", "200"]) == 0
    out = tmp_path / "report"
    assert (out / "paper").is_dir() and any((out / "paper").glob("*.md"))
    check_page(out)
    html = (out / "index.html").read_text()
    from bench.report import renderers

    for label, a in renderers.paper_artifacts().items():
        assert f'id="f-{label}"' in html, label
        status = a.status(__import__("bench.results", fromlist=["read"]).read(tmp_path))[0]
        assert f">{status}</span>" in html, (label, status)
    # a partial or missing item lists what it lacks
    assert "missing (" in html
    # the frontier's and the program kind's own tables are on the page
    assert 'id="f-owt_frontier-md"' in html and "Gen. PPL at the data" in html
    assert "Accuracy (%) with 95 % bootstrap CI" in html


def test_no_html_flag_and_open(tmp_path, monkeypatch, capsys):
    quickstart_like_store(tmp_path)
    out = tmp_path / "report"
    assert main(["--results-dir", str(tmp_path), "--no-html"]) == 0
    assert (out / "sudoku.md").is_file() and not (out / "index.html").exists()

    opened = []

    class Browser:
        def open(self, uri):
            opened.append(uri)
            return True

    monkeypatch.setattr(webbrowser, "get", lambda *a: Browser())
    assert main(["--results-dir", str(tmp_path), "--open"]) == 0
    assert opened == [(out / "index.html").resolve().as_uri()]

    def none(*a):
        raise webbrowser.Error("could not locate runnable browser")

    monkeypatch.setattr(webbrowser, "get", none)
    capsys.readouterr()
    assert main(["--results-dir", str(tmp_path), "--open"]) == 0  # never fails the report
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: no web browser found")


def test_report_files_are_written_with_their_data():
    """A report file is written once as data: its Markdown and the page's blocks are views of
    the same Doc, tables keep their values and sources, prose keeps code spans and links."""
    import json
    import tempfile

    import pandas as pd

    from bench.report.document import Doc, Table, entry_cells
    from bench.report.html.inline import inline

    t = Table(
        pd.DataFrame({"model": ["m", "n"], "easy": ["1.0", "2.0"], "easy (paper)": ["3", ""]}),
        [("c1", "c2"), ("c3",)],
        {(0, "easy"): ("c2",)},
        paper={"easy (paper)"},
        keys={"model"},
    )
    d = Doc(["# t: x", "", "Some `code` and [a link](b.md) <b>.", "", t, "", "- one", "- two `c`"])
    assert "| m | 1.0 | 3 |" in d.markdown()
    of = entry_cells(t.to_json())
    assert of(0, "easy") == ("c2",) and of(1, "easy") == ("c3",)
    assert of(0, "easy (paper)") == () and of(0, "model") == ()
    with tempfile.TemporaryDirectory() as tmp:
        path = d.write(Path(tmp) / "x.md")
        blocks = read_page_data(path)
        assert path.read_text() == d.markdown()
    assert [b["kind"] for b in blocks] == ["heading", "paragraph", "table", "list"]
    assert blocks[2]["sources"] == [["c1", "c2"], ["c3"]] and blocks[2]["rows"][1][1] == "2.0"
    assert json.dumps(blocks)  # plain data
    segs = inline(blocks[1]["text"])
    assert [s.kind for s in segs] == ["text", "code", "text", "link", "text"]
    assert segs[-1].text == " <b>."  # kept as text: the template escapes it
    with pytest.raises(ValueError):
        Table(pd.DataFrame({"a": [1, 2]}), [("c",)])  # a source list per row, or none


def test_figures_are_svg_too_and_reproducible(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report.figures import save_figure

    def draw(stem):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 1, 2], label="a")
        ax.legend()
        return save_figure(fig, tmp_path / stem)

    a, b = draw("a"), draw("b")
    assert [p.suffix for p in a] == [".svg", ".png", ".pdf"]
    assert a[0].read_text().lstrip().startswith("<?xml")
    assert a[0].read_bytes() == b[0].read_bytes() and a[2].read_bytes() == b[2].read_bytes()


def test_token_length_bins_come_from_the_data():
    """2,000 lengths around 60 tokens: one bar per length (32-token bins gave two bars), every
    length in one bin, the paper's far-away median kept off the axis; lengths around 200 tokens:
    whole-token bins from numpy's ``auto`` width."""
    import pandas as pd

    from bench.data.program.length_figure import length_bins, token_length_figure
    from bench.data.program.length_stats import length_stats

    rng = np.random.default_rng(0)
    lengths = rng.normal(60, 8, 2000).round().astype(int)
    st = length_stats(lengths, 512)
    edges = length_bins(st["length_counts"]["values"], st["length_counts"]["counts"])
    width = edges[1] - edges[0]
    assert width == 1
    assert np.all(edges % 1 == 0.5) and edges[0] < lengths.min() and edges[-1] > lengths.max()
    counts, _ = np.histogram(lengths, bins=edges)
    assert counts.sum() == 2000 and (counts > 0).sum() >= 10
    stats = {"data": "test", "tokenizers": {"gpt2": st, "smollm": st}}
    marks = pd.DataFrame([{"panel": "GPT-2", "series": "median", "value": 204.0}])
    fig, data = token_length_figure(stats, marks)
    ax = fig.axes[0]
    assert ax.get_xlim()[1] < 120  # the histogram fills the axis; 204 is named in the legend
    assert any("204 (off the axis, right)" in t.get_text() for t in ax.get_legend().get_texts())
    assert {d["bin_width"] for d in data if d["kind"] == "ours"} == {float(width)}
    # lengths spanning many tokens (TinyGSM's ~200): wider whole-token bins, still dozens
    wide = rng.normal(200, 40, 2000).round().astype(int)
    v, c = np.unique(wide, return_counts=True)
    edges = length_bins(v, c)
    assert 2 <= edges[1] - edges[0] <= 16 and np.all(edges % 1 == 0.5)
    assert 15 <= len(edges) - 1 <= 120 and np.histogram(wide, edges)[0].sum() == 2000
    with pytest.raises(ValueError):
        length_bins([], [])


def test_provenance_follows_the_tables_data(tmp_path):
    """The program table under ``T = 0.1``: each NFE column names that NFE's cell at T = 0.1,
    the ``length`` column the autoregressive cell (at its own NFE). Read from the page data the
    report wrote: no label or header is matched to find them (the differences tables' rows, each
    naming both models' cells, are walked by ``check_page``)."""
    from bench.report.html.provenance import Sources
    from bench.results import read

    _program_and_frontier_store(tmp_path)
    assert main(["--results-dir", str(tmp_path), "--no-html"]) == 0
    out = tmp_path / "report"
    res = Sources(read(tmp_path))

    def ids(p):
        return [s["cell_id"] for s in p.sources]

    blocks = read_page_data(out / "arith_standin.md")
    heads = [b for b in blocks if b["kind"] == "heading"]
    tables = [b for b in blocks if b["kind"] == "table"]
    at01 = next(
        t for h, t in zip([b for b in blocks], blocks[1:])
        if h["kind"] == "heading" and h["text"] == "T = 0.1" and t["kind"] == "table"
    )  # fmt: skip
    assert heads and tables
    rows = {r[0]: i for i, r in enumerate(at01["rows"])}
    entry = res.entries(at01)
    i, j = rows["mdlm (ancestral)"], rows["ar (greedy)"]
    assert ids(entry(i, "NFE 8")) == ["p4"]
    assert ids(entry(i, "NFE 32")) == ["p6"]
    assert ids(res.row(at01, i)) == ["p4", "p6"]
    assert ids(entry(j, "length")) == ["p2"]
    assert ids(entry(i, "model")) == []
    p = entry(j, "length")
    assert "1 seed(s) x 128 items" in p.summary()
