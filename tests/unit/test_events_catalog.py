from __future__ import annotations

from pathlib import Path

from taskrunner.events import catalog, catalog_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "EVENTS.md"


def test_the_event_catalog_in_docs_matches_the_code(app):
    # The app's modules are imported: their own events (``declare``) are in the catalog.
    assert DOC.read_text() == catalog_markdown(), "docs/EVENTS.md is stale: run make catalog"


def test_every_event_is_in_the_catalog_with_a_description(app):
    text = catalog_markdown()
    assert "alerts.alert" in {event.name for event in catalog()}
    for event in catalog():
        assert f"## `{event.name}`" in text
        assert (event.__doc__ or "").strip()


def test_the_catalog_check_command_fails_on_a_stale_file(cli, tmp_path):
    stale = tmp_path / "EVENTS.md"
    stale.write_text("# old\n")

    result = cli.invoke(args=["events", "catalog", "--check", "--path", str(stale)])

    assert result.exit_code == 1
    assert "is stale" in result.stderr
