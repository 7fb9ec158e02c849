"""The README introduces and links; the MkDocs site (docs/, mkdocs.yml) holds the guides, the
results and the reference: every link of the README lands on a file, and the site builds with
``--strict`` (a broken link, a missing page or an API reference to a name that is gone fails)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"(?<!!)\[[^\]]+\]\(([^)#]+)(#[^)]*)?\)")


def test_every_readme_link_lands_on_a_file_and_the_readme_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [m.group(1) for m in LINK.finditer(text) if not m.group(1).startswith("http")]
    assert targets and all((ROOT / t).is_file() for t in targets), [t for t in targets if not (ROOT / t).is_file()]
    assert text.count("\n") < 200  # reference and guides belong in the docs site


@pytest.mark.slow
def test_the_docs_site_builds_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    # not --quiet: it silences the warnings before --strict counts them (a broken link passed)
    assert done.returncode == 0, done.stderr[-2000:]
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    # docstrings' Sphinx roles (:func:`x`) are rewritten by docs/sphinx_roles.py: a link where
    # the object is on the page, its name in code where it is not; none is printed as written
    assert not re.search(r":(func|class|meth|mod|attr|data|exc|obj):", reference)
    assert 'class="autorefs autorefs-internal"' in reference and '<span title="hetsim.' in reference
