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


def test_readme_drafts_examples_run():
    """The examples of "Drafts, trees and LSE", run in order as one script."""
    text = open(os.path.join(ROOT, "README.md")).read()
    section = re.search(r"## Drafts, trees and LSE\n(.*?)\n## ", text, re.S).group(1)
    code = "\n".join(re.findall(r"```python\n(.*?)```", section, re.S))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=os.path.dirname(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    assert lines["ragged"] == "(16, 16, 64) True", proc.stdout
    assert lines["packed"] == "(5, 16, 64)" and lines["tree"] == "(16, 16, 64)", proc.stdout
    out_err, lse_err = (float(x) for x in lines["merged"].split())
    assert out_err <= 0.02 and lse_err <= 1e-4, proc.stdout
