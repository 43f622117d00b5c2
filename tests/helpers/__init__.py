"""What the tests share that is not a fixture: paths, fake envs, pool and recipe checks, timing.

Fixtures live in tests/conftest.py; the files the tests read live in tests/fixtures/ (FIXTURES in
tests/helpers/paths.py points at it).
"""
