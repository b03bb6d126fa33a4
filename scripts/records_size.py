"""The size of a GSM8K cell's records file (1,319 problems), from synthetic records of the real
shape: ``python scripts/records_size.py [OUT_DIR]``.

Each record has what a GSM8K record holds (bench/records.py, ProgramTask.record_fields): a
prompt of 100 ids and its text, 412 output ids (a 150-token program over 300 distinct ids, the
EOS, then the rest of the 512-token canvas) and the output text (the program: text is cut at the
EOS), an 8-line program, the executed answer, the sandbox status and a stdout excerpt, the item's
sampling seconds (its batch of 32's seconds / 32) and the device name. Two
cases: the canvas after the EOS is padding, and the adversarial one where it is uniformly random
ids over 49,152 classes (no trained model writes that entropy). Prints the compressed and
uncompressed sizes.
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

from bench import records

WORDS = "total apples each cost money result return def left after bought sold per day".split()
V, N = 49_152, 1_319
#: a program's ids: code uses a few hundred distinct tokens (a fixed draw of 300 ids)
CODE = random.Random(1).sample(range(V), 300)


def text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def record(rng: random.Random, i: int, junk: bool) -> dict:
    lines = [f"    v{k} = {rng.randint(1, 999)} * {rng.randint(1, 99)}" for k in range(8)]
    prog = "def simple_math_problem():\n" + "\n".join(lines) + "\n    return v0\n"
    tail = [rng.randrange(V) for _ in range(261)] if junk else [2] * 261
    return {
        "cell_id": "0123456789ab", "method": "mdlm", "variant": "base", "subset": "test",
        "index": i, "item": i, "seed": 0, "train_seed": 0, "nfe": 128, "temperature": 1.0,
        "decoding": "ancestral", "prompt": text(rng, 60),
        "output": prog, "target": str(rng.randint(1, 10**5)),
        "correct": rng.randint(0, 1), "prompt_ids": [rng.randrange(V) for _ in range(100)],
        "output_ids": [rng.choice(CODE) for _ in range(150)] + [0] + tail,
        "gold": rng.randint(1, 10**5), "program": prog, "answer": 5, "status": "wrong",
        "detail": "", "stdout": text(rng, 20), "stderr": "", "run_s": 0.05,
        "grader": "standard", "verdict": False,
        "sample_s": random.Random(i // 32).uniform(20.0, 60.0) / 32,
        "device_name": "cuda: NVIDIA H100 80GB HBM3",
    }  # fmt: skip


def main(out: Path) -> None:
    for junk in (False, True):
        rng = random.Random(0)
        recs = [record(rng, i, junk) for i in range(N)]
        name = "junk" if junk else "pad"
        records.write(out, name, recs)
        size = (out / records.relpath(name)).stat().st_size
        raw = len(records.encode(recs))
        case = "random ids after the EOS" if junk else "padding after the EOS"
        print(f"{case}: {size / 1e6:.2f} MB ({raw / 1e6:.2f} MB uncompressed), {N} records")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp()))
