"""applyflows refuses hostile TOML with a message, never a traceback."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from dataflow.models import DataFlow


@pytest.mark.django_db
@pytest.mark.parametrize(
    "value",
    ["[" * 5000 + "]" * 5000, "{ a = " * 3000 + "1" + " }" * 3000],
    ids=["arrays", "inline-tables"],
)
def test_a_deeply_nested_toml_value_is_refused_with_a_message(tmp_path, value):
    path = tmp_path / "deep.toml"
    path.write_text(f'[flow]\nname = "deep"\ndescription = {value}\n')

    with pytest.raises(CommandError, match="nested too deeply"):
        call_command("applyflows", str(path))
    assert not DataFlow.objects.exists()
