"""A checkpoint whose |V| the task cannot serve: one line, exit 2, naming the way forward: the
built-in task it fits (and that task then plans), or, when none does, that a Duo / FLM / S-FLM
file alone may carry one class more than its task (the reference's [PAD]) and that a task of its
size is a task plug-in."""

from __future__ import annotations

import checkpoints_ref as R

from bench import sweep
from bench.commands import generate as gen

SORT4 = ["--task", "sort", "--set", "task.options.n_digits=4"]


def _gen(capsys, *argv):
    rc = gen.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_names_the_built_in_task_the_vocabulary_fits(tmp_path, capsys):
    # a Duo file of 12 classes (11 tokens + its [PAD]): too many for sort, Sudoku's 12
    info = R.write_reference_checkpoint(
        tmp_path / "duo.ckpt", "duo", vocab="owt", base_vocab=11, length=40
    )
    rd = tmp_path / "results"
    rc, out, err = _gen(capsys, info["path"], *SORT4, "--prompt", "1 2", "--results-dir", rd)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "duo.ckpt (duo family) has |V| = 12, task sort has 10" in err, err
    assert "task sudoku fits it: --task sudoku" in err, err
    # the way it names works: the same file on Sudoku (4x4: 40 positions) plans and samples
    argv = [info["path"], "--task", "sudoku", "--set", "task.grid=4", "--results-dir", rd]
    rc, out, err = _gen(capsys, *argv, "--prompt", "1.3./.4../..../...2")
    assert rc == 0, err
    assert out.splitlines()[-1].startswith("nfe: ")


def test_no_task_fits_names_the_pad_rule_and_a_plug_in(tmp_path, capsys):
    # an MDLM file of 11 classes: its [PAD] is no class of an MDLM model, and no task has 11
    info = R.write_reference_checkpoint(tmp_path / "mdlm.ckpt", "mdlm", vocab="owt", base_vocab=11)
    rc, out, err = _gen(capsys, info["path"], *SORT4, "--prompt", "1 2")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "(mdlm family) has |V| = 11, task sort has 10" in err, err
    assert "only duo, flm, sflm files may have one class more than the task" in err, err
    assert "no built-in task has 11 tokens" in err and "docs/adding-a-task.md" in err, err


def test_a_sweep_entry_gets_the_same_line(tmp_path, capsys):
    info = R.write_reference_checkpoint(
        tmp_path / "flm.ckpt", "flm", vocab="owt", base_vocab=12
    )  # 13 classes: Sudoku's 12 + its [PAD]
    f = tmp_path / "s.yaml"
    f.write_text(
        f"name: s\nresults_dir: {tmp_path / 'results'}\ntask: {{name: sort}}\n"
        f"methods:\n  - method: flm\n    checkpoint: {info['path']}\n"
    )
    assert sweep.main([str(f), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "methods[0].checkpoint:" in err and "has |V| = 13, task sort has 10" in err, err
    assert "task sudoku fits it" in err and "task.name in a sweep" in err, err
