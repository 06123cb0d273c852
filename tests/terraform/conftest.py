import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from tfmodel import Module  # noqa: E402


@pytest.fixture(scope="session")
def module() -> Module:
    return Module()
