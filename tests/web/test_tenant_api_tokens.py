"""``flask tenants token create|list|revoke``: shown once, stored hashed, revocable."""

from __future__ import annotations

import webtest
from sqlalchemy import select, update

from asyncrequests.models import TenantApiToken
from extensions import db
from tests.web.tenant_api_support import PERIOD, bearer, make_tenant


def tenant(app) -> int:
    with app.app_context():
        return make_tenant("Acme")


def test_a_created_token_is_printed_once_stored_hashed_and_authenticates(app, cli):
    tenant_id = tenant(app)

    result = cli.invoke(args=["tenants", "token", "create", str(tenant_id), "--name", "erp"])

    assert result.exit_code == 0, result.output
    token = result.stdout.strip().splitlines()[-1]
    assert token.startswith("tlk_")
    assert "not shown again" in result.stderr
    with app.app_context():
        row = db.session.execute(select(TenantApiToken)).scalar_one()
        stored = " ".join(str(v) for v in (row.public_id, row.name, row.secret_hash))
    assert token not in stored and token.split("_", 2)[2] not in stored
    assert (row.tenant_id, row.name) == (tenant_id, "erp")
    webtest.TestApp(app).post_json(
        "/api/v1/statements/requests", {"period": PERIOD}, headers=bearer(token), status=202
    )
    listing = cli.invoke(args=["tenants", "token", "list", str(tenant_id)])
    assert row.public_id in listing.output and token not in listing.output


def test_a_token_for_an_unknown_tenant_is_refused_in_one_line(app, cli):
    result = cli.invoke(args=["tenants", "token", "create", "424242"])

    assert result.exit_code == 1
    assert result.stderr == "error: no tenant 424242\n"


def test_a_tokens_name_is_refused_in_one_line_when_it_cannot_be_shown_or_kept(app, cli):
    tenant_id = tenant(app)
    for name in ("\x1b[2J\x1b]0;pwned\x07evil", "a\x9bb", "n" * 121):
        result = cli.invoke(args=["tenants", "token", "create", str(tenant_id), "--name", name])

        assert result.exit_code == 1, (name, result.output)
        assert result.stderr.startswith("error: a token's name has at most 120 characters")
        assert result.stderr.count("\n") == 1
    with app.app_context():
        assert db.session.execute(select(TenantApiToken)).first() is None


def test_the_token_list_shows_a_stored_names_control_characters_escaped(app, cli):
    # A name stored before names were checked: the listing must not steer the terminal.
    tenant_id = tenant(app)
    cli.invoke(args=["tenants", "token", "create", str(tenant_id), "--name", "erp"])
    with app.app_context():
        db.session.execute(update(TenantApiToken).values(name="\x1b[2Jerp"))
        db.session.commit()

    listing = cli.invoke(args=["tenants", "token", "list", str(tenant_id)]).stdout

    assert "\x1b" not in listing and "\\x1b[2Jerp" in listing


def test_a_tenant_id_that_is_not_a_number_is_a_usage_error(cli):
    result = cli.invoke(args=["tenants", "token", "create", "acme"])

    assert result.exit_code == 2


def test_revoking_an_unknown_token_is_refused_and_revoking_twice_is_harmless(app, cli):
    tenant_id = tenant(app)
    token = cli.invoke(args=["tenants", "token", "create", str(tenant_id)]).stdout.split()[-1]

    unknown = cli.invoke(args=["tenants", "token", "revoke", "0123456789ab"])
    first = cli.invoke(args=["tenants", "token", "revoke", token])
    # By its id as listed, in capitals as it may be pasted: the same token.
    second = cli.invoke(args=["tenants", "token", "revoke", token.split("_")[1].upper()])

    assert (unknown.exit_code, unknown.stderr) == (1, "error: no token 0123456789ab\n")
    assert first.exit_code == 0 and "revoked" in first.stderr
    assert second.exit_code == 0 and "already revoked" in second.stderr
    webtest.TestApp(app).get(
        "/api/v1/async-requests/" + "0" * 36, headers=bearer(token), status=401
    )


def test_revoking_by_a_mistyped_token_never_shows_its_secret(app, cli):
    tenant_id = tenant(app)
    token = cli.invoke(args=["tenants", "token", "create", str(tenant_id)]).stdout.split()[-1]
    prefix, token_id, secret = token.split("_", 2)
    mistyped = (
        f"{prefix}_{token_id.upper()}_{secret}",  # the id pasted in capitals
        f"{prefix}_{token_id[:-1]}_{secret}",  # a character of the id lost
        f"{prefix.upper()}_{token_id}_{secret}",
    )

    for typed in mistyped:
        result = cli.invoke(args=["tenants", "token", "revoke", typed])

        assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.output
        assert result.stderr.startswith("error: ")
        assert secret not in result.stderr and secret.lower() not in result.stderr
    webtest.TestApp(app).get(
        "/api/v1/async-requests/" + "0" * 36, headers=bearer(token), status=404
    )


def test_revoking_by_a_whole_token_whose_secret_does_not_match_revokes_nothing(app, cli):
    tenant_id = tenant(app)
    token = cli.invoke(args=["tenants", "token", "create", str(tenant_id)]).stdout.split()[-1]
    prefix, token_id, secret = token.split("_", 2)
    forged = f"{prefix}_{token_id}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}"

    result = cli.invoke(args=["tenants", "token", "revoke", forged])

    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == f"error: the secret is not that of token {token_id}; nothing revoked\n"
    webtest.TestApp(app).get(
        "/api/v1/async-requests/" + "0" * 36, headers=bearer(token), status=404
    )
    assert cli.invoke(args=["tenants", "token", "revoke", token]).exit_code == 0
    # Once revoked, a forged secret is still not told apart by what it revoked.
    again = cli.invoke(args=["tenants", "token", "revoke", forged])
    assert again.exit_code == 1 and "already" not in again.stderr
