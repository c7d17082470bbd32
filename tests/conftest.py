"""Test options: `--device` puts the models of the tests that take the `device` fixture on
that torch device (`pytest --device cuda tests/test_llm.py`); the default is the CPU."""

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--device",
        default="cpu",
        help="torch device of the models in tests that take the `device` fixture (cpu, cuda)",
    )


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    """The `--device` option."""
    return request.config.getoption("--device")
