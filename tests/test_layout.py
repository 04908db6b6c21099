"""tests/ mirrors the packages (issue 56 item 5): a test lies beside its subject's folder.

- tests/<package>/ holds the unit tests of one package of the floors (tests/test_layers.py):
  tests/planner/, tests/kernel_model/, tests/executor/, tests/vllm_bridge/ and tests/bench/ (the
  scripts of bench/); a folder below one of them, where it holds tests, names a sub-package of that
  package (tests/executor/runner/: executor/runner/).
- tests/integration/ holds the harnesses that run against vLLM's own sources (WARMUP_VLLM_ENVS, set up
  by tests/integration/vllm_parity/setup_vllm.sh), one folder each.
- tests/ itself holds only the tests of the repository as a whole, listed in REPOSITORY_WIDE: its
  floors, package maps, README and documents, wheel, golden plans, every command's help and output
  flags, the fuzzing of every command, the one cdiv, this layout and the skip policy of the test run.
  Beside them: conftest.py, the helpers several folders import by name (factories.py,
  deep_gemm_oracle.py, fuzz_worker.py, skip_policy.py) and data (fixtures/, golden/), which stay put
  so that every folder finds them the same way (tests/ is on sys.path through its conftest.py).
- A test found by a mutation pass goes into its subject's test file, not a test_mutation_*.py of its own.

Test folders have no __init__.py (pytest's default import mode then imports each test module by its
file name, which must be unique), except the integration harnesses, which are packages
(tests.integration.vllm_parity...) and import one another as such.
"""

from __future__ import annotations

import os
from collections import defaultdict

from test_layers import FLOORS, ROOT

TESTS = os.path.join(ROOT, "tests")
REPOSITORY_WIDE = {
    "test_fuzz.py", "test_golden.py", "test_help_sentences.py", "test_layers.py", "test_layout.py",
    "test_one_cdiv.py", "test_output_flags.py", "test_package_maps.py", "test_packaging.py", "test_readme.py",
    "test_skip_policy.py",
}
INTEGRATION = {"from_vllm", "vllm_parity", "vllm_plugin"}
NOT_TESTS = {"fixtures", "golden", "tools"}  # data, and tools run by hand


def folders(path: str) -> list[str]:
    return sorted(e for e in os.listdir(path) if os.path.isdir(os.path.join(path, e)) and e != "__pycache__")


def found_tests(path: str) -> list[str]:
    return sorted(e for e in os.listdir(path) if e.startswith("test_") and e.endswith(".py"))


def test_only_the_repository_wide_tests_lie_flat_in_tests():
    assert set(found_tests(TESTS)) == REPOSITORY_WIDE, "move a package's test into tests/<package>/"


def test_each_folder_of_tests_is_a_package_the_integration_harnesses_or_data():
    assert set(folders(TESTS)) - set(FLOORS) - NOT_TESTS == {"integration"}
    assert set(FLOORS) <= set(folders(TESTS))
    for floor in FLOORS:
        assert os.path.isdir(os.path.join(ROOT, floor)) and found_tests(os.path.join(TESTS, floor)), floor
    assert set(folders(os.path.join(TESTS, "integration"))) == INTEGRATION
    for data in NOT_TESTS:
        assert [f for _, _, files in os.walk(os.path.join(TESTS, data)) for f in files if f.startswith("test_")] == []


def test_a_folder_below_a_package_folder_names_one_of_its_sub_packages():
    found = []
    for floor in FLOORS:
        for folder, subs, files in os.walk(os.path.join(TESTS, floor)):
            subs[:] = [s for s in subs if s != "__pycache__"]
            rel = os.path.relpath(folder, TESTS)
            if rel != floor and found_tests(folder) and not os.path.isfile(os.path.join(ROOT, rel, "__init__.py")):
                found.append(f"tests/{rel}/ holds tests but {rel}/ is not a package")
    assert found == []


def test_no_test_file_is_named_for_how_its_tests_were_found():
    named = [os.path.relpath(os.path.join(folder, f), ROOT) for folder, _, files in os.walk(TESTS)
             for f in files if f.startswith("test_mutation")]
    assert named == [], "fold mutation-found tests into the subject's test file"


def test_test_modules_outside_packages_have_unique_names():
    """Without an __init__.py pytest imports a test module by its file name: two of one name in two
    folders would be one module to it, and the second fails to import."""
    where = defaultdict(list)
    for folder, subs, files in os.walk(TESTS):
        subs[:] = [s for s in subs if s != "__pycache__"]
        if not os.path.isfile(os.path.join(folder, "__init__.py")):
            for name in found_tests(folder):
                where[name].append(os.path.relpath(folder, ROOT))
    assert {name: dirs for name, dirs in where.items() if len(dirs) > 1} == {}
