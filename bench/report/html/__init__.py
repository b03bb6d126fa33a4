"""``<out>/index.html``: the report as one self-contained page (works from the file system,
offline: the style sheet and script are inline, the figures are the folder's own files linked
relatively).

:func:`write_page` renders :mod:`~bench.report.html.page`'s content with the Jinja2 templates
of ``bench/report/templates`` (autoescape on: every string from the store or the Markdown is
escaped); :func:`open_page` opens it in the default browser (``--open``).
"""

from __future__ import annotations

import posixpath
import sys
import webbrowser
from importlib import resources
from pathlib import Path

import pandas as pd

from bench import atomic
from bench.report.html.files import PAGE
from bench.report.html.page import anchor, context

__all__ = ["PAGE", "finish", "open_if_asked", "open_page", "render", "write_page"]


def _environment():
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("bench.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def _asset(name: str) -> str:
    return (resources.files("bench.report") / "templates" / name).read_text(encoding="utf-8")


def render(out: Path, df: pd.DataFrame, results_dir: Path) -> str:
    """The page's HTML for the report folder ``out`` and the store ``df``."""
    from markupsafe import Markup

    ctx = context(out, df, results_dir)
    files = set(_all_files(out))
    docs = {d.name for t in ctx["tasks"] for d in t["docs"]}
    docs |= {d.name for d in ctx["wide_docs"]} | {d.name for d in ctx["paper_rest_docs"]}
    docs |= {d.name for p in ctx["paper"] for d in p.docs}

    def link(doc_name: str, href: str) -> str:
        """Where a Markdown link of ``doc_name`` points on the page ("" for none: the link
        target is not in the folder)."""
        if "://" in href or href.startswith("#"):
            return ""
        target = posixpath.normpath(posixpath.join(posixpath.dirname(doc_name), href))
        if target in docs:
            return "#" + anchor(target)
        return target if target in files else ""

    env = _environment()
    return env.get_template("report.html.j2").render(
        **ctx,
        css=Markup(_asset("report.css")),
        js=Markup(_asset("report.js")),
        link=link,
        anchor=anchor,
    )


def _all_files(out: Path) -> list[str]:
    from bench.report.html.files import inventory

    top, paper = inventory(out)
    return [*top, *paper]


def write_page(out: Path, df: pd.DataFrame, results_dir: str | Path) -> Path:
    """Write ``out/index.html`` (atomically) from the files in ``out`` and the store ``df``."""
    html = render(Path(out), df, Path(results_dir))
    return atomic.write_text(Path(out) / PAGE, html)


def open_page(path: Path) -> bool:
    """Open ``path`` in the default browser; one line on stderr when there is none or it fails.
    Never raises (the report is written either way)."""
    uri = Path(path).resolve().as_uri()
    try:
        browser = webbrowser.get()
    except webbrowser.Error:
        print(f"note: no web browser found to open {uri}; open it yourself", file=sys.stderr)
        return False
    try:
        ok = browser.open(uri)
    except Exception as e:  # a browser that fails to start must not fail the report
        ok, why = False, f"{type(e).__name__}: {e}"
    else:
        why = "the browser did not start"
    if not ok:
        print(f"note: could not open {uri} in a browser ({why})", file=sys.stderr)
    return bool(ok)


def finish(args, out: Path, df: pd.DataFrame) -> list[Path]:
    """The report's page step: write ``out/index.html`` unless ``--no-html``; returns the files
    written (none with ``--no-html``)."""
    if getattr(args, "no_html", False):
        return []
    return [write_page(out, df, getattr(args, "results_dir", None) or "results")]


def open_if_asked(args, out: Path) -> None:
    """``--open``: open ``out/index.html`` (one line when there is no page or no browser)."""
    if not getattr(args, "open", False):
        return
    page = Path(out) / PAGE
    if page.is_file():
        open_page(page)
    else:
        print(f"note: --open: no page at {page} (written without --no-html)", file=sys.stderr)
