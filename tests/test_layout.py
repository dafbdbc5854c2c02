"""The package's layout follows the data: folders by stage, each importing only from itself and the
stages before it, no import cycle, no module over 400 lines and no function over 60, benchmarks
included; decoding options pass each module once (docs/how-it-works.md)."""

from __future__ import annotations

import ast
import collections
import sys
from pathlib import Path

import pytest
from conftest import speech

from whisper_spec.longform.pipeline import transcribe
from whisper_spec.options import DecodingOptions

PACKAGE = Path(__file__).resolve().parents[1] / "whisper_spec"
CLI = Path(__file__).resolve().parents[1] / "cli"
BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# the stages in the order the data passes them; bench and distill use all of them
STAGES = ["options", "speech", "models", "decode", "longform", "outputs", "jobs", "serve", "bench", "distill"]
MAX_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, Path]:
    """Dotted names under whisper_spec ('' for the package itself) -> their files."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of the package this one imports (a package's name where it imports the package)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    package = [p for p in package if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package[: len(package) - node.level + 1] if node.level > 1 else package
            target = ".".join(base + ([node.module] if node.module else []))
        elif (node.module or "").startswith("whisper_spec"):
            target = node.module.removeprefix("whisper_spec").lstrip(".")
        else:
            continue
        names = [f"{target}.{alias.name}" if target else alias.name for alias in node.names]
        found |= {n for n in names if n in modules} or ({target} if target in modules else set())
    return found - {name}


def _stage(name: str) -> int | None:
    head = name.split(".")[0]
    return STAGES.index(head) if head in STAGES else None


def test_no_module_imports_a_later_stage_and_there_is_no_cycle():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert graph["longform.pipeline"] >= {"decode.decoding", "longform.windows"}  # the parser finds imports
    against = [(name, target) for name, targets in graph.items() for target in targets
               if name and _stage(name) is not None and _stage(target) is not None and _stage(target) > _stage(name)]
    assert not against, f"imports against the flow: {against}"
    done, cycles = set(), []

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            cycles.append(path[path.index(name):] + [name])
        elif name not in done:
            done.add(name)
            for target in graph[name] - {""}:  # the package root re-exports lazily (importlib)
                visit(target, path + [name])
    for name in graph:
        visit(name, [])
    assert not cycles, f"import cycles: {cycles}"


def _sources() -> list[Path]:
    return [*PACKAGE.rglob("*.py"), *CLI.glob("*.py"), *BENCHMARKS.rglob("*.py")]


def test_no_module_is_over_400_lines():
    lengths = {path: len(path.read_text().splitlines()) for path in _sources()}
    assert len(lengths) > 100
    assert not {str(p): n for p, n in lengths.items() if n > MAX_LINES}


def test_no_function_is_over_60_lines():
    lengths = {f"{path}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
               for path in _sources() for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    assert max(lengths.values()) > 40  # the parser finds functions, bodies and all
    assert not {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}


@pytest.mark.slow
def test_decoding_options_enter_each_module_at_most_two_ways(base_pair):
    """Following DecodingOptions through transcribe (a long recording in speech chunks with word
    timestamps, and a short clip): each module is entered from another of the package in at most two
    ways (calling function -> called function), so a module is a stage the options pass once."""
    ways = collections.defaultdict(set)

    def module_of(code) -> str | None:
        return code.co_filename[len(str(PACKAGE)) + 1:] if code.co_filename.startswith(str(PACKAGE)) else None

    def profiler(frame, event, arg):
        code = frame.f_code
        if event != "call" or module_of(code) is None:
            return
        arguments = [frame.f_locals.get(name) for name in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]]
        if not any(isinstance(value, DecodingOptions) for value in arguments):
            return
        caller = frame.f_back
        while caller is not None and module_of(caller.f_code) is None:
            caller = caller.f_back
        if caller is not None and module_of(caller.f_code) != module_of(code):
            ways[module_of(code)].add((module_of(caller.f_code), caller.f_code.co_qualname, code.co_qualname))

    files = [speech("longform/librispeech-test-other_1688-142285_0000-0009.flac"),
             speech("librispeech/dev-clean/1272-128104-0000.flac")]
    sys.setprofile(profiler)
    try:
        results = list(transcribe(base_pair, files, DecodingOptions(word_timestamps=True), batch_size=4))
    finally:
        sys.setprofile(None)
    assert [r.text != "" for r in results] == [True, True]
    assert "decode/decoding.py" in ways  # the walk sees the options arrive where they are used
    assert not {module: sorted(found) for module, found in ways.items() if len(found) > 2}
