"""The lm-evaluation-harness adapter (``bench.lmeval``, the optional extra ``lmeval``): lm-eval's
``simple_evaluate`` and its command line (``python -m bench.lmeval``) run the local task files
of ``lmeval_tasks/`` (8 sort-4 items, multiple choice and generation) on the tiny sort-4 runs of
``eval_runs`` (AR: exact NLL; MDLM: its NELBO); a loglikelihood is the method's own
``nll_bound`` (AR: the chain rule computed here); ``is_greedy`` (lm-eval's ``acc``) of MDLM and
Duo is checked on scripted denoisers whose greedy continuation is known, by both rules; a method
without a bound refuses likelihood requests with one line and still generates. Skips without
lm-eval; fails instead under ``SFLM_REQUIRE_LMEVAL=1`` or CI (scripts/setup.sh installs the
extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
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
    x = torch.tensor([[3, 4, 1, 6, 1, 3, 4, 6]])
    # is_greedy (greedy=one_pass): the argmax of one call on the continuation all [MASK]
    noised = x.masked_fill(torch.arange(8) >= 4, lm.method.mask_id)
    with torch.no_grad():
        logp = lm.method.log_probs(lm.backbone, noised, lm.method.alpha(torch.ones(1)).float())
    assert greedy is bool((logp[0, 4:].argmax(-1) == x[0, 4:]).all())
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


class Scripted(torch.nn.Module):
    """A denoiser (``backbone(x, sigma)``) whose greedy continuation is known, on sort-4 canvases
    (4 context ids, then the continuation). ``ahead``: position i predicts x[3] + i - 3 (mod 10),
    whatever the noised positions hold, so "3 4 1 6" continues "7 8 9 0" by either rule.
    ``chain``: position i predicts x[i - 1] + 1 (mod 10), 0 after a [MASK], with more confidence
    the further left: for MDLM one pass gives "7 0 0 0", a decode one position per step
    "7 8 9 0", two steps "7 0 1 0". ``sigmas``: the time inputs of its calls, in order."""

    def __init__(self, kind: str, classes: int):
        super().__init__()
        self.kind, self.classes, self.sigmas = kind, classes, []

    def forward(self, x, sigma):
        self.sigmas.append(sigma.detach().clone())
        L = x.shape[1]
        if self.kind == "ahead":
            target, conf = (x[:, 3:4] + torch.arange(L) - 3) % 10, torch.full((L,), 4.0)
        else:
            prev = torch.cat([x[:, :1], x[:, :-1]], 1)
            target, conf = torch.where(prev < 10, (prev + 1) % 10, 0), 10.0 - torch.arange(L)
        return F.one_hot(target, self.classes).float() * conf[:, None]


@pytest.fixture(scope="module")
def duo_ckpt(tmp_path_factory):
    """A random tiny Duo model of sort-4 (the trained runs hold MDLM and AR only)."""
    return reference_checkpoint(tmp_path_factory.mktemp("duo"), "d", "duo", {})


def _scripted(runs, duo_ckpt, method, kind, **kw):
    if method == "mdlm":
        lm = _lm(runs["mdlm"], draws=1, **kw)
    else:
        lm = _lm(duo_ckpt, task="sort", set="task.options.n_digits=4", draws=1, **kw)
    assert lm.method_name == method
    lm.backbone = Scripted(kind, lm.method.vocab_size + (method == "mdlm"))  # MDLM: + [MASK]
    return lm


def _greedy(lm, *continuations, context="3 4 1 6"):
    reqs = [_req("loglikelihood", context, f" {c}") for c in continuations]
    return [g for _, g in lm.loglikelihood(reqs)]


@pytest.mark.parametrize("method", ["mdlm", "duo"])
@pytest.mark.parametrize("rule", ["one_pass", "decode"])
def test_is_greedy_of_a_known_denoiser(runs, duo_ckpt, method, rule):
    """The greedy continuation gives is_greedy True (lm-eval's acc 1), any other False (acc 0),
    for a short one too; the rule and its steps are in get_model_info."""
    lm = _scripted(runs, duo_ckpt, method, "ahead", greedy=rule)
    got = _greedy(lm, "7 8 9 0", "1 3 4 6", "7 8 9 1", "6 8 9 0", "7 8")
    assert got == [True, False, False, False, True]
    info = lm.get_model_info()
    steps = 1 if rule == "one_pass" else "one per continuation token"
    assert (info["sflm_greedy"], info["sflm_greedy_steps"]) == (rule, steps)


def test_mdlm_one_pass_and_decode_differ(runs, duo_ckpt):
    """The chain denoiser: one call sees every other continuation position masked; a decode
    reveals the most confident position(s) first and calls again on them (one per step, or
    greedy_steps=2: two per step); one network call per step after the bound's draw."""
    conts = ["7 0 0 0", "7 8 9 0", "7 0 1 0"]
    cases = [({}, conts[0], 1), ({"greedy": "decode"}, conts[1], 4)]
    cases.append(({"greedy": "decode", "greedy_steps": 2}, conts[2], 2))
    for kw, right, calls in cases:
        lm = _scripted(runs, duo_ckpt, "mdlm", "chain", **kw)
        assert _greedy(lm, *conts) == [c == right for c in conts]
        assert len(lm.backbone.sigmas) == 1 + calls


def test_duo_noises_the_continuation_uniformly_at_t_1(runs, duo_ckpt):
    """Duo has no [MASK]: the continuation starts as uniform ids (its sampler's prior) at t = 1,
    sigma = -log eps; a decode (chain denoiser) reveals left to right on t = 1, 0.75, 0.5, 0.25
    and reaches "7 8 9 0"; the noise comes from the greedy stream, not the bound's draws."""
    eps = torch.tensor(1e-3, dtype=torch.float64)
    lm = _scripted(runs, duo_ckpt, "duo", "chain", greedy="decode")
    assert _greedy(lm, "7 8 9 0", "7 0 0 0") == [True, False]
    alpha = 1 - (1 - eps) * torch.linspace(1.0, 1e-5, 5, dtype=torch.float64)[:4]
    got = torch.stack([s[0] for s in lm.backbone.sigmas[1:]]).double()
    assert torch.allclose(got, -torch.log(alpha), atol=1e-5)
    lm = _scripted(runs, duo_ckpt, "duo", "ahead")
    [(ll, _)] = lm.loglikelihood([_req("loglikelihood", "3 4 1 6", " 7 8 9 0")])
    assert float(lm.backbone.sigmas[1][0]) == pytest.approx(-float(torch.log(eps)), rel=1e-6)
    off = _scripted(runs, duo_ckpt, "duo", "ahead", greedy="off")
    [(ll_off, g)] = off.loglikelihood([_req("loglikelihood", "3 4 1 6", " 7 8 9 0")])
    assert ll_off == ll and g is False and len(off.backbone.sigmas) == 1


def test_greedy_off_and_a_method_without_a_check_are_flagged(runs, caplog):
    """greedy=off: is_greedy False, warned, recorded; a bound method with no check here (a
    plug-in's) refuses an explicit rule in one line and is off, warned, by default."""
    from bench.config import ConfigError

    with caplog.at_level("WARNING", logger="bench.lmeval.model"):
        lm = _lm(runs["mdlm"], greedy="off", draws=1)
    assert "acc of loglikelihood tasks reads 0" in caplog.text
    info = lm.get_model_info()
    assert (info["sflm_greedy"], info["sflm_greedy_steps"]) == ("off", None)
    assert _greedy(lm, "1 3 4 6") == [False]
    lm.greedy_family = None  # as a plug-in method with a bound but no denoiser known here
    with pytest.raises(ConfigError, match="model_args greedy: mdlm has no greedy check") as e:
        lm._greedy_rule("decode", explicit=True)
    assert "\n" not in str(e.value)
    caplog.clear()
    with caplog.at_level("WARNING", logger="bench.lmeval.model"):
        assert lm._greedy_rule("one_pass", explicit=False) == "off"
    assert "is_greedy is False for every request" in caplog.text
    ar = _lm(runs["ar"], greedy="decode").get_model_info()  # AR: its argmax chain either way
    assert (ar["sflm_greedy"], ar["sflm_greedy_steps"]) == ("left_to_right", 1)


def test_acc_of_a_loglikelihood_task_through_simple_evaluate(runs, duo_ckpt, tmp_path):
    """A loglikelihood task (the 8 sort items, every other target the scripted model's greedy
    continuation, the others the sorted digits): lm-eval's acc is 0.5, the rule in its config."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    items = [json.loads(line) for line in (TASKS / "sflm_sort.jsonl").read_text().splitlines()]
    rows = []
    for i, it in enumerate(items):
        last = int(it["digits"].split()[-1])
        ahead = " ".join(str((last + j) % 10) for j in range(1, 5))
        assert ahead != it["sorted"]
        rows.append({"digits": it["digits"], "target": ahead if i % 2 == 0 else it["sorted"]})
    data = tmp_path / "greedy.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "greedy.yaml").write_text(
        "task: sflm_sort_greedy\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\noutput_type: loglikelihood\ntest_split: test\n"
        'doc_to_text: "{{digits}}"\ndoc_to_target: " {{target}}"\n'
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
        "metadata:\n  version: 1.0\n"
    )
    lm = _scripted(runs, duo_ckpt, "mdlm", "ahead")
    tm = TaskManager(include_path=str(tmp_path), include_defaults=False)
    out = simple_evaluate(model=lm, tasks=["sflm_sort_greedy"], task_manager=tm, limit=8)
    assert out["results"]["sflm_sort_greedy"]["acc,none"] == 0.5
    assert out["config"]["sflm_greedy"] == "one_pass" and out["config"]["sflm_greedy_steps"] == 1


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
        ({"greedy": "argmax"}, "model_args greedy: one of one_pass, decode, off, got 'argmax'"),
        ({"greedy_steps": 0}, "model_args greedy_steps: must be an integer >= 1"),
        ({"greedy_steps": 2}, "model_args greedy_steps: only with greedy=decode"),
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

    from bench.commands.lmeval import main
    from bench.config import ConfigError

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
