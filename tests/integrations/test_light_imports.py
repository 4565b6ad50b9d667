"""Importing a framework integration loads no part of toolselect's model stack: no numpy or
onnxruntime beyond what the framework itself imports (LlamaIndex imports numpy on its own), and
never the service."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("numpy", "onnxruntime", "sklearn", "toolselect.service", "toolselect.embed")

# Integration module -> the framework modules it builds on.
MODULES = {
    "toolselect.integrations.narrowing": [],
    "toolselect.integrations.langchain": ["langchain.agents.middleware", "langgraph.types"],
    "toolselect.integrations.langgraph": ["langchain_core.tools"],
    "toolselect.integrations.llamaindex": ["llama_index.core.agent.workflow"],
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_import_adds_no_model_stack(module: str) -> None:
    code = (
        "import importlib, json, sys\n"
        f"for name in {MODULES[module]!r}: importlib.import_module(name)\n"
        "framework = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        f"heavy = {HEAVY!r}\n"
        "added = sorted(m for m in set(sys.modules) - framework if m.split('.')[0] in heavy"
        " or m.startswith(heavy))\n"
        "print(json.dumps({'added': added, 'onnxruntime': 'onnxruntime' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    assert found == {"added": [], "onnxruntime": False}
