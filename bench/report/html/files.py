"""What the report folder holds, grouped for the page: Markdown tables, CSV files and figures
(one entry per figure stem with every format written), each assigned to its task or to the
store-wide part.

A file belongs to task ``t`` when its stem is ``t`` or starts with ``t_`` (the longest task
name wins, so ``owt_frontier.md`` is OWT's even when a task ``owt_x`` exists). Temporary files
of atomic writes (dot files) and the page itself are left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

PAGE = "index.html"


@dataclass
class Figure:
    """One figure: its stem (``sudoku_training_curves``) and path per format, relative to the
    page (``{"png": "paper/x.png", ...}``)."""

    stem: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def img(self) -> str:
        """The image the page shows when SVG is not used: PNG, else SVG."""
        return self.files.get("png") or self.files.get("svg", "")


@dataclass
class Group:
    """The files of one task (or of the store-wide part): Markdown, CSV, figures, others."""

    markdown: list[str] = field(default_factory=list)
    csv: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def all_files(self) -> list[str]:
        out = [*self.markdown, *self.csv, *self.other]
        for f in self.figures:
            out += list(f.files.values())
        return out


def _listing(folder: Path, prefix: str) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(
        prefix + p.name
        for p in folder.iterdir()
        if p.is_file() and not p.name.startswith(".") and not (prefix == "" and p.name == PAGE)
    )


def group(names: list[str], owners: list[str]) -> dict[str, Group]:
    """``names`` (paths relative to the page) by owner: a task of ``owners`` or ``""``
    (store-wide)."""
    by_len = sorted(owners, key=len, reverse=True)
    out: dict[str, Group] = {t: Group() for t in ["", *owners]}
    figs: dict[tuple[str, str], Figure] = {}
    for name in names:
        base = name.rsplit("/", 1)[-1]
        stem, _, ext = base.rpartition(".")
        owner = next((t for t in by_len if stem == t or stem.startswith(t + "_")), "")
        g = out[owner]
        # a figure: an SVG or PNG, or a PDF beside one (a lone PDF is a file to download)
        image = ext in ("svg", "png") or (ext == "pdf" and _has_image(names, name))
        if image:
            key = (owner, name[: -len(ext) - 1])
            if key not in figs:
                figs[key] = Figure(stem)
                g.figures.append(figs[key])
            figs[key].files[ext] = name
        elif ext == "md":
            g.markdown.append(name)
        elif ext == "csv":
            g.csv.append(name)
        else:
            g.other.append(name)
    return out


def _has_image(names: list[str], pdf: str) -> bool:
    stem = pdf[: -len(".pdf")]
    return f"{stem}.png" in names or f"{stem}.svg" in names


def inventory(out: Path) -> tuple[list[str], list[str]]:
    """(files of the report folder, files of its ``paper/`` folder), relative to ``out``."""
    return _listing(out, ""), _listing(out / "paper", "paper/")
