"""Where each number of a report table comes from, on the page: the store cells a table's row
or entry was built from (:class:`bench.report.document.Table` carries their ids), as records
of :data:`SOURCE_FIELDS` read from the store, or the paper's number, or what computed it.

It selects rows by cell id; it matches no label, header or heading text and computes no number.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bench.report.document import entry_cells

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


@dataclass(frozen=True)
class Provenance:
    """The store cells behind one table entry (``sources``: one dict per cell, keys
    :data:`SOURCE_FIELDS`), or the paper's number (``paper``: where it is from), or what
    computed it (``computed``: rows that come from no store cell)."""

    sources: tuple[dict, ...] = ()
    paper: str = ""
    computed: str = ""

    def summary(self) -> str:
        """One line for a tooltip: seeds x items, cells, config hashes, commits."""
        if self.paper:
            return f"the paper's reported number ({self.paper})"
        if not self.sources:
            return f"computed: {self.computed}" if self.computed else ""
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


class Sources:
    """The store's cells by id, as source records (one per cell, in a stable order)."""

    def __init__(self, df: pd.DataFrame):
        cells = df.drop_duplicates("cell_id") if len(df) else df
        if len(cells):
            cells = cells.sort_values(
                ["subset", "nfe", "temperature", "seed", "cell_id"], na_position="first"
            )
        self._cells = {
            r["cell_id"]: {k: _text(r.get(k)) for k in SOURCE_FIELDS}
            for r in cells.to_dict("records")
        }
        self._order = {c: i for i, c in enumerate(self._cells)}

    def of(self, cell_ids) -> tuple[dict, ...]:
        """The records of ``cell_ids`` the store holds, once each, in the stable order."""
        known = sorted({c for c in cell_ids if c in self._cells}, key=self._order.__getitem__)
        return tuple(self._cells[c] for c in known)

    def entries(self, table: dict):
        """For a table's page data (:meth:`bench.report.document.Table.to_json`):
        ``(row, column) -> Provenance`` of that entry (:func:`bench.report.document.entry_cells`;
        a paper column: the paper's number)."""
        cells, paper = entry_cells(table), set(table["paper"])
        computed = table.get("computed", "")

        def of(i: int, column: str) -> Provenance:
            if column in paper:
                return Provenance(paper="results/paper")
            return Provenance(self.of(cells(i, column)), computed=computed)

        return of

    def row(self, table: dict, i: int) -> Provenance:
        return Provenance(self.of(table["sources"][i]), computed=table.get("computed", ""))
