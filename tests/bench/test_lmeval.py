"""The lm-evaluation-harness adapter (``bench.lmeval``, the optional extra ``lmeval``): lm-eval's
``simple_evaluate`` and its command line (``python -m bench.lmeval``) run the local task files
of ``lmeval_tasks/`` (8 sort-4 items, multiple choice and generation) on the tiny sort-4 runs of
``eval_runs`` (AR: exact NLL; MDLM: its NELBO); a loglikelihood is the method's own
``nll_bound`` (AR: the chain rule computed here); a method without a bound refuses likelihood
requests with one line and still generates. Skips without lm-eval; fails instead under
``SFLM_REQUIRE_LMEVAL=1`` or CI (scripts/setup.sh installs the extra)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
from eval_runs import copy_runs, snapshot
from helpers import offline_required, reference_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TASKS = Path(__file__).resolve().parent / "lmeval_tasks"


@pytest.fixture(autouse=True)
def _lmeval_installed():
    if find_spec("lm_eval") is None:
        msg = "lm_eval is not installed: pip install -e '.[lmeval]' (the optional extra)"
        if os.environ.get("SFLM_REQUIRE_LMEVAL") == "1" or offline_required():
            pytest.fail(f"SFLM_REQUIRE_LMEVAL / CI: {msg}")
        pytest.skip(msg)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One copy for the module: the adapter writes nothing (checked below)."""
    return copy_runs(tmp_path_factory, tmp_path_factory.mktemp("lmeval") / "results")


def _lm(run, **kw):
    from bench.lmeval.model import SFLMBenchLM

    return SFLMBenchLM(src=str(run), device="cpu", **kw)


def _req(kind: str, *args):
    from lm_eval.api.instance import Instance

    return Instance(request_type=kind, doc={}, arguments=tuple(args), idx=0)


def _evaluate(monkeypatch, run, tasks, **model_args):
    """``simple_evaluate`` of the local tasks on ``run`` (the task files' data paths are
    relative to the repository root)."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import bench.lmeval  # noqa: F401  (registers sflm-bench)

    monkeypatch.chdir(ROOT)
    tm = TaskManager(include_path=str(TASKS), include_defaults=False)
    return simple_evaluate(
        model="sflm-bench",
        model_args={"src": str(run), **model_args},
        tasks=list(tasks),
        task_manager=tm,
        limit=8,
        device="cpu",
    )


@pytest.mark.parametrize("method, kind", [("ar", "exact"), ("mdlm", "upper bound (NELBO)")])
def test_multiple_choice_through_simple_evaluate(runs, monkeypatch, method, kind):
    before = snapshot(runs[method].parent.parent)
    out = _evaluate(monkeypatch, runs[method], ["sflm_sort_mc"], nfe=2)
    res = out["results"]["sflm_sort_mc"]
    assert 0.0 <= res["acc,none"] <= 1.0 and res["sample_len"] == 8
    assert out["config"]["sflm_method"] == method and out["config"]["sflm_bound_kind"] == kind
    assert out["config"]["sflm_draws"] == (1 if method == "ar" else 8)
    assert snapshot(runs[method].parent.parent) == before  # nothing written


def test_ar_loglikelihood_is_the_chain_rule_nll(runs):
    """(context, continuation) -> minus the exact NLL of the continuation's 4 ids given the 4
    context ids, computed here from the backbone's logits; is_greedy is the argmax check."""
    from bench.method import Batch

    lm = _lm(runs["ar"])
    (ll, greedy), (ll2, _) = lm.loglikelihood(
        [_req("loglikelihood", "3 4 1 6", " 1 3 4 6"), _req("loglikelihood", "3 4 1 6 ", "6 4 3 1")]
    )
    x = torch.tensor([[3, 4, 1, 6, 1, 3, 4, 6]])
    with torch.no_grad():
        logp = torch.log_softmax(lm.backbone(x[:, :-1]).double(), -1)[0]
    gold = logp[torch.arange(7), x[0, 1:]]
    # float32 logits: a batch of two rounds a little differently from this batch of one
    assert ll == pytest.approx(float(gold[3:].sum()), rel=1e-6)
    assert greedy == bool((logp[3:].argmax(-1) == x[0, 4:]).all())
    # the method's own bound on the same canvas (context clean, continuation counted)
    loss = torch.zeros_like(x, dtype=torch.bool)
    loss[:, 4:] = True
    nll = lm.method.nll_bound(lm.backbone, Batch(x, ~loss, loss), n_draws=1, generator=None)
    assert nll.shape == (1, 1) and ll == pytest.approx(-float(nll[0, 0]), rel=1e-6)
    [(one, _)] = lm.loglikelihood([_req("loglikelihood", "3 4 1 6", " 1 3 4 6")])
    assert one == pytest.approx(-float(nll[0, 0]), rel=1e-12)  # the same canvas, alone
    x2 = torch.tensor([[3, 4, 1, 6, 6, 4, 3, 1]])  # the context's trailing space moved over
    with torch.no_grad():
        logp2 = torch.log_softmax(lm.backbone(x2[:, :-1]).double(), -1)[0]
    assert ll2 == pytest.approx(float(logp2[torch.arange(3, 7), x2[0, 4:]].sum()), rel=1e-6)


def test_mdlm_loglikelihood_is_the_mean_of_the_bound_draws(runs):
    from bench.method import Batch

    lm = _lm(runs["mdlm"], draws=4, seed=5)
    [(ll, greedy)] = lm.loglikelihood([_req("loglikelihood", "3 4 1 6", " 1 3 4 6")])
    assert greedy is False  # a bound says nothing about the argmax
    x = torch.tensor([[3, 4, 1, 6, 1, 3, 4, 6]])
    loss = torch.zeros_like(x, dtype=torch.bool)
    loss[:, 4:] = True
    nll = lm.method.nll_bound(lm.backbone, Batch(x, ~loss, loss), n_draws=4,
                              generator=lm.generator(0))  # fmt: skip
    assert nll.shape == (4, 1) and ll == pytest.approx(-float(nll.mean()), rel=1e-12)
    assert ll < 0
    # same seed, same number; another seed, other draws
    assert _lm(runs["mdlm"], draws=4, seed=5).loglikelihood(
        [_req("loglikelihood", "3 4 1 6", " 1 3 4 6")]
    )[0][0] == pytest.approx(ll, rel=1e-12)
    other = _lm(runs["mdlm"], draws=4, seed=6).loglikelihood(
        [_req("loglikelihood", "3 4 1 6", " 1 3 4 6")]
    )
    assert other[0][0] != ll


def test_short_requests_are_padded_clean_out_of_the_loss(runs, monkeypatch):
    """A request shorter than the model's 8 positions fills the canvas with the pad id (0 for
    sort: no tokenizer), clean and not counted; a long context is cut from the left."""
    lm = _lm(runs["mdlm"])
    seen = []

    def record(backbone, batch, *, n_draws, generator):
        seen.append(batch)
        return torch.zeros((n_draws, len(batch)), dtype=torch.float64)

    monkeypatch.setattr(lm.method, "nll_bound", record)
    lm.loglikelihood(
        [_req("loglikelihood", "7 2", " 1 1 2"), _req("loglikelihood", "9 9 9 7 2 1 1", " 1 2")]
    )
    [b] = seen
    assert b.x.tolist() == [[7, 2, 1, 1, 2, 0, 0, 0], [9, 9, 7, 2, 1, 1, 1, 2]]
    assert b.loss_mask.tolist() == [[i in (2, 3, 4) for i in range(8)], [i >= 6 for i in range(8)]]
    assert (b.clean_mask == ~b.loss_mask).all()


def test_a_task_layout_of_its_own(runs, monkeypatch):
    """A task with its own ``text_canvas`` (a separator after the prompt, as the program tasks'
    ``[BOS] question separator``): the continuation goes where generation writes; a layout with
    no room for it in a row (as Sudoku's, whatever the length) refuses in one line."""
    from bench.config import ConfigError
    from bench.data.base import TaskData
    from bench.data.toy import SortTask

    class WithSeparator(SortTask):
        def text_canvas(self, prompt, suffix, length):
            p = [*self.encode_text(prompt), 9]
            x = torch.tensor([[*p, *([0] * length)]])
            clean = torch.arange(x.shape[1])[None] < len(p)
            return TaskData(x, clean, ~clean, meta={"prompt_len": [len(p)]})

    class FixedLayout(SortTask):
        def text_canvas(self, prompt, suffix, length):
            x = torch.tensor([[*self.encode_text(prompt), 0, 5, 0]])
            clean = torch.tensor([[True] * (x.shape[1] - 3) + [False, True, False]])
            return TaskData(x, clean, ~clean)

    lm = _lm(runs["mdlm"])
    monkeypatch.setattr(lm.task, "__class__", WithSeparator)
    assert lm._request("3 4 1", " 1 3") == ([3, 4, 1, 9, 1, 3], 4, 6)
    # too long: the context loses its first words until the continuation fits after it
    assert lm._request("7 7 3 4 1", " 1 3") == ([7, 7, 3, 4, 1, 9, 1, 3], 6, 8)  # fits
    assert lm._request("6 7 3 4 1 5", " 1 3") == ([7, 3, 4, 1, 5, 9, 1, 3], 6, 8)
    monkeypatch.setattr(lm.task, "__class__", FixedLayout)
    with pytest.raises(ConfigError, match="lays its text out its own way") as e:
        lm._request("3 4 1", " 1 3")
    assert "\n" not in str(e.value)


def test_loglikelihood_rolling_is_lm_evals_windows(runs):
    """MDLM on sort (no BOS / EOS): a text of 7 ids is one window, the loglikelihood of it with
    no context; a longer one is cut into windows that score every id once. AR refuses: nothing
    predicts a first id without a token before it."""
    lm = _lm(runs["mdlm"], draws=2)
    text = "3 4 1 6 1 3 4"
    [r] = lm.loglikelihood_rolling([_req("loglikelihood_rolling", text)])
    [(ll, _)] = lm.loglikelihood([_req("loglikelihood", "", text)])
    assert r == pytest.approx(ll, rel=1e-12)
    long = " ".join(str(i % 10) for i in range(17))
    wins = lm._windows(long)
    assert sum(len(c) for _, c in wins) == 17
    assert all(len(a) + len(c) <= 8 for a, c in wins) and wins[0][0] == []
    assert [w for _, c in wins for w in c] == [i % 10 for i in range(17)]
    with pytest.raises(Exception, match="ar cannot score a text's first token"):
        _lm(runs["ar"]).loglikelihood_rolling([_req("loglikelihood_rolling", text)])


def test_generate_until_samples_at_the_nfe_and_cuts_at_until(runs):
    lm = _lm(runs["mdlm"], nfe=2, seed=3)
    calls = []
    sample = lm.method.sample

    def counted(*a, **kw):
        calls.append(kw["nfe"])
        return sample(*a, **kw)

    lm.method.sample = counted
    out = lm.generate_until(
        [
            _req("generate_until", "3 4 1 6", {"until": ["\n"], "max_gen_toks": 4}),
            _req("generate_until", "3 4 1 6 2 2", {"until": ["\n"], "do_sample": False}),
        ]
    )
    assert calls == [2, 2]
    assert len(out[0].split()) == 4 and all(w.isdigit() for w in out[0].split())
    assert len(out[1].split()) == 2  # the 2 positions the model has left
    again = _lm(runs["mdlm"], nfe=2, seed=3).generate_until(
        [_req("generate_until", "3 4 1 6", {"until": ["\n"], "max_gen_toks": 4})]
    )
    assert again == out[:1]  # same seed, same text
    first = out[0].split()[1]
    cut = _lm(runs["mdlm"], nfe=2, seed=3).generate_until(
        [_req("generate_until", "3 4 1 6", {"until": [f" {first}"], "max_gen_toks": 4})]
    )
    assert cut == [out[0][: out[0].index(f" {first}")]]


def test_a_method_without_a_bound_refuses_likelihoods_in_one_line(runs, monkeypatch):
    """bound_kind "" (CANDI, FLM, S-FLM today; MDLM with it emptied here): the multiple-choice
    task stops with one line; generation tasks run."""
    from bench import registry
    from bench.lmeval.model import NoLikelihoodBound

    monkeypatch.setattr(registry.METHODS["mdlm"], "bound_kind", "")
    with pytest.raises(NoLikelihoodBound) as e:
        _evaluate(monkeypatch, runs["mdlm"], ["sflm_sort_mc"])
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, NotImplementedError)
    assert msg.startswith("sflm-bench: mdlm has no likelihood bound; use generate_until tasks")
    out = _evaluate(monkeypatch, runs["mdlm"], ["sflm_sort_gen"], nfe=2)
    assert 0.0 <= out["results"]["sflm_sort_gen"]["exact_match,none"] <= 1.0


def test_a_reference_format_file_with_task_and_set(tmp_path):
    """A checkpoint names no task: ``task`` and ``set`` (``;``-separated --set items) give it;
    the file is read in memory, nothing is written."""
    ck = reference_checkpoint(tmp_path, "m", "mdlm", {})
    rd = tmp_path / "results"
    lm = _lm(ck, task="sort", set="task.options.n_digits=4", results_dir=str(rd), draws=2)
    assert lm.positions == 8 and lm.method_name == "mdlm" and lm.task.seq_len == 8
    [(ll, _)] = lm.loglikelihood([_req("loglikelihood", "5 4 3 2", " 2 3 4 5")])
    assert ll < 0 and not rd.exists()


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"src": None}, "model_args src=... is required"),
        ({"nfe": 0}, "nfe: must be an integer >= 1"),
        ({"bogus": 1}, "unknown model_args key 'bogus'"),
        ({"decoding": "nope"}, "decoding: mdlm: unknown decoding"),
        ({"task": "sudoku"}, "is a model of task 'sort'"),
    ],
)
def test_bad_model_args_are_one_line(runs, kw, needle):
    from bench.config import ConfigError
    from bench.lmeval.model import SFLMBenchLM

    args = {"src": str(runs["mdlm"]), "device": "cpu", **kw}
    with pytest.raises(ConfigError) as e:
        SFLMBenchLM(**args)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_command_line(runs):
    """``python -m bench.lmeval`` is lm-eval's CLI with the model registered: the legacy form
    (no ``run``), the task file by path, --limit 8."""
    cmd = [
        sys.executable, "-m", "bench.lmeval", "--model", "sflm-bench",
        "--model_args", f"src={runs['ar']},nfe=2", "--tasks",
        "tests/bench/lmeval_tasks/sflm_sort_mc.yaml", "--limit", "8", "--device", "cpu",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "sflm_sort_mc" in p.stdout and "acc" in p.stdout, p.stdout[-2000:]
    assert "sflm-bench ({'src':" in p.stdout and "limit: 8" in p.stdout


def test_command_line_errors_are_one_line_exit_2(monkeypatch, capsys):
    """An adapter error (ConfigError: a bad src, a method without a bound) inside lm-eval's CLI:
    one line on stderr, exit status 2; lm-eval sees the arguments as given."""
    import lm_eval.__main__ as cli

    from bench.config import ConfigError
    from bench.lmeval.__main__ import main

    seen = []

    def fail():
        seen.append(list(sys.argv))
        raise ConfigError("/nonexistent: no such file or folder")

    monkeypatch.setattr(cli, "cli_evaluate", fail)
    assert main(["--model", "sflm-bench", "--tasks", "x"]) == 2
    assert seen == [["lm-eval", "--model", "sflm-bench", "--tasks", "x"]]
    assert sys.argv[0] != "lm-eval"  # restored
    err = capsys.readouterr().err
    assert err == "error: /nonexistent: no such file or folder\n"
