"""alpha* (sflm.alpha_star): paper eq. alpha-crit, its Monte-Carlo check, the exact root, the
table."""

from __future__ import annotations

import math

import pytest

from sflm.alpha_star import alpha_star, alpha_star_model, alpha_star_table, check_alpha_star

# ------------------------------------------------------------------ alpha*


@pytest.mark.parametrize(
    "V,d,delta,expected",
    [
        (12, 512, 0.1, 0.0927),  # reference scripts/train/sudoku/sfm_truncated.sh: alpha_max 0.093
        (12, 512, 0.01, 0.1109),
        (50_000, 768, 0.1, 0.1215),  # TinyGSM / OWT 0.121 (ablation: 1 - 0.121 = 0.879)
        (50_000, 768, 0.01, 0.1314),  # 1 - 0.131 = 0.869
        (49_153, 768, 0.1, 0.1214),  # SmolLM vocabulary
        (10, 64, 0.1, 0.264),  # sort-8 on a d = 64 model (SFLM.learnability_options)
    ],
)
def test_alpha_star_values(V, d, delta, expected):
    assert alpha_star(V, d, delta) == pytest.approx(expected, abs=6e-4)


def test_alpha_star_paper_grid():
    """Every entry of the paper's table tab:alpha-crit-grid (3 decimals)."""
    table = {
        12: [
            (256, 0.132, 0.158),
            (512, 0.093, 0.111),
            (768, 0.076, 0.090),
            (1024, 0.065, 0.078),
            (4096, 0.033, 0.039),
        ],
        50_000: [
            (256, 0.213, 0.231),
            (512, 0.149, 0.161),
            (768, 0.121, 0.131),
            (1024, 0.105, 0.114),
            (4096, 0.052, 0.057),
        ],
        100_000: [
            (256, 0.219, 0.236),
            (512, 0.153, 0.165),
            (768, 0.125, 0.134),
            (1024, 0.108, 0.116),
            (4096, 0.054, 0.058),
        ],
    }
    for V, rows in table.items():
        for d, a1, a01 in rows:
            assert round(alpha_star(V, d, 0.1), 3) == pytest.approx(a1, abs=1.1e-3)
            assert round(alpha_star(V, d, 0.01), 3) == pytest.approx(a01, abs=1.1e-3)


def test_alpha_star_monotone_and_errors():
    assert alpha_star(12, 256, 0.1) > alpha_star(12, 512, 0.1)  # more room in higher d
    assert alpha_star(50_000, 512, 0.1) > alpha_star(12, 512, 0.1)  # more competitors
    assert alpha_star(12, 512, 0.01) > alpha_star(12, 512, 0.1)  # higher confidence
    assert alpha_star(10, 4, 0.1) == 1.0  # vacuous bound -> no truncation
    for bad in [(1, 64, 0.1), (10, 0, 0.1), (10, 64, 0.0), (10, 64, 1.5)]:
        with pytest.raises(ValueError, match="alpha_star"):
            alpha_star(*bad)


def test_monte_carlo_reduction_matches_literal_codebooks():
    """The reduced sampler (no vectors) and the quadrature reproduce a literal simulation with
    explicit random codebooks, at alpha* and at a smaller alpha where the bound fails."""
    V, d = 12, 64
    for alpha in (alpha_star(V, d, 0.1), 0.1):
        lit = check_alpha_star(V, d, 0.1, alpha=alpha, n_trials=4000, method="codebook", seed=1)
        red = check_alpha_star(V, d, 0.1, alpha=alpha, n_trials=40_000, method="reduced", seed=2)
        quad = check_alpha_star(V, d, 0.1, alpha=alpha, method="quadrature")
        tol = 4 * math.hypot(lit.stderr, red.stderr)
        assert abs(lit.p_nearest - red.p_nearest) < tol
        assert abs(quad.p_nearest - red.p_nearest) < 4 * red.stderr + 1e-3
    assert (
        check_alpha_star(V, d, 0.1, alpha=0.1, method="quadrature").p_nearest < 0.9
    )  # below alpha*: fails


def test_alpha_star_probability_near_one_minus_delta():
    """At alpha*(delta) the target is the nearest neighbour with probability close to 1 - delta.
    Measured (quadrature = Monte-Carlo): |V| = 12, d = 512: 0.942 (delta 0.1), 0.985 (0.01);
    |V| = 50,000, d = 768: 0.875 / 0.948; |V| = 100,000, d = 4096, delta 0.01: 0.926. The formula
    is an approximation (w = pi/2, union bound): it holds at small |V| for delta = 0.1 and the
    failure rate reaches a few times delta at large |V| and small delta."""
    for V, d, delta in [(12, 512, 0.1), (12, 512, 0.01), (50_000, 768, 0.1), (100_000, 4096, 0.01)]:
        r = check_alpha_star(V, d, delta, n_trials=20_000, seed=3)
        q = check_alpha_star(V, d, delta, method="quadrature")
        assert abs(r.p_nearest - q.p_nearest) < 4 * r.stderr + 1e-3
        assert 0.3 * delta < 1 - q.p_nearest < 8 * delta, q
        assert r.holds == (r.p_nearest >= 1 - delta)
    assert check_alpha_star(12, 512, 0.1, method="quadrature").holds
    assert not check_alpha_star(50_000, 768, 0.1, method="quadrature").holds
    chance = check_alpha_star(12, 512, 0.1, alpha=0.0, method="quadrature").p_nearest
    assert chance == pytest.approx(1 / 12, abs=2e-3)


def test_alpha_star_model_solves_the_exact_condition():
    a = alpha_star_model(50_000, 768, 0.1)
    assert a == pytest.approx(0.1242, abs=1e-3)  # vs the formula's 0.1215
    p = check_alpha_star(50_000, 768, 0.1, alpha=a, method="quadrature").p_nearest
    assert p == pytest.approx(0.9, abs=1e-4)


def test_alpha_star_table_rows():
    rows = alpha_star_table((12,), (256, 512), (0.1,), n_trials=2000)
    assert [(r["vocab_size"], r["dim"], r["delta"]) for r in rows] == [
        (12, 256, 0.1),
        (12, 512, 0.1),
    ]
    assert rows[1]["alpha"] == pytest.approx(alpha_star(12, 512, 0.1))
    assert set(rows[0]) >= {"p_nearest", "stderr", "holds", "n_trials", "method"}
