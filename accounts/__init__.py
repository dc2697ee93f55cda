"""Operator accounts: users, hashed passwords, permissions, sign-in throttling."""
