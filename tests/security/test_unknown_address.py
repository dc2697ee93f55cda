"""An address no account has is checked against a stand-in hash, as long as a known one."""

from __future__ import annotations

from werkzeug.security import check_password_hash, generate_password_hash

from accounts import services


def method(password_hash: str) -> str:
    return password_hash.split("$", 1)[0]


def test_the_stand_in_hash_is_a_real_hash_of_the_method_new_passwords_get():
    assert method(services._DUMMY_HASH) == method(generate_password_hash("any password here"))
    assert check_password_hash(services._DUMMY_HASH, "not-a-real-password-at-all")
    assert not check_password_hash(services._DUMMY_HASH, "")
