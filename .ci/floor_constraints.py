"""Print pip constraints pinning each `>=` dependency of the project (and of the extras
named on the command line) at its declared floor: the versions the floor job installs."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
pinned = {m.group(1).lower() for r in requirements if (m := re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?==.*", r.strip()))}
for requirement in requirements:
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?>=([0-9][^,;\s]*)", requirement.strip())
    if match and match.group(1).lower() not in pinned:  # an extra's exact pin wins over a floor
        print(f"{match.group(1)}=={match.group(3)}")
