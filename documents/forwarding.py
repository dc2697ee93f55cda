"""``documents.forward_to_provider``: the first single tracked job (docs/operations.md).

``forward(document_uuid)`` enqueues it; each attempt is recorded on the ledger,
Huey retries transient failures with a growing delay, a rejection fails at once.
"""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select

from database import utcnow, write_transaction
from documents.models import FORWARDED, REJECTED, Document
from documents.provider import ProviderClient, ProviderRejected
from extensions import db
from taskrunner.contract import PermanentError, TaskUnit, tracked_job

FORWARD = "documents.forward_to_provider"


class DocumentNotFound(PermanentError):
    pass


def document_unit(document_uuid: str) -> TaskUnit:
    tenant_id = db.session.execute(
        select(Document.tenant_id).where(Document.uuid == document_uuid)
    ).scalar_one_or_none()
    return TaskUnit(f"document-{document_uuid}", tenant_id)


def create_document(tenant_id: int, title: str, body: str = "") -> Document:
    document = Document(tenant_id=tenant_id, title=title, body=body)
    db.session.add(document)
    db.session.commit()
    return document


def forward(document_uuid: str) -> None:
    """Send a document to the provider in the background (one dispatch, one run)."""
    forward_to_provider.enqueue(document_uuid)


@tracked_job(
    FORWARD,
    unit=document_unit,
    queue="default",
    timeout=60,
    retries=4,
    retry_delay=5,
    retry_backoff=2,
)
def forward_to_provider(document_uuid: str) -> None:
    document = _found(document_uuid)
    if document.status == FORWARDED:
        return  # an overlapping dispatch got there first: the provider has it
    title, body = document.title, document.body
    # No transaction stays open while the provider answers: on SQLite, a read begun before
    # the call could not become the write after it once another connection had committed
    # (a heartbeat), and the provider, which had the document, was asked again.
    db.session.commit()
    client = ProviderClient.from_config(current_app.config)
    try:
        reference = client.submit(document_uuid, title, body)
    except ProviderRejected:
        with write_transaction(db.session):
            _found(document_uuid, "was deleted while the provider refused it").status = REJECTED
        raise
    with write_transaction(db.session):
        document = _found(
            document_uuid, f"was deleted while the provider took it (its reference: {reference})"
        )
        document.status = FORWARDED
        document.provider_reference = reference
        document.forwarded_at = utcnow()


def _found(document_uuid: str, gone: str = "does not exist") -> Document:
    document = db.session.execute(
        select(Document).where(Document.uuid == document_uuid)
    ).scalar_one_or_none()
    if document is None:
        raise DocumentNotFound(f"document {document_uuid} {gone}")
    return document
