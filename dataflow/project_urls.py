"""The checkout's own URL map (``ROOT_URLCONF``): the admin at ``/admin/`` and the app's URLs
(``dataflow.urls``) at the root, as a project that installs the app includes them under a
prefix of its own."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("dataflow.urls")),
]
