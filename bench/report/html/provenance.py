"""Where each number of a report table comes from: the store cells behind a table row or cell.

The page reads the tables the report wrote (:mod:`bench.report.html.markdown`); this module
finds, for each row and each cell of such a table, the store rows it was made from, by the keys
the table shows (model, subset, NFE, temperature, seed; training tables: task, method, variant,
backbone, subset, seed). It selects rows, it computes no number: a cell's provenance is the cell
ids, config hashes, commits and seeds x items of the rows selected. A column marked ``(paper)``
is the paper's reported number (``results/paper``), not a store cell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from bench.report.common import flag, headline_cells, model_label, rows
from bench.report.paper import paper_numbers
from bench.report.training_cost import PAPER_TASKS, paper_cost

#: columns shown for each source cell, in order
SOURCE_FIELDS = (
    "cell_id",
    "kind",
    "config_hash",
    "git_sha",
    "subset",
    "nfe",
    "temperature",
    "seed",
    "n",
)
_TRAIN_KEYS = ("task", "model", "method", "variant", "backbone", "subset", "seed")
_SEED = re.compile(r"^(.*?)\s+seed\s+(\d+)$")
_NFE_COL = re.compile(r"^nfe\s+(\d+)$", re.I)
_T_HEADING = re.compile(r"\bT\s*=\s*([0-9.]+)")
_LENGTH = ", NFE = length"  # a model name's suffix where its NFE is the generated length


def _norm(s) -> str:
    """A model name without case, brackets or repeated spaces ("mdlm (ancestral)" and
    "mdlm ancestral" are one key)."""
    return re.sub(r"[()\s]+", " ", str(s).lower()).strip()


def _nodec(r) -> str:
    """The model's name without its decoding (the label of its recipe and variant)."""
    m = r.get("model_base")
    if isinstance(m, str) and m:
        return m
    return r["method"] if r["variant"] in ("base", "", None) else f"{r['method']}/{r['variant']}"


@dataclass(frozen=True)
class Provenance:
    """The store cells behind one table entry (``sources``: one dict per cell, keys
    :data:`SOURCE_FIELDS`), or the paper's number (``paper``: where it is from)."""

    sources: tuple[dict, ...] = ()
    paper: str = ""

    def summary(self) -> str:
        """One line for a tooltip: seeds x items, cells, config hashes, commits."""
        if self.paper:
            return f"the paper's reported number ({self.paper})"
        if not self.sources:
            return ""
        s = self.sources
        seeds = sorted({str(x["seed"]) for x in s if x["seed"] != ""})
        items = sorted({str(x["n"]) for x in s if x["n"] != ""})
        unit = "steps" if all(x["kind"] == "train" for x in s) else "items"  # a train row's n
        parts = [
            f"{len(s)} cell(s): {len(seeds) or 1} seed(s) x {'/'.join(items) or '?'} {unit}",
            "cell " + ", ".join(_uniq(x["cell_id"] for x in s)),
            "config " + ", ".join(_uniq(x["config_hash"] for x in s)),
            "commit " + ", ".join(_uniq(x["git_sha"] for x in s)),
        ]
        return "; ".join(parts)


def _uniq(xs) -> list[str]:
    return list(dict.fromkeys(str(x) for x in xs if str(x)))


def _text(v) -> str:
    if v is None or (not isinstance(v, str) and pd.isna(v)):
        return ""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return f"{v:g}" if isinstance(v, float) else str(v)


def _floats(text: str) -> set[float]:
    out = set()
    for x in re.findall(r"-?\d+(?:\.\d+)?", text):
        out.add(float(x))
    return out


class Resolver:
    """Store rows behind the report's tables (one per page; per-task rows computed once)."""

    def __init__(self, df: pd.DataFrame):
        self.all = rows(df, kind=None)
        # one source record per cell, in a stable order (subset, NFE, T, seed, cell id)
        cells = self.all.drop_duplicates("cell_id").sort_values(
            ["subset", "nfe", "temperature", "seed", "cell_id"], na_position="first"
        )
        self._cells = {
            r["cell_id"]: {k: _text(r.get(k)) for k in SOURCE_FIELDS}
            for r in cells.to_dict("records")
        }
        self._order = {c: i for i, c in enumerate(self._cells)}
        self._tasks: dict[str, tuple[pd.DataFrame, pd.DataFrame]] = {}
        self._labels: dict[str, dict[str, tuple[str, list[str], str]]] = {}

    def _sources(self, g: pd.DataFrame) -> tuple[dict, ...]:
        """The source records of the cells of ``g``, once each."""
        ids = sorted(set(g["cell_id"]), key=self._order.__getitem__)
        return tuple(self._cells[c] for c in ids)

    # ------------------------------------------------------------------ per task
    def _task(self, task: str) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(every sample row of ``task``, its headline cells), each with model keys."""
        if task not in self._tasks:
            s = self.all[(self.all["task"] == task) & (self.all["kind"] == "sample")]
            if len(s):
                s = s.assign(
                    _full=[_norm(model_label(r)) for _, r in s.iterrows()],
                    _nodec=[_norm(_nodec(r)) for _, r in s.iterrows()],
                )
                best = headline_cells(s.drop(columns=["_full", "_nodec"]))
                best = s[s["cell_id"].isin(set(best["cell_id"]))]
            else:
                best = s
            self._tasks[task] = (s, best)
        return self._tasks[task]

    def _paper_labels(self, task: str) -> dict[str, tuple[str, list[str], str]]:
        """The paper's row labels -> (method, variants, decoding): ``results/paper/<task>.csv``
        and the training-cost table's."""
        if task not in self._labels:
            found: dict[str, tuple[str, list[str], str]] = {}
            p = paper_numbers(task)
            if p is not None and "label" in p:
                for _, r in p.drop_duplicates("label").iterrows():
                    found[_norm(r["label"])] = (r["method"], [r["variant"]], r["decoding"])
            c = paper_cost()
            for _, r in c.drop_duplicates("label").iterrows():
                found.setdefault(_norm(r["label"]), (r["method"], str(r["variant"]).split("|"), ""))
            self._labels[task] = found
        return self._labels[task]

    def _model(self, s: pd.DataFrame, task: str, name: str) -> pd.DataFrame:
        """The rows of ``s`` of the model a table names (our label, with or without decoding,
        or one of the paper's labels)."""
        key = _norm(name)
        hit = s[s["_full"] == key]
        if len(hit):
            return hit
        hit = s[s["_nodec"] == key]
        if not len(hit):
            p = self._paper_labels(task).get(key)
            if p is None:
                return hit
            method, variants, decoding = p
            g = s[(s["method"] == method) & s["variant"].isin(variants)]
            if len(g):
                g = g[g["variant"] == next(v for v in variants if v in set(g["variant"]))]
            if decoding:
                return g[g["decoding"] == decoding]
            hit = g
        if hit["decoding"].nunique() > 1:  # the method's default decoding, as the tables pick
            d = hit[flag(hit["default_decoding"])]
            hit = d if len(d) else hit[hit["decoding"] == hit["decoding"].min()]
        return hit

    # ------------------------------------------------------------------ tables
    def table(
        self, task: str | None, heading: str, header: list[str], body: list[list[str]]
    ) -> list[tuple[Provenance, list[Provenance]]]:
        """Per row of a table under ``heading`` (of ``task``'s page, None: store-wide): the
        row's provenance and each cell's. Entries the store cannot be matched to are empty."""
        low = [h.lower() for h in header]
        empty = [(Provenance(), [Provenance()] * len(header)) for _ in body]
        if {"method", "variant"} <= set(low) or {"model", "backbone", "seed"} <= set(low):
            return [self._train_row(header, r) for r in body]
        if "model" in low and any(
            h.startswith(("steps/s", "duration", "device-hours")) for h in low
        ):
            return [self._cost_row(header, r) for r in body]
        names = [c for c in ("model", "a", "b") if c in low]  # a / b: paired differences
        if task is None or names not in (["model"], ["a", "b"]):
            return empty
        s, best = self._task(task)
        if not len(s):
            return empty
        keyed = {"nfe", "t", "temperature"} & set(low) or any(_NFE_COL.match(h) for h in low)
        base = s if keyed else best
        m = _T_HEADING.search(heading)
        t_heading = float(m.group(1)) if m else None
        subsets = set(s["subset"].dropna().astype(str))
        out = []
        for r in body:
            row = dict(zip(low, r))
            parts = [self._row_model(base, task, row, row[c], t_heading) for c in names]
            g = pd.concat(parts) if len(parts) > 1 else parts[0]
            if row.get("subset"):
                g = g[g["subset"].astype(str) == row["subset"]]
            cells = [self._cell(task, g, h, subsets, text) for h, text in zip(header, r)]
            out.append((Provenance(self._sources(g)), cells))
        return out

    def _row_model(self, base, task: str, row: dict, name: str, t_heading) -> pd.DataFrame:
        """The rows of the model ``name`` at the row's seed, NFE and temperature (a model named
        with ``, NFE = length`` ignores the NFE; a temperature-free decoding, sampled once,
        stands in every temperature's row)."""
        seed, length = None, name.endswith(_LENGTH)
        name = name[: -len(_LENGTH)] if length else name
        if sm := _SEED.match(name):
            name, seed = sm.group(1), int(sm.group(2))
        g = self._model(base, task, name)
        if seed is not None:
            g = g[g["seed"].fillna(0).astype(int) == seed]
        if row.get("nfe") and not length:
            g = g[g["nfe"].astype(float).isin(_floats(row["nfe"]))]
        temps = [_floats(row[c]) for c in ("t", "temperature") if row.get(c)]
        if t_heading is not None:
            temps.append({t_heading})
        for t in temps:
            at = g[g["temperature"].astype(float).isin(t)]
            g = at if len(at) else g[flag(g["temperature_free"])]
        return g

    def _cell(self, task, g: pd.DataFrame, head: str, subsets: set[str], text: str) -> Provenance:
        if not text.strip():
            return Provenance()
        h = head.strip()
        if h.endswith("(paper)"):
            return Provenance(paper=f"results/paper/{task}.csv")
        sub = re.sub(r"\s*\((ours)\)$", "", h)
        if sub in subsets:
            return Provenance(self._sources(g[g["subset"].astype(str) == sub]))
        if m := _NFE_COL.match(h):
            return Provenance(
                self._sources(g[(g["nfe"] == int(m.group(1))) & ~flag(g["nfe_is_length"])])
            )
        if h.lower() == "length":
            return Provenance(self._sources(g[flag(g["nfe_is_length"])]))
        if h.lower() in (
            "model",
            "a",
            "b",
            "subset",
            "nfe",
            "t",
            "temperature",
            "train steps",
            "paper row",
        ):
            return Provenance()
        return Provenance(self._sources(g))  # a value of the whole row (e.g. a frontier cell)

    def _train_rows(self) -> pd.DataFrame:
        return self.all[self.all["kind"] == "train"]

    def _train_row(self, header: list[str], r: list[str]) -> tuple[Provenance, list[Provenance]]:
        g = self._train_rows()
        for k, v in zip(header, r):
            if k in _TRAIN_KEYS and len(g):
                col = g["model_base" if k == "model" else k]
                if k == "seed":
                    col = col.fillna(0).astype(int).astype(str)
                g = g[col.astype(str) == v]
        p = Provenance(self._sources(g))
        return p, [p if k not in _TRAIN_KEYS and v else Provenance() for k, v in zip(header, r)]

    def _cost_row(self, header: list[str], r: list[str]) -> tuple[Provenance, list[Provenance]]:
        t = self._train_rows()
        label = re.sub(r"\s*\(not in the paper's table\)$", "", r[0])
        lab = self._paper_labels("").get(_norm(label))
        if lab is not None:
            method, variants, _ = lab
            g = t[(t["method"] == method) & t["variant"].isin(variants)]
        else:
            g = t[[_norm(_nodec(x)) == _norm(label) for _, x in t.iterrows()]] if len(t) else t
        tasks = sorted(set(t["task"].dropna().astype(str)), key=len, reverse=True)
        paper_of = {v.lower(): k for k, v in PAPER_TASKS.items()}
        cells = []
        for h, v in zip(header, r):
            if not v or h == header[0]:
                cells.append(Provenance())
                continue
            if h.endswith("(paper)"):
                cells.append(Provenance(paper="results/paper/training_cost.csv"))
                continue
            m = re.search(r"\[ours: ([^\]]+)\]", h)
            task = m.group(1) if m else next((x for x in tasks if h.endswith(" " + x)), None)
            if task is None:
                task = paper_of.get(h.split()[-1].lower())
            gt = g[g["task"] == task]
            if len(gt["variant"].unique()) > 1 and lab is not None:  # the first variant present
                gt = gt[gt["variant"] == next(x for x in lab[1] if x in set(gt["variant"]))]
            cells.append(Provenance(self._sources(gt)))
        used = {s["cell_id"] for c in cells for s in c.sources}
        return Provenance(self._sources(g[g["cell_id"].isin(used)])), cells
