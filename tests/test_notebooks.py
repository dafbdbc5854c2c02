"""The notebooks run end to end (on two utterances each) and pass their exactness checks."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["english_librispeech.ipynb", "multilingual_voxpopuli.ipynb"])
def test_notebook_runs(name, tmp_path, monkeypatch):
    monkeypatch.setenv("WHISPER_SPEC_NOTEBOOK_LIMIT", "2")
    monkeypatch.setenv("WHISPER_SPEC_NOTEBOOK_REPEATS", "1")
    # one peer: its rows in the notebook's table (test_bench runs every peer through the same harness)
    monkeypatch.setenv("WHISPER_SPEC_NOTEBOOK_PEERS", "faster-whisper")
    monkeypatch.setenv("WHISPER_SPEC_NOTEBOOK_OUTPUT", str(tmp_path))
    monkeypatch.delenv("WHISPER_SPEC_ONLINE", raising=False)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    # the kernel inherits this process's environment, and with it the settings above
    NotebookClient(notebook, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "| speculative b1 |" in text and "| faster-whisper int8 b1 |" in text and "check: passed" in text
    assert "| transformers b1 |" not in text
    assert (tmp_path / "report.json").exists() or any(tmp_path.rglob("report.json"))
