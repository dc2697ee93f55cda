"""``flask openapi …``: print the documents, and write the README's client section from them.

The section (curl and Python ``httpx``) is generated from the tenant document's
own examples, between two markers in README.md; ``--check`` exits 1 when it is
stale, and a test runs that check, as for docs/EVENTS.md.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import click
from flask import current_app
from flask.cli import AppGroup

from blueprints.api.contract import BACKOFFICE
from blueprints.openapi import Document, build
from blueprints.tenant_api.contract import TENANT
from security.refusal import read_text, refuse, write_text

BEGIN = "<!-- tenant-api-clients: written by `flask openapi readme` from the document -->"
END = "<!-- /tenant-api-clients -->"
DOCUMENTS: dict[str, Document] = {"tenant": TENANT, "backoffice": BACKOFFICE}

openapi_cli = AppGroup("openapi", help="The OpenAPI documents of the JSON APIs.")


def _path_with_examples(path: str, operation: dict[str, Any]) -> str:
    for param in operation["parameters"]:
        if param["in"] == "path":
            path = path.replace("{" + param["name"] + "}", str(param["example"]))
    return path


def _curl(method: str, path: str, body: Any) -> str:
    verb = "" if method == "get" else f"-X {method.upper()} "
    parts = [f'curl -s {verb}"$TASKLEDGER_URL{path}"', '-H "Authorization: Bearer $TOKEN"']
    if body is not None:
        parts += ['-H "Content-Type: application/json"', f"-d {shlex.quote(json.dumps(body))}"]
    return " \\\n  ".join(parts)


def _httpx(method: str, path: str, body: Any) -> str:
    # The examples' bodies are JSON objects of strings and numbers: JSON is valid Python there.
    arguments = json.dumps(path) + (f", json={json.dumps(body)}" if body is not None else "")
    return f"answer = client.{method}({arguments})"


def client_section(document: dict[str, Any]) -> str:
    """Markdown: a curl command and an httpx call per token operation, with its example answer."""
    out = [
        BEGIN,
        "",
        "With `TASKLEDGER_URL` (e.g. `https://taskledger.example.com`) and `TOKEN` set;",
        "in Python, the calls below share one client:",
        "",
        "```python",
        "import os",
        "",
        "import httpx",
        "",
        "client = httpx.Client(",
        '    base_url=os.environ["TASKLEDGER_URL"],',
        '    headers={"Authorization": f"Bearer {os.environ[\'TOKEN\']}"},',
        ")",
        "```",
    ]
    for template, item in document["paths"].items():
        for method, operation in item.items():
            if operation.get("security") == []:
                continue  # the document itself: see "API contracts"
            path = _path_with_examples(template, operation)
            content = operation.get("requestBody", {}).get("content", {})
            body = next(iter(content.values()))["example"] if content else None
            status, reply = next(iter(operation["responses"].items()))
            [example] = [media["example"] for media in reply["content"].values()]
            headers = [
                name for name, header in reply.get("headers", {}).items() if header["required"]
            ]
            answer = f"`{status}`" + (
                f" with {', '.join(f'`{h}`' for h in headers)}" if headers else ""
            )
            out += [
                "",
                f"**{operation['summary']}** — `{method.upper()} {template}`",
                "",
                "```sh",
                _curl(method, path, body),
                "```",
                "",
                "```python",
                _httpx(method, path, body),
                "```",
                "",
                f"answers {answer}:",
                "",
                "```json",
                json.dumps(example, indent=2, ensure_ascii=False),
                "```",
            ]
    out += ["", END]
    return "\n".join(out)


class MissingMarkers(ValueError):
    """The file has no place for the section: its markers are missing."""


def readme_with_section(readme: str, section: str) -> str:
    """``readme`` with the text between its markers replaced by ``section``."""
    before, begin, rest = readme.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise MissingMarkers(f"no {BEGIN} … {END} markers")
    return before + section + after


@openapi_cli.command("dump")
@click.argument("document", type=click.Choice(sorted(DOCUMENTS)))
def dump_command(document: str) -> None:
    """Print a document (to open it in any OpenAPI viewer)."""
    click.echo(json.dumps(build(current_app, DOCUMENTS[document]), indent=2, ensure_ascii=False))


@openapi_cli.command("readme")
@click.option("--check", is_flag=True, help="Exit 1 if the README's client section is stale.")
@click.option("--path", default="README.md", show_default=True)
def readme_command(check: bool, path: str) -> None:
    """Write the README's client section from the tenant document's examples."""
    current = read_text(path)
    try:
        written = readme_with_section(current, client_section(build(current_app, TENANT)))
    except MissingMarkers as exc:
        refuse(f"{path} has {exc}")
    if check:
        if written != current:
            refuse(f"{path} is stale: run `flask openapi readme`")
        click.echo(f"{path} is up to date")
        return
    write_text(path, written)
    click.echo(f"wrote {path}")
