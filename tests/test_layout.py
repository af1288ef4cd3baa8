"""The package's import graph (tools/import_cycles.py, which reads the source and imports nothing): no cycle among
ffnbench's modules at module level, none among its parts (subpackages and top-level modules, lazy imports
included), and the finder itself on small packages whose cycles are known."""

import importlib.util
import itertools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _finder():
    spec = importlib.util.spec_from_file_location("import_cycles", ROOT / "tools" / "import_cycles.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


import_cycles = _finder()


def _package(root: Path, files: dict[str, str]) -> Path:
    """A package `pkg` under `root` made of `files` (path under pkg/ → source)."""
    for name, source in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "pkg"


def test_ffnbench_has_no_module_level_import_cycle():
    eager, _ = import_cycles.cycles(import_cycles.build_graph(ROOT / "ffnbench"))
    assert eager == [], "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in eager)


def test_ffnbench_parts_import_each_other_in_no_cycle():
    # No allow-list: two parts that import each other (even through an import inside a function) fail here.
    graph = import_cycles.build_graph(ROOT / "ffnbench")
    found = import_cycles.part_cycles(graph, "ffnbench")
    edges = import_cycles.part_edges(graph, "ffnbench")
    shown = [" -> ".join(c) + ": " + "; ".join(edges[a, b][0] for a, b in itertools.pairwise(c)) for c in found]
    assert found == [], "parts that import each other:\n" + "\n".join(shown)


def test_two_subpackages_importing_each_other_lazily_are_a_part_cycle_and_fail(tmp_path, capsys):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "",
        "a/x.py": "from pkg.b.y import Y\n",
        "b/__init__.py": "",
        "b/y.py": "Y = 1\n\ndef f():\n    from pkg.a.x import Y\n",
    })
    graph = import_cycles.build_graph(pkg)
    assert import_cycles.cycles(graph) == ([], [["pkg.a.x", "pkg.b.y", "pkg.a.x"]])  # only lazy at module level
    assert import_cycles.part_cycles(graph, "pkg") == [["pkg.a", "pkg.b", "pkg.a"]]
    assert import_cycles.part_edges(graph, "pkg") == {("pkg.a", "pkg.b"): ["pkg.a.x -> pkg.b.y"],
                                                      ("pkg.b", "pkg.a"): ["pkg.b.y ~> pkg.a.x"]}
    assert import_cycles.main([str(pkg)]) == 1
    assert "parts:        pkg.a -> pkg.b -> pkg.a" in capsys.readouterr().out


def test_a_cycle_through_three_parts_and_a_top_level_module_fails(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a/__init__.py": "from pkg.a.x import X\n",
        "a/x.py": "import pkg.tool\nX = 1\n",
        "tool.py": "from pkg.b import y\n",
        "b/__init__.py": "",
        "b/y.py": "from pkg.a.x import X\n",
    })
    graph = import_cycles.build_graph(pkg)
    assert import_cycles.part_cycles(graph, "pkg") == [["pkg.a", "pkg.tool", "pkg.b", "pkg.a"]]
    assert import_cycles.main([str(pkg)]) == 1


def test_layered_parts_pass_and_stack_in_layers(tmp_path, capsys):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "errors.py": "",
        "base/__init__.py": "",
        "base/x.py": "from pkg.errors import *\n",
        "mid/__init__.py": "",
        "mid/y.py": "import pkg.base.x\n\ndef f():\n    import pkg.errors\n",
        "top.py": "from pkg.mid import y\n\ndef main():\n    from pkg.base.x import X\n",
    })
    graph = import_cycles.build_graph(pkg)
    assert import_cycles.part_cycles(graph, "pkg") == []
    assert import_cycles.layers(graph, "pkg") == [["pkg.errors"], ["pkg.base"], ["pkg.mid"], ["pkg.top"]]
    assert import_cycles.main([str(pkg), "--layers"]) == 0
    out = capsys.readouterr().out
    assert "layer 0: errors\nlayer 1: base\nlayer 2: mid\nlayer 3: top\n" in out


def test_a_submodule_naming_its_package_closes_a_cycle_through_the_init(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "from pkg.cli import main\n",
        "cli.py": "from pkg import tool\n\ndef main(): ...\n",
        "tool.py": "",
    })
    eager, lazy = import_cycles.cycles(import_cycles.build_graph(pkg))
    assert eager == [["pkg", "pkg.cli", "pkg"]] and lazy == []


def test_importing_the_defining_submodule_leaves_no_cycle(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "from pkg.cli import main\n",
        "cli.py": "import pkg.tool as tool\nfrom pkg.sub.leaf import X\n\ndef main(): ...\n",
        "tool.py": "from .sub import leaf\n",
        "sub/__init__.py": "from .leaf import X\n",
        "sub/leaf.py": "X = 1\n",
    })
    graph = import_cycles.build_graph(pkg)
    assert graph.eager["pkg.cli"] == {"pkg.tool", "pkg.sub.leaf"}
    assert graph.eager["pkg.tool"] == {"pkg.sub", "pkg.sub.leaf"} and graph.eager["pkg.sub"] == {"pkg.sub.leaf"}
    assert import_cycles.cycles(graph) == ([], [])


def test_imports_in_functions_are_lazy_and_type_checking_ones_are_left_out(tmp_path):
    pkg = _package(tmp_path, {
        "__init__.py": "",
        "a.py": "from pkg.b import f\n",
        "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import T\n\n"
                "def f():\n    from pkg.a import g\n",
    })
    graph = import_cycles.build_graph(pkg)
    assert graph.eager["pkg.b"] == set() and graph.lazy["pkg.b"] == {"pkg.a"}
    assert import_cycles.cycles(graph) == ([], [["pkg.a", "pkg.b", "pkg.a"]])
