"""How a method's models map from and to the reference checkpoint format: the files of the S-FLM
paper's harness (FrankCCCCC/s-flm @ 18d586f), in which the paper released its models.

A method declares it in its own module, as its class attribute ``reference``
(:attr:`bench.method.Method.reference`): an instance of a :class:`ReferenceFormat` subclass that
lists the :class:`ReferenceFamily` values whose files hold one of its models and overrides the
hooks that differ from the defaults. :mod:`bench.checkpoints` reads the container (unpickling,
EMA list, key names, sizes, vocabulary rows, the catalogue of released files) and asks the
method, through the registry, for the rest: which family a file is, the options the file implies,
the method state it holds, and, for ``export``, the config sections and extra buffers the
reference reads. Nothing in :mod:`bench.checkpoints` or :mod:`bench.plan` names a method.

docs/adding-a-method.md, "Importable released files", has a worked example; docs/checkpoints.md
the families of the built-in methods.

This module imports nothing (a method module imports it at no cost); a hook receives what it
needs: ``ref`` is the file read (:class:`bench.checkpoints.reference.RefFile`: ``ref.cfg(key,
default)`` reads a config value, ``ref.num(key, default)`` one that must be a plain value,
``ref.error(message)`` makes the one-line error naming the file, ``ref.repo``, ``ref.noise``,
``ref.adaptive``); ``method`` is the built method (options in ``method.opts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReferenceFamily:
    """One kind of reference file: the reference backbone and algorithm classes that read it.

    Attributes:
        name: the family (``inspect`` prints it, ``--family`` forces it); unique across methods.
        model_type: the reference's ``config.model.type`` (the backbone class it builds).
        algo: the reference's ``config.algo.name`` an exported file carries.
        algo_names: ``config.algo.name`` values that mean this family, when the keys alone
            cannot tell it from another family (e.g. MDLM, Duo and FLM files have the same keys).
        requires: ``state_dict`` keys every file of this family has (``backbone.*`` names, or a
            top-level buffer). A file is of the family with the most required keys it has (and
            none of its ``excludes``); a tie goes by ``algo_names``, then by ``schemas``.
        excludes: ``state_dict`` keys no file of this family has.
        schemas: config schemas besides the harness's own that mean this family when the algo
            name does not tell (``"flm"``: the FLM repository, david3684/flm).
        layout: the key-name table of the reference module (:mod:`bench.checkpoints.names`):
            ``"dit"`` (DIT / FLMDIT / ContDIT / SphereDiT) or ``"sarch"`` (SphereArch).
        embed: the reference's name of the input table (``vocab_embed.embedding`` or
            ``sphere_embed.weight``).
        mask_rows: rows the reference's input and output tables have beyond the model's classes
            (a mask class: AR, MDLM, CANDI).
        kept_mask_rows: of those, the rows our backbone has (input, output); the importer drops
            the others (the reference pins or drops their logits), the exporter adds them as zeros.
        vocab_in_hparams: ``hyper_parameters['vocab_size']`` holds the row count (else None).
    """

    name: str
    model_type: str
    algo: str
    algo_names: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    schemas: tuple[str, ...] = ()
    layout: str = "dit"
    embed: str = "vocab_embed.embedding"
    mask_rows: int = 0
    kept_mask_rows: tuple[int, int] = (0, 0)
    vocab_in_hparams: bool = False


@dataclass(frozen=True)
class HubFormat:
    """A Hugging Face-format repository a method's authors publish (``config.json`` with
    ``model_type`` and ``auto_map`` naming the authors' modelling code, ``model.safetensors``),
    read without running that code (:mod:`bench.checkpoints.hf`, docs/checkpoints.md).

    Attributes:
        model_type: ``config.json``'s ``model_type``.
        family: the :class:`ReferenceFamily` (of the same method) the weights map onto: the same
            backbone keys under ``backbone.``.
        classes: ``auto_map`` entry -> the class name it must name (``AutoConfig`` ->
            ``MDLMConfig``); the module part is not checked (the code is never imported).
        fields: the configuration class's own ``config.json`` keys the mapping reads (sizes,
            ``time_conditioning``), beside the generic ones of every ``PretrainedConfig``.
        fixed: ``config.json`` values the mapping requires (key, value): any other value is an
            error (e.g. a causal variant that is another model).
        ignored: keys the file has that change nothing at sampling (training-only settings).
        algo: the ``algo`` config section the reference harness ran these weights with
            (``name``, ``time_conditioning`` when ``config.json`` does not say it).
    """

    model_type: str
    family: str
    classes: tuple[tuple[str, str], ...]
    fields: tuple[str, ...] = ()
    fixed: tuple[tuple[str, Any], ...] = ()
    ignored: tuple[str, ...] = ()
    algo: tuple[tuple[str, Any], ...] = ()


class ReferenceFormat:
    """A method's mapping from and to the reference format. Subclass it in the method's module,
    set :attr:`families` (and :attr:`pad_is_class`), override the hooks whose default does not
    fit, and set an instance as the method class's ``reference``."""

    #: the families whose files hold one of this method's models (the first: the default export)
    families: tuple[ReferenceFamily, ...] = ()
    #: True when the reference's ``[PAD]`` token is one of this method's classes: a file may then
    #: have one class more than the task it is sampled on (OWT: 50,258 for GPT-2's 50,257 ids)
    pad_is_class: bool = False
    #: the Hugging Face-format repositories of this method's authors (:class:`HubFormat`)
    hub_formats: tuple[HubFormat, ...] = ()

    def family_for(self, options: Any) -> ReferenceFamily:
        """Export: the family a model with these options (its ``Options``) is written as."""
        return self.families[0]

    def options_from(self, ref: Any, family: ReferenceFamily) -> tuple[dict, dict, list[str]]:
        """Import: ``(options, choices, notes)`` a file of ``family`` implies. ``options``: this
        method's options as the reference's sample script ran the file; ``choices``: options the
        file allows other values for (name -> allowed values, the first the default); ``notes``:
        lines ``inspect`` and ``convert`` print. Raise ``ref.error(...)`` for a file this method
        cannot represent."""
        return {}, {}, []

    def load_state(self, method: Any, ref: Any) -> None:
        """Import: after the weights are loaded, set method state the file holds beyond them
        (S-FLM: the fitted adaptive schedule)."""

    def describe(self, ref: Any) -> dict:
        """Import: facts about the file's method state that ``inspect`` prints."""
        return {}

    def export_config(self, family: ReferenceFamily, method: Any) -> dict:
        """Export: the config sections the reference reads for this model, ``{section: {key:
        value}}`` (``model``, ``algo``, ``noise``, ``sampler``...), merged key by key over the
        generic ones (sizes, ``model.type``, ``algo.name``, training / optim / eval defaults;
        :func:`bench.checkpoints.export.reference_config`)."""
        return {}

    def export_state(self, family: ReferenceFamily, method: Any) -> dict:
        """Export: ``state_dict`` entries beside ``backbone.*`` (buffers of the reference's
        algorithm or noise schedule), name -> tensor."""
        return {}
