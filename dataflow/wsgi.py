"""The WSGI application that gunicorn serves (``dataflow.wsgi:application``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dataflow.settings")
application = get_wsgi_application()
