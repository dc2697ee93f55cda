"""The HTTP driver against a local stub of an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from coursebuilder.llm import (
    HttpDriver,
    LLMBadResponse,
    LLMConfigError,
    LLMRateLimited,
    LLMRejected,
    LLMTimeout,
    LLMUnavailable,
    Prompt,
    driver_for,
)
from taskrunner.redaction import redact

API_KEY = "sk-test-STUB-KEY-123"
PROMPT = Prompt(stage="lessons", step="lesson-1", text="Write lesson 1 of “Tides”.")


class Stub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.mode = "ok"
        self.requests: list[dict] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class StubHandler(BaseHTTPRequestHandler):
    server: Stub

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
        )
        mode = self.server.mode
        if mode == "slow":
            time.sleep(1.5)
        if mode == "429":
            return self.answer(429, {"error": {"message": "slow down"}}, {"Retry-After": "7"})
        if mode == "500":
            return self.answer(500, {"error": {"message": f"upstream broke, key {API_KEY}"}})
        if mode == "401":
            return self.answer(401, {"error": {"message": "bad key"}})
        if mode == "garbage":
            return self.answer(200, {"unexpected": True})
        if mode == "hang up":
            self.close_connection = True
            return None  # the connection closes with no answer at all
        if mode == "cut short":
            self.send_response(200)
            self.send_header("Content-Length", "4096")
            self.end_headers()
            self.wfile.write(b'{"choices": [')
            self.close_connection = True
            return None
        if mode == "not http":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2\r\n")
            self.close_connection = True
            return None
        if mode == "nested too deep":
            raw = b"[" * 200_000
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
            return None
        if mode == "controls only":
            return self.answer(200, {"choices": [{"message": {"content": "\x00\x1b \x7f"}}]})
        content = f"lesson text for: {body['messages'][-1]['content']}"
        if mode == "unstorable":
            # JSON may carry a NUL and a lone surrogate: neither can be written to a column.
            content = f"{content}\x00 \ud800 \x1b[2J end"
        self.answer(200, {"choices": [{"message": {"role": "assistant", "content": content}}]})

    def answer(self, status: int, payload: dict, headers: dict | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (the timeout case)


@pytest.fixture
def stub():
    server = Stub()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def driver(stub: Stub, timeout: float = 5) -> HttpDriver:
    return HttpDriver(stub.base_url, API_KEY, "stub-model", timeout)


def test_a_completion_returns_the_message_content_and_sends_key_and_model(stub):
    text = driver(stub).complete(PROMPT)

    assert text == f"lesson text for: {PROMPT.text}"
    [request] = stub.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["auth"] == f"Bearer {API_KEY}"
    assert request["body"]["model"] == "stub-model"
    assert [m["role"] for m in request["body"]["messages"]] == ["system", "user"]


def test_an_endpoint_slower_than_the_timeout_raises_a_timeout_domain_error(stub):
    stub.mode = "slow"
    with pytest.raises(LLMTimeout) as caught:
        driver(stub, timeout=0.3).complete(PROMPT)
    assert redact(caught.value) == "language model did not answer within 0.3 s"


def test_a_429_is_a_rate_limit_error_carrying_retry_after(stub):
    stub.mode = "429"
    with pytest.raises(LLMRateLimited) as caught:
        driver(stub).complete(PROMPT)
    assert caught.value.retry_after == 7.0
    assert "429" in redact(caught.value)


def test_a_500_is_unavailable_and_its_body_never_reaches_the_reason(stub):
    stub.mode = "500"
    with pytest.raises(LLMUnavailable) as caught:
        driver(stub).complete(PROMPT)
    reason = redact(caught.value)
    assert reason == "language model endpoint failed (HTTP 500)"
    assert API_KEY not in reason and "upstream" not in reason


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("401", LLMRejected),
        ("garbage", LLMBadResponse),
        ("controls only", LLMBadResponse),
        # The parser's RecursionError was no LLMError: the step failed as a crash.
        ("nested too deep", LLMBadResponse),
    ],
)
def test_refusals_and_malformed_answers_are_domain_errors(stub, mode, error):
    stub.mode = mode
    with pytest.raises(error):
        driver(stub).complete(PROMPT)


def test_an_answer_with_a_nul_or_a_lone_surrogate_is_returned_as_storable_text(stub):
    stub.mode = "unstorable"
    text = driver(stub).complete(PROMPT)
    assert text == f"lesson text for: {PROMPT.text} \ufffd [2J end"


@pytest.mark.parametrize("mode", ["hang up", "cut short", "not http"])
def test_an_endpoint_that_breaks_off_mid_answer_is_unavailable(stub, mode):
    # http.client's own errors (RemoteDisconnected, IncompleteRead, BadStatusLine) were
    # not the driver's: the step failed as "unhandled http.client.…", a crash.
    stub.mode = mode
    driver = HttpDriver(stub.base_url, API_KEY, "m", timeout=5)
    with pytest.raises(LLMUnavailable, match="language model endpoint broke off"):
        driver.complete(PROMPT)


def test_an_unreachable_endpoint_is_unavailable_without_its_url():
    closed = HttpDriver("http://127.0.0.1:9/v1?token=SECRET", API_KEY, "m", 2)
    with pytest.raises(LLMUnavailable) as caught:
        closed.complete(PROMPT)
    assert "SECRET" not in redact(caught.value)


@pytest.mark.parametrize("key", ["sk-live-K3Y\n", "sk-live-ключ", "sk-live K3Y", "sk-\x00K3Y"])
def test_a_key_no_header_can_carry_is_refused_naming_the_key_setting_not_the_url(stub, key):
    # A trailing newline from a key file, a letter that is not ASCII: http.client refused
    # the header at every call and the step's reason was "LLM_BASE_URL cannot be used".
    with pytest.raises(LLMConfigError) as caught:
        HttpDriver(stub.base_url, key, "m", 2).complete(PROMPT)
    assert redact(caught.value) == "LLM_API_KEY must be printable ASCII without spaces"
    assert stub.requests == []


def test_an_endpoint_url_with_a_password_is_refused_without_repeating_it():
    with pytest.raises(LLMConfigError) as caught:
        HttpDriver("https://llm:LlmPw-S3cret@llm.example.invalid/v1", API_KEY, "m", 2)
    assert redact(caught.value) == "LLM_BASE_URL must not carry a user or password"


def test_an_endpoint_url_urllib_cannot_use_is_a_config_error_quoting_none_of_it():
    # urllib's InvalidURL is no OSError, and its text quotes the port: here, a secret.
    unusable = HttpDriver("http://llm.example.invalid:LlmPw-S3cret/v1", API_KEY, "m", 2)
    with pytest.raises(LLMConfigError) as caught:
        unusable.complete(PROMPT)
    assert redact(caught.value) == "LLM_BASE_URL cannot be used (InvalidURL)"


def test_the_http_driver_is_chosen_from_config_and_refuses_missing_settings(stub):
    config = {
        "LLM_DRIVER": "http",
        "LLM_BASE_URL": stub.base_url,
        "LLM_API_KEY": API_KEY,
        "LLM_MODEL": "stub-model",
        "LLM_TIMEOUT_SECONDS": 5,
    }
    assert driver_for(config, {}).complete(PROMPT).startswith("lesson text")
    with pytest.raises(LLMConfigError, match="LLM_BASE_URL"):
        driver_for({**config, "LLM_BASE_URL": ""}, {})
    with pytest.raises(LLMConfigError, match="LLM_DRIVER"):
        driver_for({**config, "LLM_DRIVER": "magic"}, {})


@pytest.mark.parametrize(
    ("mode", "status", "reason"),
    [
        ("ok", "completed", None),
        # Written as it came, the answer failed the step's write: the run stayed running.
        ("unstorable", "completed", None),
        (
            "500",
            "failed",
            "step outline/outline-1 failed: language model endpoint failed (HTTP 500)",
        ),
    ],
)
def test_a_generation_run_calls_the_endpoint_for_every_step(make_app, stub, mode, status, reason):
    from sqlalchemy import select

    from coursebuilder import stages
    from coursebuilder.models import GenerationRun, GenerationStep
    from extensions import db
    from tenancy.models import Tenant

    stub.mode = mode
    app = make_app(
        QUEUE_IMMEDIATE=True,
        LLM_DRIVER="http",
        LLM_BASE_URL=stub.base_url,
        LLM_API_KEY=API_KEY,
        LLM_MODEL="stub-model",
        LLM_TIMEOUT_SECONDS=5,
    )
    with app.app_context():
        db.session.add(Tenant(id=2, name="Stark"))
        db.session.commit()
        run_uuid = stages.start(2, "Optics", lessons=1, quizzes=1, concurrency=1)
        run = db.session.execute(
            select(GenerationRun).where(GenerationRun.uuid == run_uuid)
        ).scalar_one()
        assert (run.status, run.failure_reason) == (status, reason)
        outputs = " ".join(t or "" for t in db.session.scalars(select(GenerationStep.output)))
        assert "\x00" not in outputs and "\ud800" not in outputs
    assert len(stub.requests) == (1 if status == "failed" else 4)
