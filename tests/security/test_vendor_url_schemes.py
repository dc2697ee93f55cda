"""A vendor client opens http and https URLs only.

urllib opens ``file:``, ``ftp:`` and ``data:`` URLs too: a ``DOCUMENTS_PROVIDER_URL`` of
``file:///srv/provider`` read ``/srv/provider/documents`` from the worker's disk and took
its reference for the provider's (the document counted as forwarded), and an
``LLM_BASE_URL`` of ``file://…`` passed a local file for the model's answer. The settings
refuse such a URL at start (``tests/unit/test_config_errors.py``); the clients refuse it
too, whoever built them.
"""

from __future__ import annotations

import json

import pytest

from coursebuilder.llm import HttpDriver, LLMConfigError
from documents.provider import ProviderClient, ProviderNotConfigured
from taskrunner.contract import PermanentError


@pytest.fixture
def local_answers(tmp_path):
    """A folder holding what a provider and a model would answer, as local files."""
    (tmp_path / "documents").write_text(json.dumps({"reference": "from-a-local-file"}))
    (tmp_path / "chat").mkdir()
    answer = {"choices": [{"message": {"content": "from a local file"}}]}
    (tmp_path / "chat" / "completions").write_text(json.dumps(answer))
    return tmp_path


@pytest.mark.parametrize("scheme", ["file", "FILE", "ftp"])
def test_the_provider_client_refuses_a_url_that_is_not_http(local_answers, scheme):
    client = ProviderClient(f"{scheme}://{local_answers}", "sk_live_VENDOR_TOKEN_0123456789")

    with pytest.raises(ProviderNotConfigured) as caught:
        client.submit("0b8f2c1e-1111-4222-8333-444455556666", "title", "body")

    assert str(caught.value) == "document provider URL is not an http or https URL"
    assert isinstance(caught.value, PermanentError)


@pytest.mark.parametrize("scheme", ["file", "ftp", "data"])
def test_the_language_model_driver_refuses_a_url_that_is_not_http(local_answers, scheme):
    with pytest.raises(LLMConfigError, match="^LLM_BASE_URL must be an http or https URL$"):
        HttpDriver(f"{scheme}://{local_answers}", "sk_live_VENDOR_TOKEN_0123456789", "m", 5)
