"""The README's example runs as written (on this platform's default backend)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_example_runs():
    text = open(os.path.join(ROOT, "README.md")).read()
    example = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
    proc = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    shape, err = proc.stdout.split(")")[0] + ")", float(proc.stdout.split(")")[1])
    assert shape == "(24, 16, 64" + ")" and err <= 0.05, proc.stdout
