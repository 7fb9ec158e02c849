"""Every command in the code blocks of README.md, the docs (docs/*.md, docs/guide/*.md) and
validation/README.md runs as written and exits 0, so that the documentation cannot drift from
the code.

A command is a line of a ``sh``/``bash`` block (comments dropped, ``\\`` continuations joined)
or a ``$ `` line of any other block (a shown session, as in docs/guide/plan.md). Each document's
commands run in order, in one fresh folder per document (so that a command can use what an
earlier one wrote: ``show paper > my.toml`` then ``simulate my.toml``), whose ``examples``,
``hetsim`` and ``validation`` link to the repository's (the paths the docs name, from the
repository root), with the environment's ``bin`` first on PATH: the shell the docs ask for
(``. .venv/bin/activate``).

Commands that would take minutes here are made smaller, and the few that cannot run here are
skipped, both by the explicit tables below (:data:`SUBSTITUTE`, :data:`SKIP`), each entry with
its reason; a command in neither runs as written. A table entry that no document uses any more
fails the test too, so the tables are reviewed as the docs change.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs" / "guide").glob("*.md")),
    "validation/README.md",  # VALIDATION_README
]
LINKED = ("examples", "hetsim", "validation")  # what the docs' paths start with, from the repository root
TIMEOUT_S = 300  # one command, on a loaded 2-core machine

_VALIDATION_SHORT = "--epochs 1 --probe-repeats 1 --policies equal,dynamic"
_LOADS = "--epochs 1 --probe-repeats 1 --policies equal"  # a workload's two ways in: that it loads and trains
# command as documented -> the smaller one run instead (why: the documented one takes minutes, or
# names a folder another command of the same document made under another name)
SUBSTITUTE: dict[str, str] = {
    # the embedded default's folder comes from `make run` (1120 runs); the document's own sweep made runs/0001_my-sweep
    "python -m hetsim report runs/0001_default": "python -m hetsim report runs/0001_my-sweep",
    # 10 epochs x 4 policies of real training: one epoch of two policies, into a known folder
    "python -m validation run": f"python -m validation run {_VALIDATION_SHORT} --out runs/validation-doc",
    "python -m validation compare runs/validation-<time>": "python -m validation compare runs/validation-doc",
    "python -m validation run --workload examples/my_workload.py:WORKLOAD --global-batch 64":
        f"python -m validation run --workload examples/my_workload.py:WORKLOAD --global-batch 64 {_LOADS}"
        " --out runs/mine-file",
    "HETSIM_PLUGINS=examples/my_workload.py python -m validation run --workload breast-cancer-mlp --global-batch 64":
        "HETSIM_PLUGINS=examples/my_workload.py python -m validation run --workload breast-cancer-mlp "
        f"--global-batch 64 {_LOADS} --out runs/mine-plugin",
    # docs/guide/own-job.md: a profile of a minute and a run of 3 epochs -> the smallest that still profile and train
    "python -m validation profile --workload examples/train_your_model.py:WORKLOAD --slowdown 1,2 --out runs/own-prof":
        "python -m validation profile --workload examples/train_your_model.py:WORKLOAD --slowdown 1,2 --budget-s 3 "
        "--repeats 3 --out runs/own-prof",
    # docs/guide/own-job.md's time to the target: a sweep of one seed at two batches, a run of one epoch
    "python -m validation batch-sweep --workload examples/train_your_model.py:WORKLOAD --base-batch 16 --lr 0.03 "
    "--target 0.95 --seeds 3 --jobs 2 --out runs/own-bs":
        "python -m validation batch-sweep --workload examples/train_your_model.py:WORKLOAD --base-batch 16 --lr 0.03 "
        "--target 0.95 --seeds 1 --batches 1,2 --out runs/own-bs",
    "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py --plan "
    "runs/own-prof/plan-tt.json --slowdown 1,2 --out runs/own-run-tt":
        "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py --plan "
        "runs/own-prof/plan-tt.json --slowdown 1,2 --epochs 1 --probe-repeats 1 --out runs/own-run-tt",
    "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py --plan runs/own-prof/plan.json "
    "--slowdown 1,2 --out runs/own-run":
        "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py --plan "
        "runs/own-prof/plan.json --slowdown 1,2 --epochs 1 --probe-repeats 1 --out runs/own-run",
}  # fmt: skip
# command (or its first words) -> why it is not run here
SKIP: dict[str, str] = {
    "make run": "make install, then the default sweep (1120 runs, minutes here); sweep runs on examples/my-sweep.toml",
    "make test": "the test suite, this test included",
    "make docs": "tests/test_docs_site.py builds the site",
    ". .venv/bin/activate": "this test runs every command with the environment's bin first on PATH, as it does",
    "torchrun --nproc-per-node 2 -m validation.train": "GPU runs (--devices cuda): no GPU here",
    "torchrun --nnodes 2": "two machines (HOST) with GPUs",
    "torchrun --nproc-per-node 2 --master-addr 127.0.0.1 examples/train_your_model.py --plan plan.json --out RUN":
        "plan.json comes from the skipped plan of SCENARIO (docs/guide/own-job.md runs this line on its own profile)",
    "python -m validation matrix": "the fidelity benchmark: 4-5 minutes of real runs (validation/matrix.py is tested)",
    "python -m validation profile --workload examples/my_workload.py:WORKLOAD": "a minute of measuring (docs/guide/"
        "own-job.md runs a smaller profile of the example's model)",
    "python -m validation profile --workload resnet18 --devices cuda:0,cuda:1": "needs GPUs (cuda:0,cuda:1)",
    ".venv/bin/python benchmarks/profile_agreement.py": "a benchmark of minutes",
    # placeholders in sections of validation/README.md still being written (profiling; the trainer in your script)
    "python -m validation compare RUN": "RUN stands for the folder of a torchrun on GPUs (skipped)",
    "python -m hetsim calibrate RUN/trace.parquet": "RUN stands for the folder of a torchrun on GPUs (skipped)",
    "python -m hetsim plan runs/mine/scenario.toml": "reads what the skipped profile command writes",
    "python -m hetsim plan SCENARIO": "SCENARIO stands for a profiled scenario (the profile command is skipped)",
}  # fmt: skip


def commands(text: str) -> list[str]:
    """The commands of a Markdown text's code blocks (see the module's docstring)."""
    found: list[str] = []
    for info, body in re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.M | re.S):
        lines = body.replace("\\\n", " ").splitlines()
        if info in ("sh", "bash"):
            found += [_strip_comment(line) for line in lines]
        else:
            found += [line[2:].strip() for line in lines if line.startswith("$ ")]
    return [" ".join(c.split()) for c in found if c.strip()]


def _strip_comment(line: str) -> str:
    """A shell line without its trailing ``# comment`` (a ``#`` inside quotes is kept)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: not a command line
        return ""
    if not words:
        return ""
    end = line.find("#", len(line) - len(line.lstrip()))  # the first # outside quotes ends the command
    while end != -1:
        head = line[:end]
        if head.count('"') % 2 == 0 and head.count("'") % 2 == 0 and (end == 0 or line[end - 1].isspace()):
            return head.rstrip()
        end = line.find("#", end + 1)
    return line.rstrip()


def skip_reason(command: str) -> str | None:
    for prefix, why in SKIP.items():
        if command == prefix or command.startswith(prefix + " "):
            return why
    return None


def plan(document: str) -> list[tuple[str, str | None]]:
    """(command to run, None) or (documented command, why skipped), in the document's order."""
    out: list[tuple[str, str | None]] = []
    for command in commands((ROOT / document).read_text(encoding="utf-8")):
        why = skip_reason(command)
        out.append((command, why) if why else (SUBSTITUTE.get(command, command), None))
    return out


def environment() -> dict[str, str]:
    venv = Path(sys.executable).parent  # the environment's bin, as `. .venv/bin/activate` puts first
    env = {k: v for k, v in os.environ.items() if k not in ("HETSIM_PLUGINS", "PYTHONPATH")}
    env["PATH"] = f"{venv}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv.parent)
    env["MPLBACKEND"] = "Agg"
    return env


def run_document(document: str, folder: Path) -> list[str]:
    """Run ``document``'s commands in ``folder``; return a line per failure (empty: all passed)."""
    for name in LINKED:
        (folder / name).symlink_to(ROOT / name)
    failures = []
    for command, skipped in plan(document):
        if skipped:
            continue
        done = subprocess.run(
            ["bash", "-c", command], cwd=folder, env=environment(), capture_output=True, text=True, timeout=TIMEOUT_S
        )
        if done.returncode != 0:
            tail = (done.stderr.strip() or done.stdout.strip()).splitlines()[-3:]
            failures.append(f"{document}: `{command}` exited {done.returncode}: {' | '.join(tail)}")
    return failures


def _runnable(document: str) -> list[str]:
    return [c for c, why in plan(document) if why is None]


OWN_JOB_DOC = "docs/guide/own-job.md"
VALIDATION_README = "validation/README.md"
PROFILER_DOC = "docs/guide/profiler-traces.md"
# document -> the test that runs its commands (with this module's run_document, so as written or as
# the tables above say) and also checks what they write: run there, not again here
RUN_ELSEWHERE = {
    OWN_JOB_DOC: "tests/test_trainer_api.py::test_your_own_job_profile_plan_train_compare",
    VALIDATION_README: "tests/test_validation_dist.py::test_the_readme_runs_write_what_they_say_and_compare_reads_them",
    PROFILER_DOC: "tests/test_import_trace_run.py::test_profiled_run_imports_as_its_own_trace",
}
RUN_HERE = [  # a document whose commands repeat an earlier one's, in order (docs/guide/using.md: the README's), once
    d for i, d in enumerate(DOCUMENTS)
    if d not in RUN_ELSEWHERE and _runnable(d) and all(_runnable(e) != _runnable(d) for e in DOCUMENTS[:i])
]  # fmt: skip


# Not marked multiprocess although a document's commands may start ranks: it checks exit statuses
# only (no timing, no processes of its own), so it runs beside other tests on make test's parallel lane.
@pytest.mark.slow
@pytest.mark.parametrize("document", RUN_HERE)
def test_every_documented_command_runs_as_written(document, tmp_path):
    assert run_document(document, tmp_path) == []


def test_the_documents_run_elsewhere_exist_and_have_commands():
    assert all(d in DOCUMENTS and _runnable(d) for d in RUN_ELSEWHERE)


def test_the_tables_name_commands_the_docs_still_have():
    documented = [c for d in DOCUMENTS for c in commands((ROOT / d).read_text(encoding="utf-8"))]
    assert [c for c in SUBSTITUTE if c not in documented] == []
    assert [p for p in SKIP if not any(c == p or c.startswith(p + " ") for c in documented)] == []


def test_commands_are_found_in_every_kind_of_block():
    text = (
        "```sh\nmake run    # a comment\npython -m hetsim show paper > my.toml   # print\n"
        "HETSIM_PLUGINS=a.py python -m hetsim simulate --set 'name=\"a # b\"'\n```\n"
        "```\n$ python -m hetsim plan x \\\n    --json\nnot a command\n```\n"
    )
    assert commands(text) == [
        "make run",
        "python -m hetsim show paper > my.toml",
        "HETSIM_PLUGINS=a.py python -m hetsim simulate --set 'name=\"a # b\"'",
        "python -m hetsim plan x --json",
    ]
