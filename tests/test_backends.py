"""The operator's backend registry: kernels register themselves; the operator never imports them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sinkalign.sinkhorn import backends


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_pallas_registers_on_import_and_only_then():
    out = _run(
        "import sys\n"
        "import sinkalign.sinkhorn as S\n"
        "from sinkalign.sinkhorn.backends import tail_operator_for, registered\n"
        "print('kernels' in ' '.join(m for m in sys.modules if m.startswith('sinkalign.kernels')))\n"
        "try:\n    tail_operator_for('pallas')\nexcept ValueError as e:\n    print(e)\n"
        "import sinkalign.kernels.pallas as P\n"
        "print(tail_operator_for('pallas') is P.tail_operator, registered())\n"
    )
    lines = out.splitlines()
    assert lines[0] == "False"  # importing the operator imports no kernel package
    assert lines[1] == ("backend='pallas' has no registered backend (import sinkalign.kernels.pallas to "
                        "register it); registered: ('reference',)")
    assert lines[2] == "True ('reference', 'pallas')"


def test_aligner_config_with_pallas_registers_it():
    out = _run(
        "from sinkalign.align.model import AlignerConfig\n"
        "from sinkalign.sinkhorn.backends import registered\n"
        "AlignerConfig.create(backend='pallas')\n"
        "print(registered())\n"
    )
    assert out.strip() == "('reference', 'pallas')"


def test_registry_rejects_bad_registrations():
    with pytest.raises(ValueError, match="'reference' is the built-in"):
        backends.register_tail_operator("reference", lambda *a: None)
    with pytest.raises(TypeError, match="is not callable"):
        backends.register_tail_operator("mine", 3)
    with pytest.raises(ValueError, match=r"backend='nonesuch' has no registered backend; registered:"):
        backends.tail_operator_for("nonesuch")
