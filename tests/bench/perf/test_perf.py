"""bench.perf runs every benchmark end to end on tiny sizes and reports what it measured
(no timing targets here: those are read off the benchmark's output, not asserted)."""

import json

from bench import perf

TINY = [
    "--size",
    "cpu-mini",
    "--vocab",
    "12",
    "--seq-len",
    "24",
    "--batch",
    "4",
    "--steps",
    "2",
    "--warmup",
    "1",
    "--nfe",
    "3",
    "--sample-reps",
    "1",
    "--vel-vocab",
    "2048",
    "--vel-dim",
    "64",
    "--vel-len",
    "32",
    "--vel-size",
    "cpu-mini",
    "--vel-steps",
    "2",
    "--device",
    "cpu",
]


def test_all_benchmarks_write_rows(tmp_path, capsys):
    out = tmp_path / "perf.json"
    assert (
        perf.main(
            [
                "train",
                "sample",
                "velocity",
                "--models",
                "ar,mdlm,sflm/sarch",
                *TINY,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["rows"]
    train = {r["model"]: r for r in rows if r["bench"] == "train"}
    sample = {r["model"]: r for r in rows if r["bench"] == "sample"}
    assert set(sample) == {"ar", "mdlm", "sflm/sarch"} and set(train) == {"bare", *sample}
    assert train["ar"]["vs_ar"] == 1.0 and train["mdlm"]["vs_mdlm"] == 1.0
    assert train["bare"]["vs_bare"] == 1.0 and all(r["vs_bare"] > 0 for r in train.values())
    assert all(r["steps_per_s"] > 0 for r in train.values())
    assert all(r["tokens_per_s"] > 0 for r in sample.values())
    assert sample["mdlm"]["nfe"] == 3  # NFE = backbone calls, counted by Method.call
    assert sample["ar"]["nfe"] == 12  # AR: one call per generated position (half of 24)
    (vel,) = [r for r in rows if r["bench"] == "velocity"]
    assert vel["vocab"] == 2048 and vel["step_s"] > 0 and vel["forward_s"] > 0
    assert "| model | steps_per_s" in capsys.readouterr().out


def test_bad_arguments_exit_2(capsys):
    assert perf.main(["train", "--models", "nope", *TINY]) == 2
    assert "--models: unknown model 'nope'" in capsys.readouterr().err
    assert perf.main(["speed"]) == 2
    assert perf.main(["velocity", *TINY[:-2], "--vel-dim", "100"]) == 2  # cpu-mini is 64 wide
    assert "--vel-dim 100" in capsys.readouterr().err


def test_scale_preset_sets_the_shape_and_flags_override_it(tmp_path):
    out, md = tmp_path / "p.json", tmp_path / "p.md"
    assert (
        perf.main(
            [
                "train",
                "--scale",
                "sudoku-cpu",
                "--size",
                "cpu-mini",
                "--seq-len",
                "16",
                "--batch",
                "2",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--models",
                "mdlm",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--md",
                str(md),
            ]
        )
        == 0
    )
    env = json.loads(out.read_text())["env"]
    assert (
        env["scale"]["vocab"] == 12
        and env["scale"]["seq_len"] == 16
        and env["scale"]["size"] == "cpu-mini"
    )
    assert "| bare |" in md.read_text() and "--scale sudoku-cpu" in md.read_text()


def test_variants_are_opt_in_rows(tmp_path, monkeypatch):
    """``duo/reference`` (Duo's reference-chain NELBO) / ``sflm/sarch-unfolded`` are rows only when
    named, and their row runs that option / fast path (set on that model's method / backbone,
    not on the class); ``bare`` may be named and is the first row either way."""
    from bench.cost import catalogue as perf_models
    from bench.perf import common
    from sflm.sarch import SArch

    seen = []
    real = perf_models.fast_path
    monkeypatch.setattr(
        perf_models,
        "fast_path",
        lambda label, m, bb: (real(label, m, bb), seen.append((label, m, bb))),
    )
    made = []
    real_make = common.make_model
    monkeypatch.setattr(
        common, "make_model", lambda *a, **k: made.append(real_make(*a, **k)) or made[-1]
    )
    out = tmp_path / "perf.json"
    models = "bare,duo,duo/reference,sflm/sarch-unfolded"
    assert perf.main(["train", "--models", models, *TINY, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["bare", "duo", "duo/reference", "sflm/sarch-unfolded"]
    by = {label: (m, bb) for label, m, bb in seen}
    assert by["duo"][0].opts.nelbo == "fused" and by["duo/reference"][0].opts.nelbo == "reference"
    assert not by["sflm/sarch-unfolded"][1].fold_logit_scale
    assert SArch.fold_logit_scale  # default untouched (folded)
    assert "duo/reference" not in {m[0] for m in perf.MODELS}  # not in the default set
    assert len(made) == 3
    out2 = tmp_path / "bare.json"
    assert perf.main(["train", "--models", "bare", *TINY, "--out", str(out2)]) == 0
    assert [r["model"] for r in json.loads(out2.read_text())["rows"]] == ["bare"]


def test_every_method_runs_at_a_large_vocabulary_preset_shape(tmp_path):
    """Every paper method with ``bare`` named, at a larger vocabulary (tiny network, one step): its
    row, ``bare`` first, and ratios to it."""
    out = tmp_path / "p.json"
    argv = ["train", "--models", "bare,ar,mdlm,duo,candi,flm,sflm", "--size", "cpu-mini"]
    argv += ["--vocab", "2048", "--seq-len", "16", "--batch", "2", "--prompt-frac", "0.5"]
    argv += ["--steps", "1", "--warmup", "0", "--device", "cpu", "--out", str(out)]
    assert perf.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["model"] for r in rows] == ["bare", "ar", "mdlm", "duo", "candi", "flm", "sflm"]
    assert all(r["vs_bare"] > 0 and r["steps_per_s"] > 0 for r in rows)


def test_profile_script_writes_top_ops_tables(tmp_path):
    """scripts/perf_profile.py: a table per model of the bench's train step; bad input: exit 2."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[3] / "scripts" / "perf_profile.py"
    out = tmp_path / "prof.md"
    cmd = [sys.executable, str(script), "--scale", "sudoku-cpu", "--steps", "1", "--top", "3"]
    r = subprocess.run(
        [*cmd, "--models", "bare,duo/reference", "--out", str(out)], capture_output=True
    )
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    text = out.read_text()
    assert "### bare:" in text and "### duo/reference:" in text
    assert text.count("| op | self CPU ms/step |") == 2 and "`aten::" in text
    bad = subprocess.run([*cmd, "--models", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown model 'nope'" in bad.stderr


def test_one_module_per_benchmark_and_no_method_named_outside_the_catalogue():
    """Every module (or package) of bench/perf but the shared ones is a benchmark of the table
    (HELP, its own flags, run), and no benchmark names a method, in any of its files: the
    methods' classes say which sampler has an exact velocity or a KV cache (capabilities the
    benchmarks own, bench.perf.capabilities, not members of bench.method.Method), and the model
    labels are catalogue data (bench/cost/catalogue.py)."""
    import ast
    from pathlib import Path

    from bench import registry
    from bench.method import Method
    from bench.perf import arcache, capabilities, velocity

    folder = Path(perf.__file__).parent
    shared = {"__init__", "__main__", "suite", "common", "capabilities", "models"}
    packages = {p.parent.name for p in folder.glob("*/__init__.py")}
    modules = ({p.stem for p in folder.glob("*.py")} | packages) - shared
    assert modules == set(perf.BENCHMARKS)
    for name, mod in perf.BENCHMARKS.items():
        assert mod.__name__ == f"bench.perf.{name}" and mod.HELP
        assert callable(mod.add_arguments) and callable(mod.run)
    names = set(registry.METHODS)
    for path in folder.rglob("*.py"):
        if path.stem == "models":
            continue
        tree = ast.parse(path.read_text())
        literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)}
        assert not literals & names, (path.name, sorted(literals & names))
    exact = [n for n, cls in registry.METHODS.items() if getattr(cls, "exact_velocity", False)]
    cached = [
        n for n, cls in registry.METHODS.items() if getattr(cls, "kv_cache", None) is not None
    ]
    assert velocity.velocity_methods() == exact and "sflm" in exact
    assert arcache.cached_methods() == cached and "ar" in cached
    assert not hasattr(Method, "exact_velocity") and not hasattr(Method, "kv_cache")
    assert [n for n, c in registry.METHODS.items() if capabilities.exact_velocity(c)] == exact
    assert capabilities.kv_cache(registry.METHODS["ar"]) is True
    assert capabilities.kv_cache(registry.METHODS["mdlm"]) is None
    assert isinstance(registry.METHODS["sflm"], capabilities.ExactVelocity)
    assert not isinstance(registry.METHODS["mdlm"], capabilities.KVCache)


def test_velocity_takes_its_shape_from_the_scale(tmp_path):
    """``velocity --scale`` times the scale's DiT size, |V|, L and batch (width from the DiT);
    a ``--vel-*`` flag overrides one of them."""
    out = tmp_path / "v.json"
    argv = ["velocity", "--scale", "sudoku-cpu", "--vel-len", "16", "--vel-steps", "1"]
    assert perf.main([*argv, "--vel-float32", "--device", "cpu", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert (row["vocab"], row["seq_len"], row["batch"]) == (12, 16, 32)
    assert (row["size"], row["dim"], row["dtype"]) == ("cpu-small", 128, "float32")
    assert row["step_s"] > 0 and row["forward_s"] > 0 and row["products_over_forward"] > 0


def test_velocity_bench_samples_in_the_dtype_it_asks_for(monkeypatch, tmp_path):
    """A method that defaults to float32 at a large |V| (S-FLM ``velocity_dtype: auto``) still
    runs in float64 in ``velocity`` without --vel-float32 (``common.as_asked``)."""
    import sflm.method as sm

    monkeypatch.setattr(sm, "FLOAT32_ABOVE_VOCAB", 100)
    seen = []
    real = sm.sample_sphere_flow
    monkeypatch.setattr(
        sm, "sample_sphere_flow", lambda *a, **k: seen.append(k["float64"]) or real(*a, **k)
    )
    out = tmp_path / "v.json"
    argv = ["velocity", "--vel-size", "cpu-mini", "--vel-vocab", "512", "--vel-len", "8"]
    assert perf.main([*argv, "--vel-steps", "1", "--device", "cpu", "--out", str(out)]) == 0
    assert seen and all(seen)
    assert json.loads(out.read_text())["rows"][0]["dtype"] == "float64"
