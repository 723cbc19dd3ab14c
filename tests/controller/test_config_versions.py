"""The controller config file: versioned (`apiVersion: gangscale.io/v1alpha1`, `kind: ControllerConfig`),
unversioned files still read, and durations such as `30s` / `15m` for every `*Seconds` key."""

from __future__ import annotations

import pytest

from gangscale.controller.config import ControllerConfig, load_config
from gangscale.loader import InputError


def write(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_a_versioned_config_file_is_read(tmp_path):
    cfg = load_config(write(tmp_path, "apiVersion: gangscale.io/v1alpha1\nkind: ControllerConfig\nmode: enforce\n"))
    assert cfg.mode == "enforce" and cfg.api_version == "gangscale.io/v1alpha1"


def test_an_unversioned_config_file_is_still_read_as_v1alpha1(tmp_path):
    cfg = load_config(write(tmp_path, "mode: enforce\nresyncSeconds: 12\n"))
    assert cfg.resync_seconds == 12 and (cfg.api_version, cfg.kind) == ("gangscale.io/v1alpha1", "ControllerConfig")


@pytest.mark.parametrize("text, field", [
    ("apiVersion: gangscale.io/v2\n", "apiVersion"),
    ("apiVersion: gangscale.io/v1alpha1\nkind: Deployment\n", "kind"),
])
def test_an_unknown_version_or_kind_names_the_field(tmp_path, text, field):
    with pytest.raises(InputError, match=field):
        load_config(write(tmp_path, text))


@pytest.mark.parametrize("written, seconds", [
    ("30s", 30), ("15m", 900), ("1h", 3600), ("1h30m", 5400), ("500ms", 0.5), ("2.5m", 150), (45, 45), ("45", 45),
])
def test_seconds_keys_take_durations(tmp_path, written, seconds):
    cfg = load_config(write(tmp_path, f"provisioningDeadlineSeconds: {written!r}\nbatchWindowSeconds: {written!r}\n"))
    assert cfg.provisioning_deadline_seconds == seconds and cfg.batch_window_seconds == seconds


@pytest.mark.parametrize("written", ["30x", "m15", "15 m", "-5s", "nan", ""])
def test_a_bad_duration_names_the_field(tmp_path, written):
    with pytest.raises(InputError, match="resyncSeconds"):
        load_config(write(tmp_path, f"resyncSeconds: {written!r}\n"))


def test_durations_keep_the_bounds_of_the_field():
    with pytest.raises(ValueError, match="resyncSeconds"):
        ControllerConfig.model_validate({"resyncSeconds": "0s"})
