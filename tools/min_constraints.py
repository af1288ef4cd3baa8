"""The lowest versions pyproject.toml allows, as pip constraints (`name==floor`), for `make test-min`.

torch is left out: `make test-min` installs its floor (2.13.0) first, from the CPU build on this project's machines,
where pip's default wheel would be a CUDA build of several GB."""

import re
import sys
import tomllib
from pathlib import Path

SKIP = {"torch"}


def floors(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    deps = [*project["dependencies"], *project["optional-dependencies"]["launchers"]]
    out = []
    for dep in deps:
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)", dep)
        if m and m.group(1).lower() not in SKIP:
            out.append(f"{m.group(1)}=={m.group(2)}")
    return out


if __name__ == "__main__":
    print("\n".join(floors(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
