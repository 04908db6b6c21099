"""The README tells one current story (issue 37 item 2): the two set-up lines that .ci/run runs on
its first screen, every measured figure in one table that names its date, card and part of
bench/RESULTS.md, no superseded "not yet rerun" lines, the vLLM 0.33 user's plan, and the MoE
example's requirement quoted as the planner words it. Issue 44 item 6: every part the README names
is one of bench/RESULTS.md's (a range too), the newest has a row in the table, the parity table and
the plugin's GPU runs are named by their parts, and the FlashInfer pins are the release table's and
the `flashinfer` extra's."""

from __future__ import annotations

import os
import re

import pytest

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


def section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end >= 0 else None]


def test_the_two_set_up_lines_are_on_the_first_screen_and_the_tests_judge_their_skips():
    first_screen = LINES[:30]
    main = first_screen.index(next(line for line in first_screen if line.startswith("# main job:")))
    tests = first_screen.index(next(line for line in first_screen if line.startswith("# tests:")))
    assert first_screen[main + 1].startswith("python3 -m pip install . && warmup plan ")
    assert first_screen[tests + 1].endswith("python3 -m pytest -q --allowed-skips-only")
    assert "virtual environment of its own" in section("Set up")   # the test line replaces vLLM's torch


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


def test_every_measured_figure_is_in_one_table_with_date_card_and_part():
    table = section("Measured results")
    rows = [line for line in table.splitlines() if line.startswith("| 2026-")]
    assert len(rows) >= 15
    parts = set(result_parts())
    for row in rows:
        date, card, _what, result, part = [cell.strip() for cell in row.strip("|").split("|")]
        assert re.fullmatch(r"2026-11-\d\d(/\d\d)?", date) and card in ("H100", "H200", "2x H100", "4x H200", "CPU"), row
        assert result and all(p.strip() in parts for p in part.split(",")), (part, sorted(parts))
    # a figure of seconds against stock, or a ratio, appears nowhere else
    rest = README.replace(table, "")
    assert not re.search(r"\d s against \d|\d+\.\d+x stock|ready in \d", rest)
    for stale in ("not yet rerun", "Not guaranteed yet", "not yet measured"):
        assert stale not in README


def test_the_vllm_033_user_is_told_the_plan_and_what_is_proven_where():
    four_steps = section("For vLLM users: four steps")
    assert VLLM_RELEASES["0.33.0"].plan == "vllm-0.33"
    assert "WARMUP_PLAN=vllm-0.33 vllm serve" in four_steps
    assert "has not run on a GPU with 0.33" in four_steps and "tests/vllm_plugin" in four_steps


def test_the_moe_example_says_what_it_needs_as_the_plan_table_does():
    four_steps = " ".join(section("For vLLM users: four steps").split())   # as one line, unwrapped
    family = no_tables_gap([])["family"]
    assert f'"{family}"' in four_steps and CONFIGS_ENV in four_steps
    assert "vllm/model_executor/layers/fused_moe/configs" in HOW and "vllm/model_executor/layers/fused_moe/configs" in four_steps


def test_places_for_the_bundles_and_absorb_sections():
    assert "\n## Bundles\n" in README and "docs/absorb.md" in README


def test_every_part_the_readme_names_is_in_results_and_the_newest_is_in_the_table():
    parts = result_parts()
    for words, names in named_parts(README):
        assert names and all(name in parts for name in names), (words, sorted(parts, key=order))
    table = section("Measured results")
    cited = {p.strip() for row in table.splitlines() if row.startswith("| 2026-")
             for p in row.strip("|").split("|")[-1].split(",")}
    assert newest_part() in cited, f"bench/RESULTS.md part {newest_part()} has no row in README's table"


def test_the_parity_table_is_named_by_its_part():
    parity = [p for p, text in result_parts().items() if "| engine | capture_sizes |" in text]
    assert len(parity) == 1
    assert f"The table is in `bench/RESULTS.md`, part {parity[0]}." in README


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
    sentence = next(n for words, n in named_parts(section("Warming vLLM from a plan: the vLLM plugin"))
                    if words.startswith("parts"))
    assert set(sentence) == gpu and newest_part() in sentence, (sorted(sentence), sorted(gpu, key=order))


def pyproject_extras() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def test_the_flashinfer_pins_the_readme_names_are_the_release_tables_and_the_extras():
    """Each release's FlashInfer as the release table pins it, the `flashinfer` extra's as pyproject
    pins it, and no other pin: a README that calls another version "what vLLM pins" fails here."""
    flat = " ".join(README.split())
    (extra,) = [r.split("==")[1] for r in pyproject_extras()["flashinfer"] if r.startswith("flashinfer-python==")]
    assert f"the `flashinfer` extra pins `flashinfer-python=={extra}`" in flat
    required = dict(re.findall(r"vLLM (\d+\.\d+\.\d+) requires `flashinfer-python==([^`]+)`", flat))
    for version, row in VLLM_RELEASES.items():
        if row.flashinfer:
            assert required.get(version) == row.flashinfer, (version, required.get(version), row.flashinfer)
    assert set(re.findall(r"flashinfer-python==([^`\s]+)`", flat)) == {extra, *required.values()}
