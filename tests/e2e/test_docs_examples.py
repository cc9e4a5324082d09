"""Every `$ plan ...` line in the ```console blocks of docs/quickstart.md, docs/cli.md and docs/runs-schema.md
runs and exits as documented (0, or the code of a trailing `# exit N` comment). A ```yaml block whose first
line is `# NAME.yaml: ...` is written to NAME.yaml in the working directory first (docs/runs-schema.md's
example runs file goes through `plan validate` and `plan calibrate`)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from support import run_cli

DOCS = Path(__file__).parents[2] / "docs"
PAGES = ("quickstart.md", "cli.md", "runs-schema.md")


def example_files(page: str) -> dict[str, str]:
    """name -> text of every ```yaml block of `page` whose first line names its file (`# NAME.yaml: ...`)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return {m.group(1): m.group(0)[len("```yaml\n"):] for m in
            re.finditer(r"```yaml\n# ([\w.-]+\.ya?ml):[^\n]*\n.*?(?=```)", text, re.S)}


def console_commands(page: str) -> list[tuple[str, list[str], dict, int]]:
    """(line, argv after `plan`, env, expected exit code) of every `$ plan` line in ```console blocks."""
    text = (DOCS / page).read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.startswith("$ "):
                continue
            code = re.search(r"#\s*exit\s+(\d)", line)
            words = shlex.split(line[2:], comments=True)
            env = {}
            while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                k, v = words.pop(0).split("=", 1)
                env[k] = v
            assert words and words[0] == "plan", line
            out.append((line, words[1:], env, int(code.group(1)) if code else 0))
    return out


EXAMPLES = [(page, *c) for page in PAGES for c in console_commands(page)]


def test_every_page_has_examples():
    for page in PAGES:
        assert len(console_commands(page)) >= 5, page
    assert set(example_files("runs-schema.md")) == {"my_runs.yaml", "typo_runs.yaml"}


def test_the_typo_example_is_refused_with_its_fix(tmp_path, monkeypatch):
    """docs/runs-schema.md's misspelt key: one line on stderr naming the key and the one meant."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo_runs.yaml").write_text(example_files("runs-schema.md")["typo_runs.yaml"], encoding="utf-8")
    r = run_cli("validate", "--runs", "typo_runs.yaml")
    assert r.exit_code == 2
    assert "unknown field measured.step_time; did you mean measured.step_time_s?" in r.stderr


@pytest.mark.parametrize("page,line,argv,env,code", EXAMPLES, ids=[f"{e[0]}:{' '.join(e[2])[:60]}" for e in EXAMPLES])
def test_documented_example_runs(page, line, argv, env, code, tmp_path, monkeypatch):
    from planner.catalog.models import get_catalog_entry

    monkeypatch.chdir(tmp_path)
    # the user's own Hugging Face config.json that the quickstart reads
    (tmp_path / "config.json").write_text(json.dumps(get_catalog_entry("llama-3.1-8b").hf_config))
    for name, text in example_files(page).items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    r = run_cli(*argv, env=env)
    assert r.exit_code == code, (line, r.exit_code, r.stderr[-500:])
    if code:
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:")
    if "--json" in argv:
        json.loads(r.stdout)
    if "--out" in argv:
        target = tmp_path / argv[argv.index("--out") + 1]
        assert target.exists()
