"""The derivation tier is pure tensors: importing every module of it leaves transformers unimported."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_the_derivation_tier_never_imports_transformers():
    modules = sorted(p.stem for p in HERE.glob("test_*.py"))
    code = (f"import sys; sys.path[:0] = [{str(HERE)!r}, {str(HERE.parent)!r}]; "
            f"import {', '.join(modules)}; print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=HERE)
    assert out.stdout.strip() == "[]", f"the derivation tier imports transformers: {out.stdout[:300]}"
