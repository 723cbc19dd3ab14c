"""The one redaction helper shared by the AWS and Kubernetes sides."""

from __future__ import annotations

import logging

import pytest

from cloud_adapters.redact import install_log_redaction, redact_text, redact_url


@pytest.mark.parametrize("raw, clean", [
    ("https://user:pa55@host:6443/api", "https://***@host:6443/api"),
    ("https://host/api?access_token=abc.def&limit=5", "https://host/api?access_token=***&limit=5"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=deadbeef&X-Amz-Date=1",
     "https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&X-Amz-Date=1"),
    ("GET https://h/x?token=t0k: 401", "GET https://h/x?token=***: 401"),
    ("Authorization: Bearer eyJhbGciOi.abc-_", "Authorization: Bearer ***"),
    ("http://127.0.0.1:5000", "http://127.0.0.1:5000"),
])
def test_urls_and_messages_lose_userinfo_credential_parameters_and_bearer_tokens(raw, clean):
    assert redact_text(raw) == clean
    assert redact_url(raw) == clean


def test_a_third_party_logger_is_redacted_at_the_source(caplog):
    install_log_redaction("test.thirdparty")
    with caplog.at_level(logging.WARNING):
        logging.getLogger("test.thirdparty").warning("Retrying after %s: %s", "broken", "/api?access_token=SECRET")
    assert "SECRET" not in caplog.text and "/api?access_token=***" in caplog.text
