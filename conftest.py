"""Lets ``pytest`` run from a checkout that was never installed.

Installed, the folder ``fixtures/`` is the package ``specgauge_fixtures`` (setuptools'
package-dir) and the plugin comes in through its ``pytest11`` entry point. In a bare
checkout neither exists, so this file supplies both; when the project is installed it
does nothing. It is not part of the wheel.
"""

import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path

_FIXTURES = Path(__file__).parent / "fixtures"

if importlib.util.find_spec("specgauge_fixtures") is None:
    _spec = importlib.util.spec_from_file_location(
        "specgauge_fixtures", _FIXTURES / "__init__.py", submodule_search_locations=[str(_FIXTURES)])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["specgauge_fixtures"] = _module
    _spec.loader.exec_module(_module)

if not any(ep.name == "specgauge" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["stattests.plugin"]
