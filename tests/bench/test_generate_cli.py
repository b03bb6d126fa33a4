"""``python -m bench.generate``: K continuations of a prompt with the method's NFE count,
reproducible from the seed; an MDLM suffix stays as given (infilling); AR refuses a suffix; bad
input is one line and exit 2. Models: the tiny sort-4 runs of ``eval_runs`` (8 positions,
vocabulary 10) and a reference-format file read in memory."""

from __future__ import annotations

import pytest
from eval_runs import copy_runs, snapshot
from helpers import reference_checkpoint

from bench.commands import generate as gen


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One copy for the module: bench.generate writes nothing (checked below)."""
    return copy_runs(tmp_path_factory, tmp_path_factory.mktemp("gen") / "results")


def _gen(capsys, *argv) -> tuple[int, str, str]:
    rc = gen.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_prints_k_continuations_and_the_nfe_line(runs, capsys):
    before = snapshot(runs["mdlm"].parent.parent)
    rc, out, _ = _gen(capsys, runs["mdlm"], "--prompt", "3 1 2 0", "--n", "3", "--seed", "1")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 4, out
    for line in lines[:3]:  # the 4 generated positions, as the task writes ids
        assert len(line.split()) == 4 and all(w.isdigit() for w in line.split())
    assert lines[3] == "nfe: 4 network calls per sample (method mdlm, decoding ancestral, T 1)"
    assert _gen(capsys, runs["mdlm"], "--prompt", "3 1 2 0", "--n", "3", "--seed", "1")[1] == out
    _, out2, _ = _gen(capsys, runs["mdlm"], "--prompt", "3 1 2 0", "--n", "3", "--nfe", "2")
    assert out2.splitlines()[-1].startswith("nfe: 2 network calls per sample")
    assert snapshot(runs["mdlm"].parent.parent) == before  # nothing written


def test_same_seed_same_samples(runs):
    a = gen.generate(str(runs["mdlm"]), "5 5 1 0", n=4, seed=7)
    b = gen.generate(str(runs["mdlm"]), "5 5 1 0", n=4, seed=7)
    assert a.texts == b.texts and bool((a.ids == b.ids).all())
    assert a.ids.shape == (4, 8) and a.span == (4, 8)


def test_mdlm_suffix_is_kept_as_given(runs):
    g = gen.generate(str(runs["mdlm"]), "7 1", suffix="9 9", length=4, n=5, seed=3)
    assert g.ids.shape == (5, 8) and g.span == (2, 6)
    assert (g.ids[:, :2] == g.ids.new_tensor([7, 1])).all()
    assert (g.ids[:, 6:] == 9).all()  # the suffix positions are unchanged
    assert g.nfe == 4 and all(len(t.split()) == 4 for t in g.texts)


def test_ar_continues_left_to_right_and_cannot_infill(runs, capsys):
    rc, out, _ = _gen(capsys, runs["ar"], "--prompt", "3 1 2 0", "--n", "2")
    assert rc == 0 and len(out.splitlines()) == 3
    assert "nfe: 4 network calls per sample (method ar" in out  # NFE = the generated length
    rc, out, err = _gen(capsys, runs["ar"], "--prompt", "3 1", "--suffix", "9 9", "--length", "4")
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ar cannot infill:"), err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--prompt", "3 1 2 0", "--length", "8"], "the canvas is 12 positions"),
        (["--prompt", "3 x"], "text is read as token ids 0..9"),
        (["--prompt", "3 1", "--n", "0"], "--n: must be >= 1"),
        (["--prompt", "3 1", "--decoding", "bogus"], "--decoding: mdlm: unknown decoding"),
        (["--prompt", "3 1", "--task", "sudoku"], "is a model of task 'sort'"),
    ],
)
def test_bad_input_is_one_line_exit_2(runs, capsys, argv, needle):
    rc, out, err = _gen(capsys, runs["mdlm"], *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_reference_file_is_read_in_memory(tmp_path, capsys):
    ck = reference_checkpoint(tmp_path, "m", "mdlm", {})
    rd = tmp_path / "results"
    argv = [ck, "--task", "sort", "--set", "task.options.n_digits=4", "--results-dir", rd]
    rc, out, _ = _gen(capsys, *argv, "--prompt", "5 4 3 2", "--n", "2", "--seed", "0")
    assert rc == 0 and len(out.splitlines()) == 3, out
    assert not rd.exists()  # nothing imported or written
    rc, _, err = _gen(capsys, ck, "--prompt", "5 4 3 2")
    assert rc == 2 and "--task: required" in err
