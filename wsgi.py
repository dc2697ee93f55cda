"""Entry module of the web app: ``gunicorn wsgi:app``, or ``flask --app wsgi run``."""

from app import create_app
from config import ConfigError
from startup import prepare_process, refuse_config

try:
    app = create_app()
    prepare_process(app)
except ConfigError as exc:
    raise refuse_config(exc) from None
