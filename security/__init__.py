"""Protections every part of the app shares: the scrubbing log layer, rate limits,
private instance files and the echo of untrusted input. ``docs/security.md`` says
what each one defends against."""
