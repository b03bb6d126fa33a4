"""A method's reference format is its own declaration (``Method.reference``): the importer, the
exporter and the planner ask the registered methods, so a method added to the registry (a
plug-in) reads, converts and exports its families like a built-in one, and no code of
bench.checkpoints or bench.plan names a method."""

from __future__ import annotations

import ast
from pathlib import Path

import checkpoints_ref as R
import pytest
import torch

from baselines.mdlm import MDLM, MDLMReference
from bench import registry
from bench.checkpoints import CheckpointError, families, load
from bench.reference_format import ReferenceFamily, ReferenceFormat

ROOT = Path(__file__).resolve().parents[3]


class _PluginReference(MDLMReference):
    families = (
        ReferenceFamily(
            "mdlm_plugin",
            model_type="dit",
            algo="mdlm_plugin",
            algo_names=("mdlm_plugin",),
            requires=("backbone.vocab_embed.embedding", "backbone.sigma_map.mlp.0.weight"),
            mask_rows=1,
            kept_mask_rows=(1, 1),
            vocab_in_hparams=True,
        ),
    )
    pad_is_class = True

    def options_from(self, ref, family):
        opts, choices, notes = super().options_from(ref, family)
        return opts, choices, [*notes, "read by the plug-in"]


class _PluginMDLM(MDLM):
    name = "mdlm_plugin"
    reference = _PluginReference()


class _NoFormat(MDLM):
    name = "mdlm_noformat"
    reference = None


@pytest.fixture
def plugin(monkeypatch):
    """The two methods above in the registry (as an installed package's would be)."""
    items = registry.METHODS._load()
    monkeypatch.setitem(items, _PluginMDLM.name, _PluginMDLM)
    monkeypatch.setitem(items, _NoFormat.name, _NoFormat)
    return items


def test_a_registered_method_reads_its_own_family(tmp_path, plugin):
    """A file whose keys several families fit is the family its algo name declares; the
    plug-in's hooks give the options and notes; the PAD rule is its ``pad_is_class``."""
    info = R.write_reference_checkpoint(
        tmp_path / "p.ckpt", "mdlm", config={"algo.name": "mdlm_plugin"}
    )
    assert "mdlm_plugin" in families.names()
    m = load(info["path"])
    assert m.family == "mdlm_plugin" and isinstance(m.method, _PluginMDLM)
    assert m.method.vocab_size == info["rows_in"] - 1  # the mask row kept, as MDLM's
    from bench.checkpoints import open_source

    sp = open_source(info["path"]).spec
    assert sp.method == "mdlm_plugin" and "read by the plug-in" in sp.notes
    assert families.pad_is_class("mdlm_plugin") and not families.pad_is_class("mdlm")
    # the built-in MDLM file is still MDLM's
    plain = R.write_reference_checkpoint(tmp_path / "m.ckpt", "mdlm")
    assert load(plain["path"]).family == "mdlm"


def test_a_family_claimed_twice_is_an_error(monkeypatch, plugin):
    class Twice(MDLM):
        name = "mdlm_twice"
        reference = MDLMReference()  # declares "mdlm" again

    monkeypatch.setitem(plugin, Twice.name, Twice)
    with pytest.raises(CheckpointError, match="'mdlm' is declared by both 'mdlm' and"):
        families.names()


def test_a_method_without_a_format_exports_nothing(tmp_path, plugin):
    from helpers import write_model_folder

    from bench.checkpoints.export import export

    folder, _, _ = write_model_folder(
        tmp_path / "f", "mdlm_noformat", {}, vocab=10, seq_len=8, steps=1, noise=0.0
    )
    with pytest.raises(CheckpointError, match="declares no reference checkpoint format"):
        export(folder, tmp_path / "x.ckpt")


def test_the_base_format_is_a_method_without_options():
    """The defaults: no options, choices or notes; no extra state or config."""
    f = ReferenceFormat()
    assert f.options_from(None, None) == ({}, {}, [])
    assert f.export_config(None, None) == {} and f.export_state(None, None) == {}
    assert f.describe(None) == {} and not f.pad_is_class


def _string_constants(path: Path) -> set[str]:
    """The string literals of a module's code (docstrings excluded)."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    }


def test_no_code_of_the_importer_or_the_planner_names_a_method():
    """Method and family names live with the methods (and in the catalogue of released files,
    which is data); bench/checkpoints and bench/plan.py ask the registry."""
    names = set(registry.METHODS) | set(families.names())
    names |= {f.algo for e in families.entries().values() for f in [e.family]}
    files = [p for p in (ROOT / "bench" / "checkpoints").glob("*.py") if p.name != "catalogue.py"]
    files.append(ROOT / "bench" / "plan.py")
    found = {
        p.name: sorted(_string_constants(p) & names) for p in files if _string_constants(p) & names
    }
    # the one exception: the FLM repository's name as a config schema (reference.SCHEMAS)
    assert found == {"reference.py": ["flm"]}, found


def test_torch_state_of_an_exported_file_is_the_method_declaration(tmp_path):
    """The exporter adds the buffers the method declares (CANDI's tables) and nothing else."""
    from helpers import write_model_folder

    from bench.checkpoints.export import export

    folder, m, _ = write_model_folder(
        tmp_path / "c", "candi", {}, vocab=10, seq_len=8, steps=1, noise=0.0
    )
    ck = torch.load(export(folder, tmp_path / "c.ckpt"), weights_only=False)
    extra = {k for k in ck["state_dict"] if not k.startswith("backbone.")}
    assert extra == set(m.reference.export_state(m.reference.families[0], m))


def test_families_with_the_same_keys_need_the_algo_name_or_family(tmp_path):
    """MDLM, Duo and FLM files have the same keys: without a readable algo name the error names
    the families the keys fit, and a forced family reads it."""
    info = R.write_reference_checkpoint(tmp_path / "x.ckpt", "duo", config={"algo.name": None})
    with pytest.raises(CheckpointError, match="mdlm, duo, flm checkpoints have the same keys"):
        load(info["path"])
    assert load(info["path"], family="duo").family == "duo"
