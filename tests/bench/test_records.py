"""Per-item records (bench.records), reading them (bench.samples) and scoring saved samples
again (bench.rescore), on real tiny runs: a 4x4 Sudoku sweep (AR + MDLM, a few training
steps) and the GSM8K stand-in with planted programs whose verdict differs between the graders."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from bench import cells, records
from bench.commands.samples import main as samples_main
from bench.config import load_sweep
from bench.kinds import sample as sample_kind
from bench.plan import plan
from bench.results import Store
from bench.results import main as results_main

SUDOKU = """
name: rec
results_dir: {rd}
task: {{name: sudoku, grid: 4, difficulties: [easy, hard], train_mix: true, n_train: 64,
        n_valid: 12, data_dir: {dd}}}
backbone: {{size: cpu-mini}}
train: {{steps: 3, batch_size: 16, warmup_steps: 1, checkpoint_every: 3, ema: 0.5}}
sample: {{nfe: [4], temperature: [1.0], n_samples: 12, batch_size: 8}}
executor: {{kind: debug}}
methods:
  - {{method: ar, decoding: [greedy]}}
  - {{method: mdlm}}
"""


def _run(tmp_path, text: str, name: str = "s.yaml"):
    path = tmp_path / name
    path.write_text(text.format(rd=tmp_path / "results", dd=tmp_path / "data"))
    p = plan(load_sweep(path), str(path))
    for tc in p.train_cells:
        cells.run_train_then_samples(tc, p.samples_of(tc), progress=False)
    return p


@pytest.fixture(scope="module")
def sudoku_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rec")
    p = _run(tmp, SUDOKU)
    return tmp / "results", p


def _sample_rows(rd: Path):
    df = Store(rd).read()
    return df[df["kind"] == "sample"]


def test_every_sample_cell_has_records_that_average_to_its_value(sudoku_run):
    rd, p = sudoku_run
    s = _sample_rows(rd)
    assert set(s["cell_id"]) == {c.id for c in p.sample_cells}
    for cid, g in s.groupby("cell_id"):
        assert g["records"].nunique() == 1 and g["records_sha256"].nunique() == 1
        rel = g["records"].iloc[0]
        assert rel == f"records/{cid}.jsonl.gz"
        recs = records.read(rd, rel, g["records_sha256"].iloc[0])
        em = g[g["metric"] == "exact_match"].iloc[0]
        assert len(recs) == em["n"] == 12
        assert [r["index"] for r in recs] == list(range(12))
        # the outcomes are the row's: their mean is its value, item by item its item_outcomes
        assert sum(r["correct"] for r in recs) / len(recs) == em["value"]
        assert "".join(str(r["correct"]) for r in recs) == em["item_outcomes"]
        valid = g[g["metric"] == "valid_grid"].iloc[0]["value"]
        assert sum(r["valid_grid"] for r in recs) / len(recs) == valid
        for r in recs:
            assert {"prompt", "output", "target", "prompt_ids", "output_ids", "nfe"} <= set(r)
            assert r["cell_id"] == cid and r["subset"] == em["subset"]
            # the model's grid against the solution: wrong_cells are exactly where they differ
            grid, sol = r["grid"].split("/"), r["solution"].split("/")
            wrong = [[i, j] for i in range(4) for j in range(4) if grid[i][j] != sol[i][j]]
            assert r["wrong_cells"] == wrong
            assert r["correct"] == int(not wrong)
            assert r["target"] == r["solution"] and r["prompt"] == r["givens"]


def test_records_are_verified_and_damage_is_one_line(sudoku_run, tmp_path, capsys):
    import shutil

    rd, _ = sudoku_run
    copy = tmp_path / "results"
    shutil.copytree(rd, copy)
    assert results_main(["verify", "--results-dir", str(copy)]) == 0
    capsys.readouterr()
    # rewrite one records file with one outcome flipped (valid gzip, valid JSON lines)
    victim = sorted((copy / "records").glob("*.jsonl.gz"))[0]
    lines = gzip.decompress(victim.read_bytes()).decode().splitlines()
    first = json.loads(lines[0])
    first["correct"] = 1 - first["correct"]
    lines[0] = json.dumps(first, sort_keys=True)
    victim.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    assert results_main(["verify", "--results-dir", str(copy)]) == 1
    out = capsys.readouterr().out
    assert victim.name in out and "sha256" in out
    rc = samples_main(["--results-dir", str(copy), "--format", "jsonl", "--limit", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1 and victim.name in err
    # cut short: not gzip any more
    victim.write_bytes(victim.read_bytes()[:20])
    assert samples_main(["--results-dir", str(copy), "--limit", "0"]) == 2
    assert "damaged records file" in capsys.readouterr().err


def test_samples_cli_selects_and_filters(sudoku_run, capsys):
    rd, _ = sudoku_run
    assert samples_main(["--results-dir", str(rd), "--task", "sudoku", "--format", "jsonl",
                         "--limit", "0"]) == 0  # fmt: skip
    recs = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(recs) == 2 * 2 * 12  # 2 models x 2 subsets x 12 items
    assert all({"prompt", "output", "correct", "model"} <= set(r) for r in recs)
    # two seeds, two names, in the records and the rows; the rows' seed is the training seed
    assert {(r["sample_seed"], r["train_seed"]) for r in recs} == {(0, 0)} and "seed" not in recs[0]
    rows = _sample_rows(rd)
    assert (rows["train_seed"] == rows["seed"]).all() and (rows["sample_seed"] == 0).all()
    assert samples_main(["--results-dir", str(rd), "--where", "sample_seed=0", "--format",
                         "jsonl", "--limit", "0"]) == 0  # fmt: skip
    assert len(capsys.readouterr().out.splitlines()) == len(recs)
    # --model, --where (numbers and booleans as text), --limit
    where = ["--where", "correct=0", "--where", "subset=hard"]
    argv = [
        "--results-dir",
        str(rd),
        "--model",
        "mdlm",
        *where,
        "--format",
        "jsonl",
        "--limit",
        "0",
    ]
    assert samples_main(argv) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    want = [
        r for r in recs if r["method"] == "mdlm" and r["correct"] == 0 and r["subset"] == "hard"
    ]
    assert [(r["cell_id"], r["index"]) for r in got] == [(r["cell_id"], r["index"]) for r in want]
    assert samples_main(["--results-dir", str(rd), "--where", "valid_grid=false", "--format",
                         "jsonl", "--limit", "3"]) == 0  # fmt: skip
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(got) <= 3 and all(r["valid_grid"] is False for r in got)
    # the table
    assert samples_main(["--results-dir", str(rd), "--limit", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:6] == ["model", "subset", "nfe", "T", "item", "correct"]
    assert len(out) == 2 + 4
    # bad input: one line, exit 2
    for argv, says in (
        (["--where", "status=timeout"], "--where status: no selected record has this field"),
        (["--where", "status"], "expected FIELD=VALUE"),
        (["--limit", "-1"], "--limit"),
        (["--task", "gsm8k"], "no sample cell with records"),
        (["--where", "seed=0"], "train_seed (the model's training seed) or sample_seed"),
    ):
        assert samples_main(["--results-dir", str(rd), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and len(err.splitlines()) == 1, err


def test_rescore_with_unchanged_settings_reproduces_every_value(sudoku_run, capsys):
    from bench.commands.rescore import main as rescore_main

    rd, _ = sudoku_run
    before = sorted(p.name for p in (rd / "store").glob("*.json"))
    assert rescore_main(["--results-dir", str(rd)]) == 0
    out = capsys.readouterr().out
    assert "4 of 4 cells reproduce every stored value" in out
    assert sorted(p.name for p in (rd / "store").glob("*.json")) == before  # nothing written
    # a setting that is not the scorer's is refused; a bad value is one line naming the key
    assert rescore_main(["--results-dir", str(rd), "--set", "sample.nfe=[8]"]) == 2
    assert "only task.options" in capsys.readouterr().err
    assert rescore_main(["--results-dir", str(rd), "--set", "task.options.generator=foo"]) == 2
    err = capsys.readouterr().err.strip()
    assert "task.options.generator" in err and len(err.splitlines()) == 1, err
    # MAUVE needs free text (bench.evaluate.mauve_score): refused on Sudoku, one line
    assert rescore_main(["--results-dir", str(rd), "--set", "task.options.mauve=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert "task.options.mauve: MAUVE" in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in (rd / "store").glob("*.json")) == before


def test_rescore_reports_a_stored_value_that_does_not_reproduce():
    from bench.commands.rescore import differences

    stored = [{"metric": "exact_match", "value": 0.5, "n": 4, "ci_low": 0.1, "ci_high": 0.9,
               "item_outcomes": "0101", "items_key": "k"}]  # fmt: skip
    assert differences(stored, [dict(stored[0])]) == []
    assert differences(stored, [{**stored[0], "item_outcomes": "0110"}]) == [
        "exact_match.item_outcomes: stored '0101', now '0110'"
    ]
    assert differences(stored, []) == ["exact_match: stored, not produced now"]


# --------------------------------------------------------------------------- GSM8K stand-in

ARITH = """
name: arith
results_dir: {rd}
task: {{name: arith_standin, n_train: 64, seed: 42, options: {{bootstrap: 200}}}}
backbone: {{size: cpu-mini}}
train: {{steps: 1, batch_size: 8, warmup_steps: 1, checkpoint_every: 1}}
sample: {{nfe: [8], temperature: [1.0], n_samples: 10, batch_size: 10}}
executor: {{kind: debug}}
methods:
  - {{method: mdlm}}
"""


def test_rescore_under_the_reference_grader_changes_only_differing_verdicts(
    tmp_path, monkeypatch, capsys
):
    """Planted samples: every gold program, and on odd items the word ``answer`` after the EOS.
    The standard grader reads up to the EOS (all right); the reference grader reads the whole
    canvas, where the stray word breaks the program's last line (odd items wrong)."""
    from bench import registry
    from bench.commands.rescore import main as rescore_main

    planted = {}

    def fake_batch(sampler, backbone, c, prompt, pmask, generator, *, float64):
        if not planted:
            task = registry.make_task(c.train.task_config())
            data = task.eval_data(c.subset, c.n_samples)
            gold = task.reference_completions(data)
            tok = task.tokenizer
            stray = tok.encode(" answer")
            for i in range(len(data)):
                row = gold[i].clone()
                if i % 2:
                    eos = (row == tok.eos_token_id).nonzero()[-1].item()
                    row[eos + 1 : eos + 1 + len(stray)] = torch.tensor(stray)
                planted[data.x[i].numpy().tobytes()] = row
        return torch.stack([planted[p.cpu().numpy().tobytes()] for p in prompt])

    monkeypatch.setattr(sample_kind, "sample_batch", fake_batch)
    p = _run(tmp_path, ARITH)
    rd = tmp_path / "results"
    (cid,) = [c.id for c in p.sample_cells]
    recs = records.read(rd, records.relpath(cid))
    assert [r["status"] for r in recs] == ["ok"] * 10 and all(r["verdict"] for r in recs)
    assert all(r["grader"] == "standard" and r["program"].startswith("def ") for r in recs)
    assert recs[0]["target"] == str(recs[0]["gold"])

    assert rescore_main(["--results-dir", str(rd), "--set", "task.options.grader=reference"]) == 0
    assert "1 re-scored cells written" in capsys.readouterr().out
    df = Store(rd).read()
    new = df[df["rescored_from"] == cid]
    assert set(new["scorer"]) == {'{"grader":"reference"}'}
    assert set(new["task_protocol"]) == {"grader=reference; separator=newline"}
    acc = new.set_index("metric")["value"]
    assert acc["accuracy_plain"] == 0.5
    new_recs = records.read(rd, new["records"].iloc[0], new["records_sha256"].iloc[0])
    changed = [i for i, (a, b) in enumerate(zip(recs, new_recs)) if a["verdict"] != b["verdict"]]
    assert changed == [1, 3, 5, 7, 9]
    assert all(new_recs[i]["status"] != "ok" for i in changed)
    # the reference grader read past the EOS: it extracted another program from the canvas
    assert all(new_recs[i]["program"] != recs[i]["program"] for i in changed)
    assert all(new_recs[i]["program"] == recs[i]["program"] for i in range(0, 10, 2))
    # the old rows stay; running it again writes nothing
    assert len(df[df["cell_id"] == cid]) == len(new)
    assert rescore_main(["--results-dir", str(rd), "--set", "task.options.grader=reference"]) == 0
    assert "0 re-scored cells written, 1 already in the store" in capsys.readouterr().out
    # the report keeps them apart: another evaluation of the same model
    from bench.report.common import prepared

    labels = set(prepared(Store(rd).read()).query("kind == 'sample'")["model"])
    assert labels == {"mdlm (ancestral)", "mdlm [scored grader=reference] (ancestral)"}


def test_sudoku_text_hooks_lay_a_typed_puzzle_out_as_the_task_does(tmp_path):
    """decode_text / encode_text round trip; text_canvas puts the givens in both halves (clean)
    and leaves exactly the blank cells of the solution half to generate, as eval_data does."""
    from bench import registry
    from bench.config import TaskConfig

    task = registry.make_task(TaskConfig(name="sudoku", grid=4, n_train=16, n_valid=4,
                                         data_dir=str(tmp_path)))  # fmt: skip
    data = task.eval_data("easy", 2)
    typed = task.decode_text(data.x[0, : task.prompt_len].tolist())
    assert typed.count("/") == 3 and len(typed.replace("/", "")) == 16
    canvas = task.text_canvas(typed, "", 0)
    assert torch.equal(canvas.clean_mask[0], data.clean_mask[0])
    x, want = canvas.x[0], data.x[0]
    clean = data.clean_mask[0]
    assert torch.equal(x[clean], want[clean])  # givens in both halves, separators, BOS
    assert int((~canvas.clean_mask[0]).sum()) == int(
        (torch.tensor(data.meta["puzzle"][0]) == 0).sum()
    )
    assert task.encode_text(typed) == [int(v) for v in data.meta["puzzle"][0].reshape(-1)]
    with pytest.raises(ValueError, match="16 cells"):
        task.encode_text("12./3")
    with pytest.raises(ValueError, match="suffix"):
        task.text_canvas(typed, "1", 0)
