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
import urllib.error
import urllib.request

import pytest

from coursebuilder.llm import HttpDriver, LLMConfigError
from documents.provider import ProviderClient, ProviderNotConfigured
from security.outbound import open_without_redirects
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


@pytest.mark.parametrize("url", ["file:///{folder}/documents", "data:,from-the-url-itself"])
def test_the_outbound_opener_itself_opens_no_url_but_http(local_answers, url):
    # Every vendor client opens its requests there: a client that forgot its own check
    # still passes no local file (nor the URL's own data) for a vendor's answer.
    request = urllib.request.Request(url.format(folder=local_answers), method="GET")

    with pytest.raises(urllib.error.URLError, match="unknown url type"):
        with open_without_redirects(request, timeout=2):
            pass
