"""``<task>_samplers.md``: each trained model's best sampler against its paper sampler, at each
NFE and within a budget of sampling seconds, and the rankings that change, from a synthetic store
with per-item outcomes."""

import numpy as np
import pandas as pd
from helpers import outcome_row

from bench import report
from bench.results import Store

N = 300


def _row(method, seed, p, decoding, *, nfe, sps, rng, sampling="", paper=False, variant="base"):
    out = rng.random(N) < p
    return outcome_row(
        method,
        seed,
        out,
        variant=variant,
        decoding=decoding,
        sampling=sampling,
        default_decoding=paper,
        recipe=f'{{"{method}": 1}}',
        nfe=nfe,
        nfe_is_length=False,
        seconds_per_sample=sps,
        train_steps=100,
        subset_rank=0,
    )


def _store(tmp_path):
    rng = np.random.default_rng(0)
    s = Store(tmp_path)
    i = 0
    for seed in (0, 1):
        for nfe in (8, 16):
            cells = [
                # mdlm: the paper's sampler at 0.5; remdm (twice the seconds) at 0.8
                ("mdlm", 0.5, "ancestral", "", True, 0.01 * nfe),
                ("mdlm", 0.8, "remdm", "", False, 0.02 * nfe),
                # duo: the paper's sampler at 0.6; nucleus no better
                ("duo", 0.6, "ancestral", "", True, 0.01 * nfe),
                ("duo", 0.6, "ancestral", '{"top_p": 0.9}', False, 0.011 * nfe),
                # flm: one sampler only: ranks with it
                ("flm", 0.4, "euler", "", True, 0.01 * nfe),
            ]
            for method, p, dec, samp, paper, sps in cells:
                variant = "topp" if samp else "base"
                row = _row(
                    method, seed, p, dec, nfe=nfe, sps=sps, rng=rng, sampling=samp,
                    paper=paper, variant=variant,
                )  # fmt: skip
                s.write_cell(f"c{i}", [row])
                i += 1
    return s


def _table(text, heading):
    part = text.split(heading, 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in part.splitlines() if ln.startswith("|") and not ln.startswith("|---")]
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return pd.DataFrame(body[1:], columns=body[0])


def test_best_sampler_per_method_and_the_rankings_it_changes(tmp_path):
    _store(tmp_path)
    assert report.main(["--results-dir", str(tmp_path)]) == 0
    md = (tmp_path / "report" / "sudoku_samplers.md").read_text()
    t = _table(md, "## At each NFE")
    assert set(t["model"]) == {"mdlm", "duo", "flm"}  # flm, one sampler only, ranks with it
    a16 = t[(t["model"] == "flm") & (t["NFE"] == "16")].iloc[0]
    assert a16["best - paper [95 % CI]"] == "0 (the paper's)" and a16["rank (paper -> best)"] == (
        "3 -> 3"
    )
    m16 = t[(t["model"] == "mdlm") & (t["NFE"] == "16")].iloc[0]
    assert m16["paper's sampler"].startswith("ancestral (NFE 16")
    assert m16["best sampler"].startswith("remdm (NFE 16")
    diff, ci = m16["best - paper [95 % CI]"].split(" [")
    low, high = (float(x) for x in ci.rstrip("]").split(", "))
    assert 20 < float(diff) < 40 and 0 < low <= float(diff) <= high  # 0.8 - 0.5, separated
    assert m16["rank (paper -> best)"] == "2 -> 1 *"
    d16 = t[(t["model"] == "duo") & (t["NFE"] == "16")].iloc[0]
    assert d16["rank (paper -> best)"] == "1 -> 2 *"
    assert "mdlm now above duo" in md
    # within the budget of NFE 8 (0.08 s) mdlm's remdm (0.16 s at NFE 8) does not fit: its best
    # there is its paper sampler
    b = _table(md, "## At equal sampling seconds")
    m8 = b[(b["model"] == "mdlm") & b["budget"].str.contains("NFE 8")].iloc[0]
    assert m8["best sampler"].startswith("ancestral (NFE 8") and m8["rank (paper -> best)"] == (
        "2 -> 2"
    )
    # the budget of NFE 16 (0.16 s) holds remdm at NFE 8 (0.16 s)
    m16b = b[(b["model"] == "mdlm") & b["budget"].str.contains("NFE 16")].iloc[0]
    assert m16b["best sampler"].startswith("remdm (NFE 8")
    from bench.report.samplers import sampler_rows

    names = set(sampler_rows("sudoku", Store(tmp_path).read())["sampler"])
    assert names == {"ancestral", "remdm", "ancestral [topp]", "euler"}
    assert "- duo/topp: top_p=0.9" in md  # the legend names the options
