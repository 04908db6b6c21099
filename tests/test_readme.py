"""The README tells one current story (issue 37 item 2): the two set-up lines that .ci/run runs on
its first screen, every measured figure in one table that names its date, card and part of
bench/RESULTS.md, no superseded "not yet rerun" lines, the vLLM 0.33 user's plan, and the MoE
example's requirement quoted as the planner words it."""

from __future__ import annotations

import os
import re

from planner.engine.releases import VLLM_RELEASES
from planner.plan.stages.vllm_fused_moe import no_tables_gap
from planner.tables.vllm_moe import CONFIGS_ENV, HOW

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
LINES = README.splitlines()
RESULTS = open(os.path.join(ROOT, "bench", "RESULTS.md"), encoding="utf-8").read()


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


def test_every_measured_figure_is_in_one_table_with_date_card_and_part():
    table = section("Measured results")
    rows = [line for line in table.splitlines() if line.startswith("| 2026-")]
    assert len(rows) >= 15
    headings = set(re.findall(r"^##+ ([A-Z][A-Z0-9]?(?: / [A-Z][A-Z0-9]?)*)[. ]", RESULTS, re.M))
    parts = {p.strip() for heading in headings for p in heading.split("/")}
    for row in rows:
        date, card, _what, result, part = [cell.strip() for cell in row.strip("|").split("|")]
        assert re.fullmatch(r"2026-11-\d\d(/\d\d)?", date) and card in ("H100", "2x H100", "CPU"), row
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
