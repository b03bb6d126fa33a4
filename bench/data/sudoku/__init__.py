"""The Sudoku task family (paper, "Reasoning on Sudoku"): :mod:`~bench.data.sudoku.task` (the
task), :mod:`~bench.data.sudoku.solver` (solver and unique-solution puzzle generator),
:mod:`~bench.data.sudoku.splits` (seeded puzzle streams, split rules, the cache),
:mod:`~bench.data.sudoku.format` (token layout and loss masks), :mod:`~bench.data.sudoku.score`
(the scorer) and :mod:`~bench.data.sudoku.reference` (the paper harness's own 9x9 puzzles)."""
