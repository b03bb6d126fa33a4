"""What a *model* is in the report: a training recipe (the train cell's identity without the
seed, the rows' ``recipe`` column) under one variant name and decoding.

Two recipes of one method and variant in one store (a 100-step and an 800-step run into the same
results folder) are two models: every table, figure, seed pool and paired difference keys on the
``model`` column this module adds, never on method + variant alone. The label says what differs
between the recipes of one (task, method, variant): the one setting that differs
(``mdlm [800 steps] (ancestral)``), else the sweep that ran it, else the recipe's short hash.

Rows written before the ``recipe`` column existed get a recipe from what they do carry (backbone,
training steps, checkpoint, task protocol); where exactly one recorded recipe matches those, they
join it (a store extended with new seeds by a newer version stays one model).
"""

from __future__ import annotations

import hashlib
import json

import pandas as pd

#: the columns a row without ``recipe`` is told apart by (what every row has carried)
_FALLBACK = ("backbone", "train_steps", "checkpoint", "task_protocol")
#: how one differing setting reads in a label (flattened recipe key -> text of its value)
_SAY = {
    "train.steps": lambda v: f"{v} steps",
    "train_steps": lambda v: f"{v} steps",
    "backbone.size": str,
    "backbone": str,
    "train.lr": lambda v: f"lr {v:g}" if isinstance(v, (int, float)) else f"lr {v}",
    "train.batch_size": lambda v: f"batch {v}",
    "joint_subsets": lambda v: "one model for all subsets" if v else "one model per subset",
}


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = json.dumps(v, sort_keys=True) if isinstance(v, list) else v
    return out


def _fallback(r) -> str:
    vals = {}
    for c in _FALLBACK:
        v = r.get(c)
        if v is None or (not isinstance(v, str) and pd.isna(v)):
            continue
        vals[c] = int(v) if c == "train_steps" else v
    return json.dumps(vals, sort_keys=True, default=str)


def _recipes(df: pd.DataFrame) -> pd.Series:
    """The recipe JSON of every row: its own; else its train cell's (rows of one cell written by
    two versions); else the one recorded recipe of its (task, method) with the same fallback
    fields; else the fallback fields themselves."""
    own = df["recipe"] if "recipe" in df else pd.Series(None, index=df.index, dtype=object)
    own = own.where(own.map(lambda v: isinstance(v, str) and v != ""), None)
    if "train_cell" in df:
        by_cell = own.groupby(df["train_cell"]).agg(
            lambda s: s.dropna().iloc[0] if s.notna().any() else None
        )
        fill = df["train_cell"].map(by_cell)
        own = own.where(own.notna(), fill)
    out = own.copy()
    missing = own.isna()
    if not missing.any():  # every row recorded its recipe (stores written since the column)
        return out
    fb = pd.Series([_fallback(r) for r in df.to_dict("records")], index=df.index, dtype=object)
    known = df[~missing].assign(_fb=fb[~missing], _r=own[~missing])
    match = {}
    for key, g in known.groupby(["task", "method", "_fb"], dropna=False):
        if g["_r"].nunique() == 1:
            match[key] = g["_r"].iloc[0]
    keys = zip(df.loc[missing, "task"], df.loc[missing, "method"], fb[missing])
    out[missing] = [match.get(k, json.dumps({"recorded": json.loads(k[2])})) for k in keys]
    return out


#: at most this many differing settings are named in a label (more: the sweep, else the recipe id)
_MAX_NAMED = 3


def _say(k: str, v) -> str:
    """One setting of a recipe as label text: ``800 steps``, ``alpha_max star``, ``no top_k``."""
    short = k.removeprefix("recorded.")
    if v is None:
        return f"no {short.split('.')[-1]}"
    return _SAY.get(short, lambda v: f"{short.split('.')[-1]} {v}")(v)


def _checkpoint_names(checkpoints: dict[str, str]) -> dict[str, str]:
    """recipe -> the file or catalogue name of its imported checkpoint (``checkpoint`` column:
    ``<source>@<sha256[:12]>``), with the digest only where two files share a name."""
    names = {
        r: str(c).rsplit("@", 1)[0].rstrip("/").rsplit("/", 1)[-1] for r, c in checkpoints.items()
    }
    twice = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {
        r: (str(checkpoints[r]).rsplit("/", 1)[-1] if n in twice else n) for r, n in names.items()
    }


def _suffixes(
    recipes: dict[str, str], sweeps: dict[str, str], checkpoints: dict[str, str] | None = None
) -> dict[str, str]:
    """recipe -> the text that tells it from the other recipes of its (task, method, variant):
    imported files by their names; the one setting that differs; several: the sweeps that ran
    them when those differ, else the settings themselves (up to three); else the recipe id (the
    ``recipe_id`` column of results.csv)."""
    flat = {r: _flat(json.loads(r)) for r in recipes}
    keys = sorted({k for f in flat.values() for k in f})
    differ = [
        k for k in keys if len({json.dumps(f.get(k), default=str) for f in flat.values()}) > 1
    ]
    ckpt = {r: c for r, c in (checkpoints or {}).items() if isinstance(c, str) and c}
    if "import" in differ and len(ckpt) == len(recipes):
        names = _checkpoint_names(ckpt)
        if len(set(names.values())) == len(names):
            return names
    if len(differ) == 1:
        return {r: _say(differ[0], f.get(differ[0])) for r, f in flat.items()}
    names = {r: sweeps.get(r, "") for r in recipes}
    if all(names.values()) and len(set(names.values())) == len(names):
        return names
    named = [k for k in differ if k != "import"]
    if 0 < len(named) <= _MAX_NAMED:
        said = {r: ", ".join(_say(k, f.get(k)) for k in named) for r, f in flat.items()}
        if len(set(said.values())) == len(said):
            return said
    return {r: f"recipe {recipes[r]}" for r in recipes}


def flat_recipe(recipe: str) -> dict:
    """A recipe's settings as ``{"train.steps": 600, "task.grid": 4, ...}`` (lists as JSON)."""
    return _flat(json.loads(recipe))


def recipe_id(recipe: str) -> str:
    """8 hex digits naming a recipe (its JSON's sha256)."""
    return hashlib.sha256(recipe.encode()).hexdigest()[:8]


def base_label(method, variant, decoding=None, suffix: str = "") -> str:
    """``method[/variant] [suffix] (decoding)``."""
    label = method if variant in ("base", "", None) or pd.isna(variant) else f"{method}/{variant}"
    if suffix:
        label = f"{label} [{suffix}]"
    return f"{label} ({decoding})" if isinstance(decoding, str) and decoding else label


def scorer_text(scorer) -> str:
    """A re-scored row's ``scorer`` column (canonical JSON of its task-option overrides) as
    ``grader=reference``; "" for a row scored as it was sampled."""
    if not isinstance(scorer, str) or not scorer:
        return ""
    try:
        opts = json.loads(scorer)
    except ValueError:
        return scorer
    return (
        ", ".join(f"{k}={v}" for k, v in sorted(opts.items())) if isinstance(opts, dict) else scorer
    )


def _evaluation(df: pd.DataFrame) -> pd.Series:
    """Per row: how its evaluation differs from the sampled cell's full one ("" when it does not):
    ``scored grader=reference`` (:mod:`bench.rescore`), ``first 32 items`` (``item_limit``)."""
    out = []
    sc = df["scorer"] if "scorer" in df else pd.Series(None, index=df.index)
    lim = df["item_limit"] if "item_limit" in df else pd.Series(None, index=df.index)
    kind = df["kind"] if "kind" in df else pd.Series("sample", index=df.index)
    for a, k, kd in zip(sc, lim, kind):
        parts = [f"scored {scorer_text(a)}"] if scorer_text(a) else []
        # a sample cell on the first K items only (a likelihood cell's sequences are its setting)
        if kd == "sample" and k is not None and not pd.isna(k) and int(k) > 0:
            parts.append(f"first {int(k)} items")
        out.append("; ".join(parts))
    return pd.Series(out, index=df.index, dtype=object)


def with_models(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``recipe`` filled, ``recipe_id`` and ``model`` (the label tables and figures
    group by: one per (recipe, variant, decoding)) and ``model_base`` (the same without the
    decoding: one per trained model and variant). Idempotent; labels are computed over all of
    ``df``'s rows, so one store gives one label per model in every table."""
    if not len(df):
        return df.assign(recipe_id=[], model=[], model_base=[])
    df = df.copy()
    df["recipe"] = _recipes(df).astype(object)
    df["recipe_id"] = df["recipe"].map(recipe_id)
    suffix = pd.Series("", index=df.index, dtype=object)
    variant = df["variant"].fillna("") if "variant" in df else pd.Series("", index=df.index)
    for _, g in df.groupby([df["task"], df["method"], variant], dropna=False, sort=False):
        recipes = dict(zip(g["recipe"], g["recipe_id"]))
        if len(recipes) < 2:
            continue
        sweeps = (
            g.groupby("recipe")["sweep"].agg(lambda s: s.mode().iloc[0] if s.notna().any() else "")
            if "sweep" in g
            else {}
        )
        ckpts = (
            g.groupby("recipe")["checkpoint"].agg(
                lambda s: next((v for v in s if isinstance(v, str) and v), "")
            )
            if "checkpoint" in g
            else {}
        )
        say = _suffixes(recipes, dict(sweeps), dict(ckpts))
        suffix[g.index] = g["recipe"].map(say)
    # rows scored otherwise (bench.rescore) or on the first K items only (bench.eval --limit)
    # are other evaluations of the model: apart in every table, named in the label
    suffix = suffix.combine(_evaluation(df), lambda a, b: "; ".join(x for x in (a, b) if x))
    dec = df["decoding"] if "decoding" in df else pd.Series(None, index=df.index)
    df["model_base"] = [
        base_label(m, v, None, s)
        for m, v, s in zip(df["method"], df.get("variant", variant), suffix)
    ]
    df["model"] = [
        base_label(m, v, d, s)
        for m, v, d, s in zip(df["method"], df.get("variant", variant), dec, suffix)
    ]
    return df
