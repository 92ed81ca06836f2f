"""The CLI's preflight: one clear message for a missing model, but no model loading for roles a Ray server serves."""

from __future__ import annotations

import pytest
import typer

from flows.cli.startup import preflight
from infra.runtime.settings import load_settings


def _settings(tmp_path, **values):
    missing = str(tmp_path / "nowhere.gguf")
    return load_settings(None, overrides=[f"models.planner.model_path={missing}", f"models.generator.model_path={missing}",
                                          'tools.allow=["python"]'], **values)


def test_a_missing_model_file_fails_preflight(tmp_path, capsys):
    with pytest.raises(typer.Exit) as exc:
        preflight(_settings(tmp_path))
    assert exc.value.exit_code != 0
    assert "planner model" in capsys.readouterr().err


def test_roles_served_by_ray_model_servers_are_not_loaded_in_preflight(tmp_path):
    settings = _settings(tmp_path, **{"ray.enabled": True, "ray.model_servers": {"smol": {"roles": ["planner", "generator"]}}})
    assert settings.ray.model_servers["smol"].roles == ["planner", "generator"]
    preflight(settings)  # the servers load their own model when they start; nothing is loaded here
