"""The test suite; tests/helpers holds what the tests share, tests/fixtures the files they read."""

import pytest

# the helpers' asserts report as the tests' own do (rollout_agent_example, the recipe checks)
pytest.register_assert_rewrite("tests.helpers")
