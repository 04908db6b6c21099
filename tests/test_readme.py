"""The README is what a newcomer reads first (issue 55 item 5: about 200 lines, the rest in docs/
pages that mkdocs builds strictly), and it and the pages tell one current story (issue 37 item 2):
the two set-up lines that .ci/run runs on the README's first screen, every measured figure in one
dated table (docs/results.md) that names its card and part of bench/RESULTS.md, and the README's
small table drawn from it, no superseded "not yet rerun" lines, the vLLM 0.33 user's plan, and the
MoE example's requirement quoted as the planner words it. Issue 44 item 6: every part a page names
is one of bench/RESULTS.md's (a range too), the newest has a row in the table, the parity table and
the plugin's GPU runs are named by their parts, and the FlashInfer pins are the release table's and
the `flashinfer` extra's. Issue 55 item 5: every page is in mkdocs.yml's nav, the README's links
reach files and headings that exist, and no install line names a package the project does not own
on PyPI."""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

from planner.engine.releases import VLLM_RELEASES
from planner.plan.stages.vllm_fused_moe import no_tables_gap
from planner.tables.vllm_moe import CONFIGS_ENV, HOW

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def text_of(*path: str) -> str:
    with open(os.path.join(ROOT, *path), encoding="utf-8") as f:
        return f.read()


README = text_of("README.md")
LINES = README.splitlines()
RESULTS = text_of("bench", "RESULTS.md")
DOCS_DIR = os.path.join(ROOT, "docs")
# docs/ as mkdocs builds it: path relative to docs/ -> text
DOCS = {os.path.relpath(path, DOCS_DIR): text_of(path)
        for path in sorted(glob.glob(os.path.join(DOCS_DIR, "**", "*.md"), recursive=True))}
# The pages where the README's moved sections now live.
GETTING_STARTED = DOCS["getting-started.md"]
RESULTS_PAGE = DOCS["results.md"]
PLUGIN_PAGE = DOCS[os.path.join("guides", "vllm-plugin.md")]
EVERYTHING = {"README.md": README, **{os.path.join("docs", name): text for name, text in DOCS.items()}}
MAX_README_LINES = 250


def section(title: str, text: str = README) -> str:
    """From the heading `title` (any level) to the next heading of that level or above, outside code."""
    lines, start, level, fenced = text.splitlines(keepends=True), None, 0, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if heading and start is None and heading.group(2).strip() == title:
            start, level = i, len(heading.group(1))
        elif heading and start is not None and len(heading.group(1)) <= level:
            return "".join(lines[start:i])
    assert start is not None, f"no heading {title!r}"
    return "".join(lines[start:])


def table_rows(text: str) -> list[list[str]]:
    """The cells of a measured-results table's rows (those that start with a date)."""
    return [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| 2026-")]


def test_the_two_set_up_lines_are_on_the_first_screen_and_the_tests_judge_their_skips():
    first_screen = LINES[:30]
    main = first_screen.index(next(line for line in first_screen if line.startswith("# main job:")))
    tests = first_screen.index(next(line for line in first_screen if line.startswith("# tests:")))
    assert first_screen[main + 1].startswith("python3 -m pip install . && warmup plan ")
    assert first_screen[tests + 1].endswith("python3 -m pytest -q --allowed-skips-only")
    assert "virtual environment of its own" in section("Set up")   # the test line replaces vLLM's torch
    # .ci/run reads the README's lines; the getting-started page shows the very same two
    for label in ("# main job:", "# tests:"):
        docs_lines = GETTING_STARTED.splitlines()
        at = next(i for i, line in enumerate(docs_lines) if line.startswith(label))
        assert docs_lines[at:at + 2] == LINES[LINES.index(docs_lines[at]):LINES.index(docs_lines[at]) + 2]
    assert "virtual environment of its own" in section("Set up", GETTING_STARTED)


# bench/RESULTS.md's parts: `## AA. title`, `## C4 / E3 / P. title`, and sub-parts named in a
# heading's parentheses (`### `warmup plan` (A3, this machine, ...)`, `### ... (E3)`).
PART = r"[A-Z]{1,2}[0-9]?"


def result_parts() -> dict[str, str]:
    """part -> the text of its section (from its heading to the next heading of a part)."""
    heads = []
    for m in re.finditer(rf"^##+ ({PART}(?: / {PART})*)\. .*$|^##+ .*\(({PART})[,)].*$", RESULTS, re.MULTILINE):
        names = (m.group(1) or m.group(2)).split(" / ")
        heads.append((m.start(), names))
    parts = {}
    for i, (start, names) in enumerate(heads):
        end = heads[i + 1][0] if i + 1 < len(heads) else len(RESULTS)
        for name in names:
            parts.setdefault(name, RESULTS[start:end])
    return parts


def order(part: str) -> tuple:
    """The lettering order: A < ... < Z < AA < AB (digits mark a sub-part: A2 after A)."""
    letters = part.rstrip("0123456789")
    return len(letters), letters, part[len(letters):]


def named_parts(text: str) -> list[tuple[str, list[str]]]:
    """(the words, the parts) of every `part X` / `parts X, Y and Z` / `parts S to U and W to AA`."""
    found = []
    flat = " ".join(text.split())
    known = sorted(result_parts(), key=order)
    for m in re.finditer(rf"\b[Pp]arts? ({PART}(?:(?:, | and | to | or |/){PART})*)\b", flat):
        names = []
        for chunk in re.split(r", | and | or |/", m.group(1)):
            if " to " in chunk:
                first, last = chunk.split(" to ")
                assert first in known and last in known, (m.group(0), "a range ends at a part RESULTS.md lacks")
                names += [p for p in known if order(first) <= order(p) <= order(last) and p.isalpha()]
            else:
                names.append(chunk)
        found.append((m.group(0), names))
    return found


def newest_part() -> str:
    return max((p for p in result_parts() if p.isalpha()), key=order)


def part_names(cell: str) -> list[str]:
    """A table's part cell: `AB`, `D, E`, or the README's links `[AF](bench/RESULTS.md)`."""
    return [re.sub(r"^\[([^]]+)\]\([^)]*\)$", r"\1", p.strip()) for p in cell.split(",")]


def numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:[.,]\d+)*", text))


def test_every_measured_figure_is_in_one_table_with_date_card_and_part():
    table = section("Measured results", RESULTS_PAGE)
    rows = table_rows(table)
    assert len(rows) >= 15
    parts = set(result_parts())
    for row in rows:
        date, card, _what, result, part = row
        assert re.fullmatch(r"2026-11-\d\d(/\d\d)?", date) and card in ("H100", "H200", "2x H100", "4x H200", "CPU"), row
        assert result and all(p in parts for p in part_names(part)), (part, sorted(parts))
    # The README's small table is drawn from it: each row's date, card and part are a row of the
    # full table, and each number of its result is in that part's rows there.
    small = section("What is measured")
    assert 3 <= len(table_rows(small)) <= 10
    for date, card, _what, result, part in table_rows(small):
        (name,) = part_names(part)
        assert f"[{name}](bench/RESULTS.md)" in part and name in parts, part
        full = [r for r in rows if r[0] == date and r[1] == card and name in part_names(r[4])]
        assert full, (date, card, name, "no row of docs/results.md's table")
        assert numbers(result) <= numbers(" ".join(r[3] for r in full)), (name, numbers(result) - numbers(" ".join(r[3] for r in full)))
    assert "[Measured results](docs/results.md)" in small
    # a figure of seconds against stock, or a ratio, appears nowhere else
    for name, text in EVERYTHING.items():
        rest = text.replace(table, "").replace(small, "")
        assert not re.search(r"\d s against \d|\d+\.\d+x stock|ready in \d[\d.]* s\b", rest), name
        for stale in ("not yet rerun", "Not guaranteed yet", "not yet measured"):
            assert stale not in text, (name, stale)


@pytest.mark.parametrize("name", ["README.md", "docs/getting-started.md"])
def test_the_vllm_033_user_is_told_the_plan_and_what_is_proven_where(name):
    four_steps = " ".join(section("For vLLM users: four steps", EVERYTHING[name]).split())
    assert VLLM_RELEASES["0.33.0"].plan == "vllm-0.33"
    assert "WARMUP_PLAN=vllm-0.33 vllm serve" in four_steps
    assert "has not run on a GPU with 0.33" in four_steps and "tests/integration/vllm_plugin" in four_steps


def test_the_moe_example_says_what_it_needs_as_the_plan_table_does():
    four_steps = " ".join(section("For vLLM users: four steps", GETTING_STARTED).split())   # as one line, unwrapped
    family = no_tables_gap([])["family"]
    assert f'"{family}"' in four_steps and CONFIGS_ENV in four_steps
    assert "vllm/model_executor/layers/fused_moe/configs" in HOW and "vllm/model_executor/layers/fused_moe/configs" in four_steps


def test_places_for_the_bundles_and_absorb_sections():
    assert DOCS[os.path.join("guides", "bundles.md")].startswith("# Bundles\n")
    assert "(docs/guides/bundles.md)" in README and "(docs/guides/absorb.md)" in README


def test_every_part_the_pages_name_is_in_results_and_the_newest_is_in_the_table():
    parts = result_parts()
    for name, text in EVERYTHING.items():
        for words, names in named_parts(text):
            assert names and all(n in parts for n in names), (name, words, sorted(parts, key=order))
    cited = {p for row in table_rows(section("Measured results", RESULTS_PAGE)) for p in part_names(row[4])}
    assert newest_part() in cited, f"bench/RESULTS.md part {newest_part()} has no row in docs/results.md's table"


def test_the_parity_table_is_named_by_its_part():
    parity = [p for p, text in result_parts().items() if "| engine | capture_sizes |" in text]
    assert len(parity) == 1
    assert f"The table is in `bench/RESULTS.md`, part {parity[0]}." in DOCS[os.path.join("concepts", "coverage.md")]


def test_the_plugins_gpu_runs_are_every_gpu_part_since_the_first():
    """"On a GPU the plugin has run ... parts ...": every part on a GPU from the plugin's first (the
    first part whose heading names the plugin) on, the newest included, and none on the CPU."""
    parts = result_parts()

    def heading(part):
        return parts[part].splitlines()[0]

    def date(part):
        return re.search(r"20\d\d-\d\d-\d\d", heading(part)).group(0)

    lettered = sorted((p for p in parts if p.isalpha()), key=order)
    first = next(p for p in lettered if "plugin" in heading(p) and "H100" in heading(p))
    gpu = {p for p in lettered if re.search(r"H100|H200", heading(p)) and date(p) >= date(first)}
    sentence = next(n for words, n in named_parts(PLUGIN_PAGE) if words.startswith("parts"))
    assert set(sentence) == gpu and newest_part() in sentence, (sorted(sentence), sorted(gpu, key=order))


def pyproject_extras() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def test_the_flashinfer_pins_the_pages_name_are_the_release_tables_and_the_extras():
    """Each release's FlashInfer as the release table pins it, the `flashinfer` extra's as pyproject
    pins it, and no other pin: a page that calls another version "what vLLM pins" fails here."""
    flat = " ".join(" ".join(EVERYTHING.values()).split())
    (extra,) = [r.split("==")[1] for r in pyproject_extras()["flashinfer"] if r.startswith("flashinfer-python==")]
    assert f"the `flashinfer` extra pins `flashinfer-python=={extra}`" in flat
    required = dict(re.findall(r"vLLM (\d+\.\d+\.\d+) requires `flashinfer-python==([^`]+)`", flat))
    for version, row in VLLM_RELEASES.items():
        if row.flashinfer:
            assert required.get(version) == row.flashinfer, (version, required.get(version), row.flashinfer)
    assert set(re.findall(r"flashinfer-python==([^`\s]+)`", flat)) == {extra, *required.values()}


def test_the_readme_is_a_first_read():
    """About 200 lines (issue 55 item 5): what it is and for whom, the two commands, the four steps,
    what is measured, where to go next; the rest is in docs/."""
    assert len(LINES) <= MAX_README_LINES, f"README.md has {len(LINES)} lines: move the detail to a docs/ page"
    headings = [line[3:] for line in LINES if line.startswith("## ")]
    assert headings == ["Set up", "For vLLM users: four steps", "What is measured", "Where to go next"], headings


def nav_pages(nav) -> list[str]:
    found = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_every_docs_page_is_in_the_nav_and_the_build_is_strict():
    """mkdocs fails its strict build on a page no nav reaches, a broken link or anchor (.ci/run
    builds it); this says the same without mkdocs installed."""
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)
    assert config["strict"] is True and config.get("docs_dir", "docs") == "docs"
    assert config["validation"]["nav"]["omitted_files"] == "warn"   # warn + strict: fails the build
    assert all(config["validation"]["links"][k] == "warn" for k in ("not_found", "anchors", "unrecognized_links"))
    pages = nav_pages(config["nav"])
    assert sorted(pages) == sorted(p.replace(os.sep, "/") for p in DOCS), "docs/ pages and mkdocs.yml's nav differ"
    assert len(set(pages)) == len(pages)
    (extra,) = pyproject_extras()["docs"]
    assert re.fullmatch(r"mkdocs>=1\.6,<1\.\d+", extra), extra   # 1.6: the validation settings


def slug(heading: str) -> str:
    """A heading's anchor as mkdocs (Python-Markdown's toc) and GitHub make it, for plain headings."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s+", "-", text)


def anchors(text: str) -> set[str]:
    found, fenced = set(), False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#+ ", line):
            found.add(slug(line.lstrip("#")))
    return found


def test_the_readmes_links_reach_files_and_headings_that_exist():
    """mkdocs checks the pages' links; the README is not built, so its links are checked here."""
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        assert os.path.exists(os.path.join(ROOT, path)), link
        if anchor:
            assert anchor in anchors(text_of(path)), (link, sorted(anchors(text_of(path))))


def test_install_lines_install_from_the_repository():
    """The project is not on PyPI, and a name there may be anyone's (issue 55): every install of it
    is from a clone (`.`, `'.[extra]'`) or a git URL, never `pip install warmup-planner` by name."""
    texts = dict(EVERYTHING, **{"pyproject.toml": text_of("pyproject.toml"), ".ci/run": text_of(".ci", "run")})
    for name, text in texts.items():
        flat = " ".join(text.split())
        for m in re.finditer(r"\bwarmup[-_]planner(\[[^\]]*\])?", flat):
            after, before = flat[m.end():m.end() + 8], flat[max(0, m.start() - 40):m.start()]
            direct = after.startswith(" @ ")   # `warmup-planner[registry] @ git+URL`: a direct reference
            by_name = not direct and (re.search(r"pip3? install( -\S+)* ['\"]?$", before) or m.group(1))
            assert not by_name, (name, flat[max(0, m.start() - 40):m.end() + 20])
