"""Entry module of the web app: ``gunicorn wsgi:app``, or ``flask --app wsgi run``."""

from app import create_app
from startup import prepare_process

app = create_app()
prepare_process(app)
