"""``python -m bench.sweep``: forwards to :mod:`bench.commands.sweep`, where the command lives."""

from __future__ import annotations

from bench.commands.sweep import main, main_and_exit  # noqa: F401

if __name__ == "__main__":
    main_and_exit()
